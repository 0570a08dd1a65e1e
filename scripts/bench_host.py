"""The runner's host cost: microseconds per step over a plain loop whose step takes a few ms.

On a GPU the step's Python is what the device waits on (issue 61: ResNet20 at batch 512 on an
H200, 21 ms a step, ran x1.087 in the runner); on the 2-core CPU a 270 ms step hides it. Here the
model and batch are small (ResNet8, batch 2, one thread: a plain step of a few ms), so the
runner's extra work per step shows, in one process, interleaved with the plain loop over
several rounds (the order rotated each round).

Variants (`bench_overhead.runner` each: ``normbench.run.loop.train.run`` as a user runs it):

- ``off``: diagnostics off, the default logger (W&B offline, local files, progress display);
- ``default``: the default diagnostics at their cadence: one run fires each group of periodic
  diagnostics (``bn_stats`` every 10 steps, the probes every 500, …) once inside the timed window;
  the steps where none fired give the every-step part, and each group's cost per call (that step's
  time minus the median of the run's other steps) is added divided by its period (before
  2026-12-06 the every-step part came from a run at the preset's own cadence, which counted
  ``bn_stats`` twice and, in a 300-step window, one probe at step 250 besides);
- ``local``: diagnostics off, ``logger=local`` (no W&B).

Each run's time per step is the mean over its timed steps (the logging steps every
``log_every_n_steps`` included); ``extra_us_per_step`` is the median over rounds of (runner -
plain) in the same round, with its min-max. Three clocks: wall (``extra_us_per_step``), this
process's CPU (``extra_cpu_us_per_step``: all its threads) and the main thread's CPU
(``extra_thread_us_per_step``: what a GPU waits on). W&B's service process is a separate
process: its CPU is ``child_cpu_us_per_step``. On a shared machine every mean scatters by a
millisecond a step from run to run (other jobs slow the caches, not only the clock), so a fourth
column reads the floor: ``extra_floor_us_per_step``, per run the 10th percentile of the main
thread's CPU over the steps that do not log plus the logging steps' extra (their 10th percentile
less the others') over ``log_every_n_steps`` (10), runner less plain loop, median over rounds
(``default``: plus each periodic call's cost over its period). A fifth reads the runner's own
work directly, not as the difference of two noisy totals: ``direct_us_per_step``, the main
thread's CPU a step outside the work both loops do (the model's forward, the loss, zero_grad,
backward, the optimizer's and the schedule's steps, timed by `Inside`), runner less plain loop
(what is left in the plain loop: asking for the batch), median over rounds. The load averages at
the start and the end go in every row.

    python scripts/bench_overhead.py --host            # results/bench/host_cpu.csv
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_overhead
import torch
import torch.nn.functional as F
from bench_io import CsvRows, versions
from bench_overhead import REPO, Stopwatch, call_costs, compose_cfg, periodic_groups, plain_loop, runner

from normbench.base.output import format_table

TARGETS_US = {"off": 50.0, "default": 250.0}
CLOCKS = ("wall", "cpu", "thread")
LOG_EVERY = 10  # the default logger.log_every_n_steps


class Inside:
    """The main thread's CPU seconds inside the work a plain loop and the runner both do: the
    model's forward (module hooks, outermost call), ``F.cross_entropy``, ``zero_grad``,
    ``torch.autograd.backward``, the optimizer's step (its global hooks) and the schedule's."""

    def __init__(self) -> None:
        self.total, self._depth, self._t = 0.0, 0, 0.0

    def enter(self, *_: object) -> None:
        if self._depth == 0:
            self._t = time.thread_time()
        self._depth += 1

    def leave(self, *_: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.total += time.thread_time() - self._t

    def wrapped(self, fn):  # type: ignore[no-untyped-def]
        @functools.wraps(fn)
        def inner(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.enter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.leave()

        return inner

    def install(self) -> None:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        register_module_forward_pre_hook(self.enter)
        register_module_forward_hook(self.leave)
        register_optimizer_step_pre_hook(self.enter)
        register_optimizer_step_post_hook(self.leave)
        F.cross_entropy = self.wrapped(F.cross_entropy)
        torch.autograd.backward = self.wrapped(torch.autograd.backward)
        torch.optim.Optimizer.zero_grad = self.wrapped(torch.optim.Optimizer.zero_grad)
        lr = torch.optim.lr_scheduler.LRScheduler
        lr.step = self.wrapped(lr.step)


INSIDE = Inside()


class HostStopwatch(Stopwatch):
    """`Stopwatch` that also reads `INSIDE`'s total at each stamp."""

    def wrap(self, batches):  # type: ignore[no-untyped-def]
        self.inside: list[float] = []
        for batch in super().wrap(batches):
            self.inside.append(INSIDE.total)
            yield batch
        self.inside.append(INSIDE.total)


def variants(warmup: int, steps: int) -> tuple[dict[str, list[str]], dict[int, tuple[int, int]], dict]:
    """Each variant's overrides; the steps where the default preset's periodic groups fire once
    (``fired``: step -> group) and the groups."""
    groups = periodic_groups(compose_cfg(["diagnostics=default"]).diagnostics)
    fired = {warmup + 5 + 7 * i: g for i, g in enumerate(sorted(groups))}
    if fired and max(fired) >= steps - 1:
        raise SystemExit(f"bench_host: --steps={steps} leaves no room for {len(groups)} periodic calls")
    moved = []
    for k, g in fired.items():
        for name in groups[g]:
            moved += [f"diagnostics.{name}.every_n_steps=0", f"++diagnostics.{name}.steps=[{k}]"]
    overrides = {
        "plain": [],
        "off": ["diagnostics=off"],
        "default/periodic once": ["diagnostics=default", *moved],
        "local": ["diagnostics=off", "logger=local"],
    }
    return overrides, fired, groups


def per_step(stopwatch: Stopwatch, fired: dict[int, tuple[int, int]] | None = None) -> dict[str, float]:
    """Mean seconds per timed step on each clock over the steps where no periodic group fired
    (``fired``: step -> group; none: every timed step), and the children's CPU a step."""
    w = stopwatch.warmup
    n = len(stopwatch.wall) - 1 - w
    quiet = [i for i in range(n) if i + w not in (fired or {})]
    steps = {c: stopwatch.durations(c) for c in CLOCKS}  # each clock's durations, read once
    out = {c: statistics.fmean(steps[c][i] for i in quiet) for c in CLOCKS}
    out["child"] = (stopwatch.children[-1] - stopwatch.children[0]) / n
    out["floor"] = floor(stopwatch)
    inside = stopwatch.inside  # type: ignore[attr-defined]
    out["direct"] = out["thread"] - statistics.fmean(inside[w + i + 1] - inside[w + i] for i in quiet)
    return out


def floor(stopwatch: Stopwatch) -> float:
    """The main thread's CPU a step with the disturbances of other jobs left out: the 10th
    percentile of the steps that do not log, plus the logging steps' extra over ``LOG_EVERY``."""
    d = stopwatch.durations("thread")
    logs = [x for i, x in enumerate(d) if (stopwatch.warmup + i + 1) % LOG_EVERY == 0]
    rest = [x for i, x in enumerate(d) if (stopwatch.warmup + i + 1) % LOG_EVERY != 0]
    low = statistics.quantiles(rest, n=10)[0]
    return low + (statistics.quantiles(logs, n=10)[0] - low) / LOG_EVERY


def summary_rows(times: dict[str, list[dict[str, float]]], calls: list[dict], fired: dict, groups: dict,
                 meta: dict[str, Any]) -> list[dict[str, Any]]:  # fmt: skip
    """One row per variant (``default``: at its cadence) and one per periodic group's call."""
    rounds = len(times["plain"])
    series = {v: list(times[v]) for v in ("off", "local")}
    # the default preset at its cadence: its every-step part (the steps where nothing periodic
    # fired) + each group's call / its period
    series["default"] = [
        {c: t[c] + sum(call[c][g] / g[0] for g in fired.values()) for c in CLOCKS}
        | {k: t[k] + sum(call["thread"][g] / g[0] for g in fired.values()) for k in ("floor", "direct")}
        | {"child": t["child"]}
        for t, call in zip(times["default/periodic once"], calls)
    ]
    rows = []
    plain_us = {c: statistics.median(t[c] for t in times["plain"]) * 1e6 for c in CLOCKS}
    for v in ("off", "default", "local"):
        extra = {c: [(t[c] - p[c]) * 1e6 for t, p in zip(series[v], times["plain"])] for c in CLOCKS}
        target = TARGETS_US.get(v)
        row = {"variant": v, "plain_step_us": round(plain_us["wall"]), "plain_cpu_step_us": round(plain_us["cpu"])}
        for c, name in (("wall", "extra_us_per_step"), ("cpu", "extra_cpu_us_per_step"),
                        ("thread", "extra_thread_us_per_step")):  # fmt: skip
            row[name] = round(statistics.median(extra[c]))
            row[f"{name}_range"] = f"{min(extra[c]):.0f}..{max(extra[c]):.0f}"
        floors = [(t["floor"] - p["floor"]) * 1e6 for t, p in zip(series[v], times["plain"])]
        row["extra_floor_us_per_step"] = round(statistics.median(floors))
        row["extra_floor_us_per_step_range"] = f"{min(floors):.0f}..{max(floors):.0f}"
        direct = [(t["direct"] - p["direct"]) * 1e6 for t, p in zip(series[v], times["plain"])]
        row["direct_us_per_step"] = round(statistics.median(direct))
        row["direct_us_per_step_range"] = f"{min(direct):.0f}..{max(direct):.0f}"
        row["child_cpu_us_per_step"] = round(statistics.median(t["child"] for t in series[v]) * 1e6)
        row["target_us"] = f"<= {target:g}" if target else ""
        row["meets_cpu"] = (row["extra_cpu_us_per_step"] <= target) if target else ""
        row["meets_floor"] = (row["extra_floor_us_per_step"] <= target) if target else ""
        row["meets_direct"] = (row["direct_us_per_step"] <= target) if target else ""
        rows.append({**row, "rounds": rounds, **meta})
    for g in fired.values():
        per_call = {c: [call[c][g] * 1e6 for call in calls] for c in CLOCKS}
        row = {"variant": f"call: {'+'.join(groups[g])} every {g[0]} (us per call)", "plain_step_us": "",
               "plain_cpu_step_us": ""}  # fmt: skip
        for c, name in (("wall", "extra_us_per_step"), ("cpu", "extra_cpu_us_per_step"),
                        ("thread", "extra_thread_us_per_step")):  # fmt: skip
            row[name] = round(statistics.median(per_call[c]))
            row[f"{name}_range"] = f"{min(per_call[c]):.0f}..{max(per_call[c]):.0f}"
        blank = ("extra_floor_us_per_step", "extra_floor_us_per_step_range", "direct_us_per_step",
                 "direct_us_per_step_range", "child_cpu_us_per_step", "target_us", "meets_cpu", "meets_floor",
                 "meets_direct")  # fmt: skip
        rows.append({**row, **dict.fromkeys(blank, ""), "rounds": rounds, **meta})
    return rows


def tiny_run(steps: int, batch_size: int, depth: int = 8, threads: int = 1, warmup: int = 30) -> list[str]:
    """The overrides of a run whose host work shows: one epoch of ``steps`` steps of ResNet``depth`` +
    BN at ``batch_size`` on synthetic images, on the CPU with ``threads`` threads (also
    `bench_host_parts`)."""
    return ["hardware=cpu", "dataset=synthetic_images", f"dataset.num_train={steps * batch_size}",
            f"dataset.num_test={batch_size}", "model=resnet20", f"model.depth={depth}", "norm=bn",
            f"batch_size={batch_size}", f"eval_batch_size={batch_size}", "epochs=1",
            f"throughput_warmup_steps={warmup}", f"hardware.num_threads={threads}"]  # fmt: skip


def commit() -> str:
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True,
                             check=True, timeout=10).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="bench_overhead.py --host", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300, help="training steps per run (one epoch)")
    parser.add_argument("--warmup", type=int, default=30, help="steps left out at the start of each run")
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--depth", type=int, default=8, help="ResNet depth (6n+2)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--override", action="append", default=[], help="a further config override (repeatable)")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "host_cpu.csv")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    device = torch.device("cpu")
    INSIDE.install()
    bench_overhead.Stopwatch = HostStopwatch  # plain_loop and runner make theirs from this name
    overrides, fired, groups = variants(args.warmup, args.steps)
    work = Path(tempfile.mkdtemp(prefix="bench_host-"))
    base = [*tiny_run(args.steps, args.batch_size, args.depth, args.threads, args.warmup),
            f"dataset.root={work / 'data'}", *args.override]  # fmt: skip
    load_start = os.getloadavg()
    print(f"[bench_host] {' '.join(base)}; load average {load_start}", flush=True)
    times: dict[str, list[dict[str, float]]] = {v: [] for v in overrides}
    calls: list[dict[str, dict]] = []
    names = list(overrides)
    with CsvRows(args.out, versions(device)) as sink:
        for r in range(args.rounds):
            for v in names[r % len(names) :] + names[: r % len(names)]:
                cfg = compose_cfg(base + overrides[v])
                measure = plain_loop if v == "plain" else runner
                stopwatch, _ = measure(cfg, device, Path(tempfile.mkdtemp(dir=work)), args.warmup)
                periodic = v == "default/periodic once"
                times[v].append(per_step(stopwatch, fired if periodic else None))  # its every-step part
                if periodic:
                    calls.append({c: call_costs(stopwatch, fired, c) for c in CLOCKS})
            laps = ", ".join(f"{v} {times[v][-1]['cpu'] * 1e6:.0f}" for v in names)
            print(f"[bench_host] round {r + 1}/{args.rounds} (us CPU per step): {laps}", flush=True)
            meta = {"steps": args.steps - args.warmup, "batch_size": args.batch_size, "model": f"resnet{args.depth}",
                    "threads": args.threads, "load_start": "/".join(f"{x:.2f}" for x in load_start),
                    "load_end": "/".join(f"{x:.2f}" for x in os.getloadavg()), "commit": commit()}  # fmt: skip
            sink.replace(summary_rows(times, calls, fired, groups, meta))
    print(format_table(sink.rows, sink.columns))
    print(f"[bench_host] load average {os.getloadavg()}; wrote {args.out}")
