"""The runner's overhead budget, measured in one process, interleaved.

(a) a plain hand-written PyTorch loop and (b) the normbench runner (``normbench.run.loop.train.run``,
default logger: W&B offline + local files + progress bar) train the same model on the same
batches from the same seed; the runner also runs with each diagnostics preset in
``conf/diagnostics/`` (``off``, ``default``, ``full`` where present), and with diagnostics off
and ``logger=local`` (no W&B), which shows what the W&B process costs.

A preset's periodic diagnostics (every N > 1 steps: ``bn_stats`` every 10, the probes every
100-500 steps) would fall inside a short timed window at an arbitrary rate, so a preset with any
runs with each group of them (those sharing a cadence, which run at the same step) moved to one
step inside the window. A group's cost per call is that step's time minus the median time of the
run's other steps; the steps where no group fired give the preset's every-step part (row
``runner/diagnostics=<p> (every-step part)``), and its cost at its cadence is that part plus
Σ cost per call / N over the groups (row ``runner/diagnostics=<p> (at its cadence)``,
the one the budget applies to; ``call: ...`` rows give each group's cost per call). Both are timed the same
way: a timestamp each time the training loop asks for its next batch, so a step's time holds
the batch's making, forward, backward, optimizer, and whatever the loop does around them
(metrics, logging, diagnostics); set-up, evaluation and the first ``--warmup`` steps are left
out. Rounds rotate the order of the variants; ratios are taken within each round, and the
table gives their median (min–max). The data path alone (permutation, gather, crop, flip,
normalize) is timed over the same epoch, against the plain loop's training step.

Each time is given twice: wall clock, and CPU seconds (this process's threads plus its
descendants', i.e. W&B's service process). On a machine shared with other jobs the wall-clock
ratios scatter; the CPU ratios measure the work the runner adds and scatter much less.

Each row gives the runner's extra microseconds per step beside its ratios (``extra_us_per_step``,
``extra_cpu_us_per_step``: the median over rounds of variant - plain; for a ``call`` row its cost
per call divided by its period): on a GPU, where the step is short, that is what the device
waits on (``gpu_check.sh``'s overhead step prints it).

The CSV is rewritten after every round with the medians over the rounds done so far (column
``rounds``), so a run stopped part-way leaves the table of its complete rounds; every row ends
with the versions of ``bench_io.VERSION_COLUMNS`` (gpu, driver, cuda, cudnn, torch).

    python scripts/bench_overhead.py                       # CPU: results/bench/overhead_cpu.csv
    python scripts/bench_overhead.py --device cuda --batch-size 512
    python scripts/bench_overhead.py --batch-size 2 --override model.depth=8   # the runner's per-step cost
    python scripts/bench_overhead.py --host      # µs per step over a ~ms plain step: results/bench/host_cpu.csv

``--host`` runs `bench_host` instead (its own flags: ``--host --help``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_io import CsvRows, versions  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.core.global_hydra import GlobalHydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from normbench.base.output import format_table  # noqa: E402
from normbench.cli.main import config_dir  # noqa: E402
from normbench.config import parse  # noqa: E402
from normbench.models import build_model  # noqa: E402
from normbench.norms import norm_factory  # noqa: E402
from normbench.optim import build_optimizer, lr_factor  # noqa: E402
from normbench.resume.seeds import seed_everything  # noqa: E402
from normbench.run.loop import train  # noqa: E402
from normbench.tasks import build_task  # noqa: E402

TARGETS = {"runner/diagnostics=off": 1.03, "runner/diagnostics=default (at its cadence)": 1.05}
DATA_PATH_TARGET = 20.0


def children_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process's live descendants, e.g. W&B's service
    process, from ``/proc`` (Linux); 0 elsewhere."""
    proc = Path("/proc")
    if not proc.is_dir():
        return 0.0
    parents: dict[int, list[tuple[int, float]]] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, ppid = int(stat.parent.name), int(fields[1])
        parents.setdefault(ppid, []).append((pid, (int(fields[11]) + int(fields[12])) / tick))
    total, todo = 0.0, [os.getpid()]
    while todo:
        for pid, cpu in parents.get(todo.pop(), []):
            total += cpu
            todo.append(pid)
    return total


class Stopwatch:
    """Wall-clock and CPU timestamps taken each time the training loop asks for its next batch.

    CPU time is this process's (all its threads); the descendants' CPU time (W&B's service
    process) is read at the first timed step and at the end."""

    def __init__(self, device: torch.device, warmup: int) -> None:
        self.device = device
        self.warmup = warmup
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.thread: list[float] = []  # the main thread's CPU: what a GPU would wait on
        self.children: list[float] = []

    def wrap(self, batches: Iterable[Any]) -> Iterator[Any]:
        it = iter(batches)
        while True:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            if len(self.wall) == self.warmup:
                self.children.append(children_cpu_seconds())
            self.wall.append(time.perf_counter())
            self.cpu.append(time.process_time())
            self.thread.append(time.thread_time())
            try:
                batch = next(it)
            except StopIteration:
                self.children.append(children_cpu_seconds())
                return
            yield batch

    def durations(self, clock: str = "wall") -> list[float]:
        """Seconds of each step from ``warmup`` on (index 0 = step ``warmup``)."""
        stamps = {"wall": self.wall, "cpu": self.cpu, "thread": self.thread}[clock]
        return [b - a for a, b in zip(stamps[self.warmup : -1], stamps[self.warmup + 1 :])]

    def per_step(self) -> dict[str, float]:
        """Mean seconds per step after the first ``warmup`` steps: wall, this process's CPU,
        and the descendants' CPU."""
        steps = len(self.wall) - 1 - self.warmup
        return {
            "wall": (self.wall[-1] - self.wall[self.warmup]) / steps,
            "cpu": (self.cpu[-1] - self.cpu[self.warmup]) / steps,
            "children_cpu": (self.children[-1] - self.children[0]) / steps,
        }


class TimedTask:
    """The task, with its training batches passed through a `Stopwatch`."""

    def __init__(self, task: Any, stopwatch: Stopwatch) -> None:
        self.task = task
        self.stopwatch = stopwatch

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("task", "stopwatch"):
            object.__setattr__(self, name, value)
        else:
            setattr(self.task, name, value)

    def train_batches(self, epoch: int, generator: torch.Generator) -> Iterator[Any]:
        return self.stopwatch.wrap(self.task.train_batches(epoch, generator))


def compose_cfg(overrides: list[str]) -> DictConfig:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def plain_loop(cfg: DictConfig, device: torch.device, data_dir: Path, warmup: int) -> tuple[Stopwatch, float]:
    """What one would write by hand: same seed, data, model, optimizer and schedule."""
    cfg = parse(cfg)
    seed_everything(cfg.seed)
    task = build_task(cfg.dataset, device, data_dir, batch_size=cfg.batch_size, eval_batch_size=cfg.eval_batch_size)
    model = build_model(cfg.model, norm_factory(cfg.norm), **task.model_kwargs()).to(device)
    total = task.steps_per_epoch()
    optimizer = build_optimizer(model, cfg.optimizer, cfg.lr, cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg.schedule, total))
    generator = torch.Generator().manual_seed(cfg.seed)
    stopwatch = Stopwatch(device, warmup)
    model.train()
    for x, y in stopwatch.wrap(task.train_batches(0, generator)):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
    return stopwatch, loss.item()


def runner(cfg: DictConfig, device: torch.device, run_dir: Path, warmup: int) -> tuple[Stopwatch, float]:
    """``normbench.run.loop.train.run`` as it is, its task's training batches timed by a `Stopwatch`."""
    stopwatch = Stopwatch(device, warmup)
    original = train.build_task
    train.build_task = lambda *a, **kw: TimedTask(original(*a, **kw), stopwatch)
    try:
        result = train.run(cfg, run_dir)
    finally:
        train.build_task = original
    assert result["status"] == "finished", result
    last = [line for line in (run_dir / "metrics.jsonl").read_text().splitlines() if "train/batch_loss" in line][-1]
    return stopwatch, float(json.loads(last)["train/batch_loss"])


def data_path(cfg: DictConfig, device: torch.device, data_dir: Path) -> dict[str, float]:
    """Seconds per batch of making the training batches alone (one epoch): wall and CPU."""
    task = build_task(cfg.dataset, device, data_dir, batch_size=cfg.batch_size, eval_batch_size=cfg.eval_batch_size)
    generator = torch.Generator().manual_seed(cfg.seed)
    stopwatch = Stopwatch(device, 0)
    for _ in stopwatch.wrap(task.train_batches(0, generator)):
        pass
    return stopwatch.per_step()


def periodic_groups(diagnostics: DictConfig) -> dict[tuple[int, int], list[str]]:
    """The preset's diagnostics that run every N > 1 steps, grouped by (N, start_step): the
    members of a group run at the same steps."""
    groups: dict[tuple[int, int], list[str]] = {}
    for name, sub in diagnostics.items():
        every = int(sub.get("every_n_steps", 0) or 0) if isinstance(sub, DictConfig) else 0
        if every > 1:
            groups.setdefault((every, int(sub.get("start_step", 0) or 0)), []).append(str(name))
    return groups


def call_costs(stopwatch: Stopwatch, fired: dict[int, tuple[int, int]], clock: str) -> dict[tuple[int, int], float]:
    """Seconds each group's call added: its step's time minus the median of the other steps."""
    steps = stopwatch.durations(clock)
    fired_at = {k - stopwatch.warmup: g for k, g in fired.items()}
    base = statistics.median(t for i, t in enumerate(steps) if i not in fired_at)
    return {g: steps[i] - base for i, g in fired_at.items()}


def every_step_part(stopwatch: Stopwatch, fired: dict[int, tuple[int, int]], children_cpu: float) -> dict[str, float]:
    """Seconds a step over the timed steps where no periodic group fired: wall, and CPU (this
    process's, plus its descendants' per step, which cannot be split by step)."""
    fired_at = {k - stopwatch.warmup for k in fired}
    out = {}
    for clock in ("wall", "cpu"):
        steps = [t for i, t in enumerate(stopwatch.durations(clock)) if i not in fired_at]
        out[clock] = statistics.fmean(steps)
    out["cpu"] += children_cpu
    return out


def _extra_us(values: list[float], reference: list[float]) -> int:
    """The median over rounds of (variant - plain) seconds per step, in microseconds: the host
    cost per step, which a ratio hides behind a long step (issue 61)."""
    return round(statistics.median(v - r for v, r in zip(values, reference)) * 1e6)


def _ratio_stats(values: list[float], reference: list[float]) -> tuple[float, float, float]:
    ratios = [v / r for v, r in zip(values, reference)]
    return statistics.median(ratios), min(ratios), max(ratios)


def main() -> None:
    if "--host" in sys.argv[1:]:
        import bench_host

        return bench_host.main([a for a in sys.argv[1:] if a != "--host"])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30, help="training steps per run (one epoch)")
    parser.add_argument("--warmup", type=int, default=5, help="steps left out at the start of each run")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--model", default="resnet20")
    parser.add_argument("--norm", default="bn")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--override", action="append", default=[], help="a further config override (repeatable)")
    parser.add_argument("--out", type=Path, default=None, help="default: results/bench/overhead_<device>.csv")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    out = args.out or REPO / "results" / "bench" / f"overhead_{args.device}.csv"
    device = torch.device(args.device)

    presets = sorted(p.stem for p in (Path(config_dir()) / "diagnostics").glob("*.yaml"))
    presets = [p for p in ("off", "default", "full") if p in presets]
    overrides = {"plain": [], "runner/diagnostics=off,logger=local": ["diagnostics=off", "logger=local"]}
    once: dict[str, tuple[str, dict[int, tuple[int, int]]]] = {}  # variant -> (preset, step -> group)
    groups_of = {p: periodic_groups(compose_cfg([f"diagnostics={p}"]).diagnostics) for p in presets}
    for p in presets:
        groups = groups_of[p]
        if not groups:  # nothing periodic: the run as configured is its every-step part
            overrides[f"runner/diagnostics={p}"] = [f"diagnostics={p}"]
            continue
        fired = {args.warmup + 2 + 3 * i: g for i, g in enumerate(sorted(groups))}
        if max(fired) >= args.steps - 1:
            parser.error(f"--steps={args.steps} leaves no room to time {len(groups)} periodic calls of {p}")
        moved = []
        for k, g in fired.items():
            for name in groups[g]:
                moved += [f"diagnostics.{name}.every_n_steps=0", f"++diagnostics.{name}.steps=[{k}]"]
        once[f"runner/diagnostics={p},periodic once"] = (p, fired)
        overrides[f"runner/diagnostics={p},periodic once"] = [f"diagnostics={p}", *moved]
    variants = list(overrides)
    work = Path(tempfile.mkdtemp(prefix="bench_overhead-"))
    base = [
        f"hardware={args.device}",
        "dataset=synthetic_images",
        f"dataset.root={work / 'data'}",
        f"dataset.num_train={args.steps * args.batch_size}",
        f"dataset.num_test={args.batch_size}",
        f"model={args.model}",
        f"norm={args.norm}",
        f"batch_size={args.batch_size}",
        f"eval_batch_size={args.batch_size}",
        "epochs=1",
        f"throughput_warmup_steps={args.warmup}",
        f"hardware.num_threads={torch.get_num_threads()}",
        *args.override,
    ]
    print(f"[bench] {' '.join(base)}; load average {os.getloadavg()}", flush=True)
    m = Measured(variants, once, groups_of)
    with CsvRows(out, versions(device)) as sink:
        for r in range(args.rounds):
            order = variants[r % len(variants) :] + variants[: r % len(variants)]
            for variant in order:
                cfg = compose_cfg(base + overrides[variant])
                run_dir = Path(tempfile.mkdtemp(dir=work))
                measure = plain_loop if variant == "plain" else runner
                stopwatch, m.losses[variant] = measure(cfg, device, run_dir, args.warmup)
                t = stopwatch.per_step()
                m.wall[variant].append(t["wall"])
                m.work_s[variant].append(t["cpu"] + t["children_cpu"])
                m.children[variant].append(t["children_cpu"])
                if variant in once:
                    fired = once[variant][1]
                    for clock in ("wall", "cpu"):
                        m.costs[f"{variant}/{clock}"].append(call_costs(stopwatch, fired, clock))
                    m.every_step[variant].append(every_step_part(stopwatch, fired, t["children_cpu"]))
            m.data.append(data_path(compose_cfg(base), device, work))
            laps = ", ".join(f"{v} {m.wall[v][-1] * 1e3:.0f} ms ({m.work_s[v][-1] * 1e3:.0f} ms CPU)" for v in variants)
            print(f"[bench] round {r + 1}/{args.rounds}: {laps}", flush=True)
            sink.replace(summary_rows(m, args.device))  # the rounds so far: a cut run leaves them
    print(format_table(sink.rows, sink.columns))
    setting = f"batch {args.batch_size}, {args.rounds} rounds x {args.steps - args.warmup} timed steps"
    print(f"[bench] {setting}; torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"[bench] load average {os.getloadavg()}; wrote {out}")


@dataclass
class Measured:
    """Each variant's per-round measurements (``wall``, ``work_s``: this process's + descendants'
    CPU, ``children``: descendants' CPU; seconds per step), its last loss, the periodic groups'
    cost per call (``costs["<variant>/<clock>"]``, one dict per round) and the data path's times."""

    variants: list[str]
    once: dict[str, tuple[str, dict[int, tuple[int, int]]]]  # variant -> (preset, step -> group)
    groups_of: dict[str, dict[tuple[int, int], list[str]]]
    wall: dict[str, list[float]] = field(default_factory=dict)
    work_s: dict[str, list[float]] = field(default_factory=dict)
    children: dict[str, list[float]] = field(default_factory=dict)
    losses: dict[str, float] = field(default_factory=dict)
    costs: dict[str, list[dict[tuple[int, int], float]]] = field(default_factory=dict)
    data: list[dict[str, float]] = field(default_factory=list)
    every_step: dict[str, list[dict[str, float]]] = field(default_factory=dict)  # "periodic once" variants

    def __post_init__(self) -> None:
        for series in (self.wall, self.work_s, self.children):
            series.update({v: [] for v in self.variants})
        self.every_step.update({v: [] for v in self.once})
        self.costs.update({f"{v}/{c}": [] for v in self.once for c in ("wall", "cpu")})


def summary_rows(m: Measured, device: str) -> list[dict[str, Any]]:
    """The table over the complete rounds measured so far (``rounds``: how many)."""
    wall, work_s, children, losses = dict(m.wall), dict(m.work_s), dict(m.children), dict(m.losses)
    costs, once, data = m.costs, m.once, m.data
    rounds = len(data)
    cadence_rows = []
    for variant, (p, _fired) in once.items():  # the preset at its cadence: every-step part + calls / N
        every_row, cadence_row = f"runner/diagnostics={p} (every-step part)", f"runner/diagnostics={p} (at its cadence)"
        for clock, series in (("wall", wall), ("cpu", work_s)):
            series[every_row] = [e[clock] for e in m.every_step[variant]]
            series[cadence_row] = [
                e[clock] + sum(cost / g[0] for g, cost in c.items())
                for e, c in zip(m.every_step[variant], costs[f"{variant}/{clock}"])
            ]
        for row in (every_row, cadence_row):
            children[row], losses[row] = children[variant], losses[variant]
        cadence_rows += [every_row, cadence_row]
    rows = []
    names: dict[str, str] = {}
    for variant in [v for v in m.variants if v not in once] + cadence_rows:
        ratio, lo, hi = _ratio_stats(wall[variant], wall["plain"])
        cpu_ratio, cpu_lo, cpu_hi = _ratio_stats(work_s[variant], work_s["plain"])
        target = TARGETS.get(variant)
        rows.append(
            {
                "device": device,
                "variant": names.get(variant, variant),
                "step_ms": round(statistics.median(wall[variant]) * 1e3, 1),
                "ratio": round(ratio, 3),
                "ratio_range": f"{lo:.3f}-{hi:.3f}",
                "extra_us_per_step": _extra_us(wall[variant], wall["plain"]),
                "cpu_step_ms": round(statistics.median(work_s[variant]) * 1e3, 1),
                "cpu_ratio": round(cpu_ratio, 3),
                "cpu_ratio_range": f"{cpu_lo:.3f}-{cpu_hi:.3f}",
                "extra_cpu_us_per_step": _extra_us(work_s[variant], work_s["plain"]),
                "child_cpu_ms": round(statistics.median(children[variant]) * 1e3, 2),
                "last_loss": round(losses[variant], 6),
                "target": f"<= {target}" if target else "",
                "meets_wall": (ratio <= target) if target else "",
                "meets_cpu": (cpu_ratio <= target) if target else "",
                "rounds": rounds,
            }
        )
    for variant, (p, fired) in once.items():  # each group's cost per call
        for g in fired.values():
            per_call = {clock: [c[g] for c in costs[f"{variant}/{clock}"]] for clock in ("wall", "cpu")}
            ratio, lo, hi = _ratio_stats([c / g[0] for c in per_call["wall"]], wall["plain"])
            cpu_ratio, cpu_lo, cpu_hi = _ratio_stats([c / g[0] for c in per_call["cpu"]], work_s["plain"])
            rows.append(
                {
                    "device": device,
                    "variant": f"call ({p}): {'+'.join(m.groups_of[p][g])} every {g[0]} (ratio: call / {g[0]} / plain)",
                    "step_ms": round(statistics.median(per_call["wall"]) * 1e3, 1),
                    "ratio": round(ratio, 4),
                    "ratio_range": f"{lo:.4f}-{hi:.4f}",
                    "extra_us_per_step": round(statistics.median(per_call["wall"]) / g[0] * 1e6),
                    "cpu_step_ms": round(statistics.median(per_call["cpu"]) * 1e3, 1),
                    "cpu_ratio": round(cpu_ratio, 4),
                    "cpu_ratio_range": f"{cpu_lo:.4f}-{cpu_hi:.4f}",
                    "extra_cpu_us_per_step": round(statistics.median(per_call["cpu"]) / g[0] * 1e6),
                    "child_cpu_ms": "",
                    "last_loss": "",
                    "target": "",
                    "meets_wall": "",
                    "meets_cpu": "",
                    "rounds": rounds,
                }
            )
    data_ratio, data_lo, data_hi = _ratio_stats(wall["plain"], [d["wall"] for d in data])
    cpu_data_ratio, cpu_data_lo, cpu_data_hi = _ratio_stats(work_s["plain"], [d["cpu"] for d in data])
    rows.append(
        {
            "device": device,
            "variant": "data_path (ratio: training step / batch making)",
            "step_ms": round(statistics.median(d["wall"] for d in data) * 1e3, 2),
            "ratio": round(data_ratio, 1),
            "ratio_range": f"{data_lo:.1f}-{data_hi:.1f}",
            "extra_us_per_step": "",
            "cpu_step_ms": round(statistics.median(d["cpu"] for d in data) * 1e3, 2),
            "cpu_ratio": round(cpu_data_ratio, 1),
            "cpu_ratio_range": f"{cpu_data_lo:.1f}-{cpu_data_hi:.1f}",
            "extra_cpu_us_per_step": "",
            "child_cpu_ms": "",
            "last_loss": "",
            "target": f">= {DATA_PATH_TARGET}",
            "meets_wall": data_ratio >= DATA_PATH_TARGET,
            "meets_cpu": cpu_data_ratio >= DATA_PATH_TARGET,
            "rounds": rounds,
        }
    )
    return rows


if __name__ == "__main__":
    main()
