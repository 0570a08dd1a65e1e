"""Epoch time of ResNet20 on a CIFAR-10-shaped task (50,000 + 10,000 synthetic 32×32 images)
under each hardware setting, through the normbench runner.

Each variant trains ``--epochs`` epochs; the first is left out (allocator, cuDNN autotuning,
torch.compile), and the training epoch time of the others comes from the runner's own
``perf/samples_per_s`` (training steps only; evaluation is timed separately as the rest of the
wall time). The validation accuracy is printed beside it, so a fast variant that learns nothing
shows.

Each variant's row is written (and flushed) as soon as the variant has run, so a run stopped
part-way leaves the variants it finished; ``speedup_vs_fp32`` compares with an ``fp32`` row
measured before it in the same run (the first variant by default). Every row ends with the
versions of ``bench_io.VERSION_COLUMNS`` (gpu, driver, cuda, cudnn, torch).

    python scripts/bench_epoch.py --device cuda                 # results/bench/gpu_epoch_time.csv
    python scripts/bench_epoch.py --device cpu --num-train 2048 --num-test 512 --out /tmp/x.csv
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench_io import CsvRows, versions  # noqa: E402
from bench_overhead import compose_cfg  # noqa: E402

from normbench.base.output import format_table  # noqa: E402
from normbench.run.loop import train  # noqa: E402

VARIANTS = {
    "fp32": [],
    "bf16": ["hardware.precision=bf16"],
    "fp32+channels_last": ["hardware.channels_last=true"],
    "bf16+channels_last": ["hardware.precision=bf16", "hardware.channels_last=true"],
    "bf16+channels_last+compile": ["hardware.precision=bf16", "hardware.channels_last=true", "hardware.compile=true"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--epochs", type=int, default=3, help="the first is warm-up")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--num-train", type=int, default=50_000)
    parser.add_argument("--num-test", type=int, default=10_000)
    parser.add_argument("--norm", default="bn")
    parser.add_argument("--out", type=Path, default=None, help="default: results/bench/gpu_epoch_time.csv on CUDA")
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    out = args.out or REPO / "results" / "bench" / (
        "gpu_epoch_time.csv" if args.device == "cuda" else "cpu_epoch_time.csv"
    )
    work = Path(tempfile.mkdtemp(prefix="bench_epoch-"))
    base = [
        f"hardware={args.device}",
        "model=resnet20",
        f"norm={args.norm}",
        "dataset=synthetic_images",
        f"dataset.root={work / 'data'}",
        f"dataset.num_train={args.num_train}",
        f"dataset.num_test={args.num_test}",
        f"batch_size={args.batch_size}",
        "eval_batch_size=1000",
        f"epochs={args.epochs}",
        "lr=0.2",
        "logger=local",
        "logger.progress_bar=false",
    ]
    print(f"[bench] {' '.join(base)}", flush=True)
    with CsvRows(out, versions(args.device)) as sink:
        reference = None
        for name in args.variants:
            row = run_variant(name, base, work, args)
            if name == "fp32":
                reference = row["train_epoch_s"]
            if reference:
                row["speedup_vs_fp32"] = round(reference / row["train_epoch_s"], 2)
            sink.write(row)
            print(f"[bench] {name}: {row['train_epoch_s']:.2f} s/epoch, val/acc {row['val_acc']}", flush=True)
    print(format_table(sink.rows, sink.columns))
    print(f"[bench] wrote {out}")


def run_variant(name: str, base: list[str], work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """One variant through the runner: its row (without the versions)."""
    cfg = compose_cfg(base + VARIANTS[name])
    run_dir = work / name.replace("+", "_")
    t0 = time.perf_counter()
    result = train.run(cfg, run_dir)
    wall = time.perf_counter() - t0
    epochs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [row["perf/samples_per_s"] for row in epochs if "perf/samples_per_s" in row][1:]
    steps = args.num_train // args.batch_size
    epoch_s = statistics.mean(steps * args.batch_size / r for r in rates)
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "device": summary["device"],
        "variant": name,
        "batch_size": args.batch_size,
        "num_train": args.num_train,
        "timed_epochs": len(rates),
        "train_epoch_s": round(epoch_s, 3),
        "samples_per_s": round(statistics.mean(rates), 1),
        "speedup_vs_fp32": "",
        "run_wall_s": round(wall, 1),
        "val_acc": round(float(result.get("val/acc", float("nan"))), 4),
        "status": result["status"],
    }


if __name__ == "__main__":
    main()
