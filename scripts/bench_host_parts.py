"""Where the runner's host time goes, piece by piece: the main thread's CPU per call of each part of
a training step and of a log row (issue 61).

`bench_host.py` gives the runner's extra microseconds per step as a whole; this script names the
pieces. It runs ``normbench.run.loop.train.run`` once, in this process, on a model and batch small
enough that the host's work shows (ResNet8 + BN at batch 2, one thread, synthetic images), with
``time.thread_time_ns`` around each call of the parts listed in `PARTS` (wrapped where they are
looked up: the runner's module globals and the classes' methods). For each part: its calls, the
median and mean CPU microseconds per call (the first ``--skip`` calls left out: set-up, the first
W&B rows' metric definitions), and its mean per training step. Parts nest (``train_step`` holds
``forward_loss``; ``after_step`` holds the log row), so the rows do not add up. Each wrapper adds
~1 us to its part. In place, every piece costs several times what it costs alone in a loop of its
own: between them the CPU model's kernels evict the caches (results/bench/README.md).

    python scripts/bench_host_parts.py                        # diagnostics off, W&B offline
    python scripts/bench_host_parts.py --logger local         # no W&B
    python scripts/bench_host_parts.py --diagnostics default  # with bn_stats' before / after step
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_host import tiny_run  # noqa: E402
from bench_overhead import compose_cfg  # noqa: E402

from normbench.base.output import format_table  # noqa: E402
from normbench.diagnostics.bn_stats import BNStatsHook  # noqa: E402
from normbench.run.loop import train  # noqa: E402
from normbench.sinks.files import LocalSink, MetricLogger  # noqa: E402
from normbench.sinks.wandb_run import WandbSink  # noqa: E402
from normbench.tasks.classification import ImageClassificationTask  # noqa: E402

PARTS: list[tuple[Any, str, str]] = [
    (train, "train_step", "train_step (forward, backward, optimizer, statistics)"),
    (ImageClassificationTask, "forward_loss", "  forward_loss (model, loss, statistics)"),
    (BNStatsHook, "before_step", "  bn_stats.before_step"),
    (BNStatsHook, "after_step", "  bn_stats.after_step"),
    (train, "after_step", "after_step (at a log row or a display update)"),
    (train, "batch_metrics", "  batch_metrics (the batch's loss and accuracy to the host)"),
    (train, "log", "  log (the row, to every sink)"),
    (MetricLogger, "log", "    MetricLogger.log"),
    (LocalSink, "log", "      LocalSink.log (metrics.jsonl)"),
    (WandbSink, "log", "      WandbSink.log (the hand-off to its worker)"),
    (train, "diverged_step", "  diverged_step (the divergence check)"),
    (train, "show_progress", "  show_progress"),
]
"""(owner, attribute, label): the parts timed, in the order shown."""


def instrument(parts: list[tuple[Any, str, str]]) -> dict[str, list[int]]:
    """Wrap each part with a thread-CPU stopwatch; the returned lists fill as the run calls them."""
    times: dict[str, list[int]] = defaultdict(list)
    for owner, name, label in parts:
        fn = getattr(owner, name)

        def timed(*args: Any, _fn: Any = fn, _label: str = label, **kwargs: Any) -> Any:
            t0 = time.thread_time_ns()
            try:
                return _fn(*args, **kwargs)
            finally:
                times[_label].append(time.thread_time_ns() - t0)

        setattr(owner, name, functools.wraps(fn)(timed))
    return times


def rows(times: dict[str, list[int]], steps: int, skip: int) -> list[dict[str, Any]]:
    """One row per part that was called: calls, median and mean us per call, mean us per step."""
    out = []
    for _, _, label in PARTS:
        calls = times.get(label, [])[skip:]
        if not calls:
            continue
        out.append({
            "part": label,
            "calls": len(calls),
            "median_us_per_call": round(statistics.median(calls) / 1e3, 1),
            "mean_us_per_call": round(statistics.mean(calls) / 1e3, 1),
            "us_per_step": round(sum(calls) / 1e3 / steps, 1),
        })  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--logger", choices=("default", "local"), default="default", help="default: W&B + local")
    parser.add_argument("--diagnostics", default="off", help="a preset of conf/diagnostics/")
    parser.add_argument("--skip", type=int, default=5, help="first calls of each part left out")
    parser.add_argument("--override", action="append", default=[], help="a further config override (repeatable)")
    args = parser.parse_args(argv)
    logger = ["logger=local"] if args.logger == "local" else []
    overrides = [*tiny_run(args.steps, args.batch_size), f"diagnostics={args.diagnostics}", *logger, *args.override]
    cfg = compose_cfg(overrides)
    times = instrument(PARTS)
    t0 = time.thread_time_ns()
    with tempfile.TemporaryDirectory() as work:
        train.run(cfg, Path(work) / "run")
    total = (time.thread_time_ns() - t0) / 1e3 / args.steps
    table = rows(times, args.steps, args.skip)
    print(f"[bench_host_parts] {args.steps} steps, batch {args.batch_size}, logger={args.logger}, "
          f"diagnostics={args.diagnostics}: the run's main-thread CPU {total:.0f} us a step (set-up included)")
    print(format_table(table, ["part", "calls", "median_us_per_call", "mean_us_per_call", "us_per_step"]))
    return table


if __name__ == "__main__":
    main()
