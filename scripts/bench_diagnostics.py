"""What the diagnostics cost: the share of training time each one adds at the ``default`` and ``full`` cadences.

ResNet20 + BatchNorm on a synthetic CIFAR-shaped batch stream (random uint8 images and labels,
augmented as CIFAR-10 is: the cost does not depend on the pixels), SGD with momentum.

The machine may be shared and noisy, so every cost is a ratio to training steps timed right
beside it:

- A diagnostic that runs before a step: each call through `run_hooks` (as the runner calls it,
  restoration included) is timed between two training steps; ``call_in_steps`` is the median
  of call time / the mean of those two steps. It adds ``call_in_steps / every_n_steps`` to the
  training time.
- ``bn_stats`` works inside every recorded step: ``call_in_steps`` is the median, over
  interleaved pairs, of (step with the norms recording their statistics) / (step without) − 1.
- ``TOTAL``: diagnostics with the same cadence are due at the same steps and run together (the
  landscape / predictiveness / β-smoothness hooks then share one gradient-step probe), so each
  cadence group is timed as a group; the total adds up the groups and bn_stats.

Rows are written (and flushed) as they are measured, each ending with the versions of
``bench_io.VERSION_COLUMNS`` (gpu, driver, cuda, cudnn, torch); the output defaults to
``results/bench/diagnostics_<device type>.csv``.

    python scripts/bench_diagnostics.py --threads 1 --out results/bench/diagnostics_cpu.csv
    python scripts/bench_diagnostics.py --device cuda        # -> results/bench/diagnostics_cuda.csv
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from bench_io import CsvRows, versions
from omegaconf import OmegaConf

import normbench.data  # noqa: F401  (before normbench.tasks.classification)
from normbench.diagnostics import DiagContext, build_diagnostics, diagnostics_config, run_hooks
from normbench.models import build_model
from normbench.norms import norm_factory
from normbench.tasks.classification import ImageClassificationTask

CONF = Path(__file__).resolve().parents[1] / "conf" / "diagnostics"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def setup(device: torch.device, batch_size: int) -> tuple[Any, ...]:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    n = batch_size * 20
    images = torch.randint(0, 256, (n, 3, 32, 32), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, 10, (n,), generator=g)
    task = ImageClassificationTask(images, labels, images[:256], labels[:256], 10, batch_size, 256, True, device)
    model_cfg = OmegaConf.create({"name": "resnet20", "depth": 20, "shortcut": "A", "zero_init_residual": False})
    model = build_model(model_cfg, norm_factory("bn"), num_classes=10).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    return task, model, optimizer


def batches(task: ImageClassificationTask):
    g = torch.Generator().manual_seed(1)
    epoch = 0
    while True:
        yield from task.train_batches(epoch, g)
        epoch += 1


def train_step(task, model, optimizer, batch, hooks, step: int) -> None:
    for hook in hooks:
        hook.before_step(step)
    loss = task.forward_loss(model, batch).loss
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    for hook in hooks:
        hook.after_step(step)


def time_step(task, model, optimizer, stream, device, hooks=(), step: int = 0) -> float:
    batch = next(stream)
    sync(device)
    t0 = time.perf_counter()
    train_step(task, model, optimizer, batch, hooks, step)
    sync(device)
    return time.perf_counter() - t0


def bn_stats_ratio(task, model, optimizer, stream, device, pairs: int) -> float:
    """Median over interleaved pairs of (step with bn_stats recording) / (step without) − 1."""
    (hook,) = build_diagnostics({"bn_stats": {"every_n_steps": 1}})
    hook.setup(model)
    ratios = []
    for i in range(pairs + 2):
        for _, module in hook.layers:
            module.record_stats = False
        plain = time_step(task, model, optimizer, stream, device)
        for _, module in hook.layers:
            module.record_stats = True
        recorded = time_step(task, model, optimizer, stream, device, [hook], i)
        if i >= 2:  # warm-up
            ratios.append(recorded / plain - 1)
    hook.epoch_end()
    for _, module in hook.layers:
        module.record_stats = False
    return statistics.median(ratios)


def call_ratio(hooks, task, model, optimizer, stream, device, repeats: int) -> tuple[float, float]:
    """(median seconds per call, median of call time / the mean of the steps just before and after it)."""
    for hook in hooks:
        hook.setup(model)
    calls, ratios = [], []
    for r in range(repeats):
        before = time_step(task, model, optimizer, stream, device)
        batch = next(stream)
        ctx = DiagContext(
            model, batch, lambda m, b: task.forward_loss(m, b).loss, optimizer, 1000 + r, 0, 0.1, task=task
        )
        sync(device)
        t0 = time.perf_counter()
        run_hooks(hooks, ctx)
        sync(device)
        call = time.perf_counter() - t0
        after = time_step(task, model, optimizer, stream, device)
        calls.append(call)
        ratios.append(call / ((before + after) / 2))
    return statistics.median(calls), statistics.median(ratios)


HEAVY = ("hessian", "grad_variance")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--steps", type=int, default=12, help="interleaved step pairs for bn_stats")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls of each diagnostic (1 for hessian)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--configs", nargs="+", default=["default", "full"])
    parser.add_argument("--out", type=Path, default=None, help="default: results/bench/diagnostics_<device type>.csv")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    out = args.out or Path("results") / "bench" / f"diagnostics_{device.type}.csv"
    with CsvRows(out, versions(device)) as sink:
        measure_all(args, device, sink)
    print(f"wrote {out}")


def measure_all(args: argparse.Namespace, device: torch.device, sink: CsvRows) -> None:
    """Every diagnostic of ``args.configs``: each row written to ``sink`` as soon as it is measured."""
    columns = ["config", "diagnostic", "every_n_steps", "seconds_per_call", "call_in_steps", "added_share"]

    def write(*values: Any) -> None:
        sink.write(dict(zip(columns, values)))

    task, model, optimizer = setup(device, args.batch_size)
    stream = batches(task)
    for _ in range(3):  # warm-up
        time_step(task, model, optimizer, stream, device)
    bn_ratio = bn_stats_ratio(task, model, optimizer, stream, device, args.steps)
    print(f"bn_stats recording adds {bn_ratio:.2%} to a step", flush=True)

    measured: dict[str, tuple[float, float]] = {}  # settings → (seconds per call, calls in steps)

    def measure(names: list[str], typed: dict[str, Any]) -> tuple[float, float]:
        key = repr(
            [
                (n, {k: v for k, v in vars(typed[n]).items() if k not in ("every_n_steps", "steps", "start_step")})
                for n in names
            ]
        )
        if key not in measured:
            repeats = 1 if any(n in HEAVY for n in names) else args.repeats
            hooks = build_diagnostics({n: typed[n] for n in names})
            measured[key] = call_ratio(hooks, task, model, optimizer, stream, device, repeats)
        return measured[key]

    for config in args.configs:
        typed = diagnostics_config(OmegaConf.load(CONF / f"{config}.yaml"))
        groups: dict[int, list[str]] = defaultdict(list)
        total = 0.0
        for name, cfg in typed.items():
            if not cfg.enabled:
                continue
            if name == "bn_stats":
                added = bn_ratio / cfg.every_n_steps
                write(config, name, cfg.every_n_steps, "", f"{bn_ratio:.4f}", f"{added:.4f}")
                total += added
                continue
            groups[cfg.every_n_steps].append(name)
            call_s, steps = measure([name], typed)
            added = steps / cfg.every_n_steps
            write(config, name, cfg.every_n_steps, f"{call_s:.3f}", f"{steps:.2f}", f"{added:.4f}")
            print(
                f"{config:8s} {name:16s} every {cfg.every_n_steps:4d}: {call_s:8.2f}s/call = {steps:6.2f} steps, "
                f"adds {added:.2%}",
                flush=True,
            )
        for every, names in sorted(groups.items()):
            call_s, steps = measure(names, typed)
            if len(names) > 1:
                write(config, "+".join(names), every, f"{call_s:.3f}", f"{steps:.2f}", f"{steps / every:.4f}")
                print(f"{config:8s} {'+'.join(names)} every {every}: {steps:.2f} steps, adds {steps / every:.2%}")
            total += steps / every
        write(config, "TOTAL", "", "", "", f"{total:.4f}")
        print(f"{config:8s} TOTAL adds {total:.2%} to the training time", flush=True)


if __name__ == "__main__":
    main()
