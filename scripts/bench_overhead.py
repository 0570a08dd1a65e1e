"""The runner's overhead budget, measured in one process, interleaved.

(a) a plain hand-written PyTorch loop and (b) the normbench runner (``normbench.train.run``,
default logger: W&B offline + local files + progress bar) train the same model on the same
batches from the same seed; the runner also runs with each diagnostics preset in
``conf/diagnostics/`` (``off``, ``default``, ``full`` where present), and with diagnostics off
and ``logger=local`` (no W&B), which shows what the W&B process costs. Both are timed the same
way: a timestamp each time the training loop asks for its next batch, so a step's time holds
the batch's making, forward, backward, optimizer, and whatever the loop does around them
(metrics, logging, diagnostics); set-up, evaluation and the first ``--warmup`` steps are left
out. Rounds rotate the order of the variants; ratios are taken within each round, and the
table gives their median (min–max). The data path alone (permutation, gather, crop, flip,
normalize) is timed over the same epoch, in images/s, against the plain loop's training images/s.

    python scripts/bench_overhead.py                       # CPU: results/bench/overhead_cpu.csv
    python scripts/bench_overhead.py --device cuda --batch-size 512
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hydra import compose, initialize_config_dir  # noqa: E402
from hydra.core.global_hydra import GlobalHydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from normbench import train  # noqa: E402
from normbench.cli import config_dir  # noqa: E402
from normbench.data import build_task  # noqa: E402
from normbench.models import build_model  # noqa: E402
from normbench.norms import norm_factory  # noqa: E402
from normbench.optim import build_optimizer, lr_factor  # noqa: E402

TARGETS = {"runner/diagnostics=off": 1.03, "runner/diagnostics=default": 1.10}
DATA_PATH_TARGET = 20.0


class Stopwatch:
    """Timestamps taken each time the training loop asks for its next batch."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stamps: list[float] = []

    def wrap(self, batches: Iterable[Any]) -> Iterator[Any]:
        it = iter(batches)
        while True:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.stamps.append(time.perf_counter())
            try:
                batch = next(it)
            except StopIteration:
                return
            yield batch

    def step_seconds(self, warmup: int) -> float:
        """Mean seconds per step after the first ``warmup`` steps."""
        steps = len(self.stamps) - 1
        return (self.stamps[-1] - self.stamps[warmup]) / (steps - warmup)


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


def plain_loop(cfg: DictConfig, device: torch.device, data_dir: Path) -> tuple[Stopwatch, float]:
    """What one would write by hand: same seed, data, model, optimizer and schedule."""
    train.seed_everything(cfg.seed)
    task = build_task(cfg.dataset, cfg, device, data_dir)
    model = build_model(cfg.model, norm_factory(cfg.norm), **task.model_kwargs()).to(device)
    total = task.steps_per_epoch()
    optimizer = build_optimizer(model, cfg.optimizer, cfg.lr, cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg.schedule, total))
    generator = torch.Generator().manual_seed(cfg.seed)
    stopwatch = Stopwatch(device)
    model.train()
    for x, y in stopwatch.wrap(task.train_batches(0, generator)):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        scheduler.step()
    return stopwatch, loss.item()


def runner(cfg: DictConfig, device: torch.device, run_dir: Path) -> tuple[Stopwatch, float]:
    stopwatch = Stopwatch(device)
    original = train.build_task
    train.build_task = lambda *a, **kw: TimedTask(original(*a, **kw), stopwatch)
    try:
        result = train.run(cfg, run_dir)
    finally:
        train.build_task = original
    assert result["status"] == "finished", result
    last = [line for line in (run_dir / "metrics.jsonl").read_text().splitlines() if "train/batch_loss" in line][-1]
    return stopwatch, float(json.loads(last)["train/batch_loss"])


def data_path(cfg: DictConfig, device: torch.device, data_dir: Path) -> float:
    """Images/s of making the training batches alone (one epoch)."""
    task = build_task(cfg.dataset, cfg, device, data_dir)
    generator = torch.Generator().manual_seed(cfg.seed)
    stopwatch = Stopwatch(device)
    images = sum(len(y) for _, y in stopwatch.wrap(task.train_batches(0, generator)))
    return images / (stopwatch.stamps[-1] - stopwatch.stamps[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30, help="training steps per run (one epoch)")
    parser.add_argument("--warmup", type=int, default=5, help="steps left out at the start of each run")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--model", default="resnet20")
    parser.add_argument("--norm", default="bn")
    parser.add_argument("--out", type=Path, default=None, help="default: results/bench/overhead_<device>.csv")
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    out = args.out or REPO / "results" / "bench" / f"overhead_{args.device}.csv"
    device = torch.device(args.device)

    presets = sorted(p.stem for p in (Path(config_dir()) / "diagnostics").glob("*.yaml"))
    presets = [p for p in ("off", "default", "full") if p in presets]
    overrides = {"plain": [], "runner/diagnostics=off,logger=local": ["diagnostics=off", "logger=local"]}
    overrides.update({f"runner/diagnostics={p}": [f"diagnostics={p}"] for p in presets})
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
    ]
    print(f"[bench] {' '.join(base)}; load average {os.getloadavg()}", flush=True)
    times: dict[str, list[float]] = {v: [] for v in variants}
    losses: dict[str, float] = {}
    data_rates: list[float] = []
    for r in range(args.rounds):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for variant in order:
            cfg = compose_cfg(base + overrides[variant])
            run_dir = Path(tempfile.mkdtemp(dir=work))
            if variant == "plain":
                stopwatch, losses[variant] = plain_loop(cfg, device, run_dir)
            else:
                stopwatch, losses[variant] = runner(cfg, device, run_dir)
            times[variant].append(stopwatch.step_seconds(args.warmup))
        data_rates.append(data_path(compose_cfg(base), device, work))
        print(
            f"[bench] round {r + 1}/{args.rounds}: " + ", ".join(f"{v} {times[v][-1] * 1e3:.1f} ms" for v in variants)
        )

    rows = []
    plain = times["plain"]
    train_rate = args.batch_size / statistics.median(plain)
    for variant in variants:
        ratios = [t / p for t, p in zip(times[variant], plain)]
        target = TARGETS.get(variant)
        rows.append(
            {
                "device": args.device,
                "variant": variant,
                "rounds": args.rounds,
                "timed_steps": args.steps - args.warmup,
                "batch_size": args.batch_size,
                "median_step_ms": round(statistics.median(times[variant]) * 1e3, 2),
                "ratio_vs_plain": round(statistics.median(ratios), 4),
                "ratio_min": round(min(ratios), 4),
                "ratio_max": round(max(ratios), 4),
                "images_per_s": round(args.batch_size / statistics.median(times[variant]), 1),
                "last_loss": round(losses[variant], 6),
                "target": f"<= {target}" if target else "",
                "meets_target": (statistics.median(ratios) <= target) if target else "",
            }
        )
    data_rate = statistics.median(data_rates)
    rows.append(
        {
            "device": args.device,
            "variant": "data_path",
            "rounds": args.rounds,
            "timed_steps": args.steps,
            "batch_size": args.batch_size,
            "median_step_ms": round(args.batch_size / data_rate * 1e3, 3),
            "ratio_vs_plain": round(data_rate / train_rate, 2),
            "ratio_min": round(min(data_rates) / train_rate, 2),
            "ratio_max": round(max(data_rates) / train_rate, 2),
            "images_per_s": round(data_rate, 1),
            "last_loss": "",
            "target": f">= {DATA_PATH_TARGET}x training images/s",
            "meets_target": data_rate / train_rate >= DATA_PATH_TARGET,
        }
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    from normbench.callbacks import format_table

    print(format_table(rows, list(rows[0])))
    print(f"[bench] torch {torch.__version__}, {torch.get_num_threads()} threads; load average {os.getloadavg()}")
    print(f"[bench] wrote {out}")


if __name__ == "__main__":
    main()
