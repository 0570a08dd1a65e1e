"""Where metrics go: local files in the run directory, and Weights & Biases.

Local: ``metrics.jsonl`` (one JSON object a line: ``step``, ``epoch`` and the metrics),
``config.yaml`` (the resolved config) and ``summary.json`` (final metrics, status, wall time,
git commit, versions, device), each written atomically. W&B: imported lazily; offline unless
``logger.mode`` or ``$WANDB_MODE`` says otherwise; finished in a ``finally`` so that each job
of a multirun in one process is its own W&B run.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EPOCH_KEY_PREFIXES = ("train/", "val/", "test/", "perf/")


@dataclass
class Histogram:
    """A histogram metric: ``counts[i]`` values fell in [edges[i], edges[i+1]).

    W&B logs it as ``wandb.Histogram``; ``metrics.jsonl`` leaves it out (log its summary numbers
    beside it).
    """

    counts: list[float]
    edges: list[float]


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file, flush + fsync, then ``os.replace``."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _jsonable(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # "nan" / "inf": JSON has no literal for them
    return v


def git_commit(path: Path | None = None) -> str | None:
    """The commit of the normbench checkout (``+dirty`` when it has uncommitted changes)."""
    cwd = path or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("+dirty" if dirty else "")


class LocalSink:
    def __init__(self, run_dir: Path, config: Mapping[str, Any], config_yaml: str) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir / "config.yaml", config_yaml)
        self._metrics = open(run_dir / "metrics.jsonl", "a")  # noqa: SIM115  (open for the run)

    def log(self, step: int, epoch: int, metrics: Mapping[str, Any]) -> None:
        row = {"step": step, "epoch": epoch}
        row.update({k: _jsonable(v) for k, v in metrics.items() if not isinstance(v, Histogram)})
        self._metrics.write(json.dumps(row) + "\n")
        self._metrics.flush()

    def finish(self, summary: Mapping[str, Any]) -> None:
        self._metrics.close()
        text = json.dumps({k: _jsonable(v) for k, v in summary.items()}, indent=2, default=str)
        atomic_write_text(self.run_dir / "summary.json", text + "\n")


class WandbSink:
    def __init__(self, cfg: Mapping[str, Any], run_dir: Path, config: Mapping[str, Any], group: str | None) -> None:
        import wandb

        mode = cfg.get("mode") or os.environ.get("WANDB_MODE") or "offline"
        self.wandb = wandb
        self.run = wandb.init(
            project=cfg.get("project"),
            entity=cfg.get("entity"),
            group=cfg.get("group") or group,
            job_type=cfg.get("job_type"),
            tags=list(cfg.get("tags") or []),
            name=cfg.get("run_name"),
            dir=str(run_dir),
            config=dict(config),
            mode=mode,
        )
        self.run.define_metric("epoch")
        for prefix in EPOCH_KEY_PREFIXES:
            self.run.define_metric(f"{prefix}*", step_metric="epoch")
        self.run.define_metric("train/batch_loss")  # against the global step
        self.run.define_metric("lr")

    @property
    def run_id(self) -> str:
        return self.run.id

    def log(self, step: int, epoch: int, metrics: Mapping[str, Any]) -> None:
        row = {
            k: self.wandb.Histogram(np_histogram=(v.counts, v.edges)) if isinstance(v, Histogram) else v
            for k, v in metrics.items()
        }
        self.run.log(row, step=step)

    def finish(self, summary: Mapping[str, Any]) -> None:
        try:
            self.run.summary.update({k: _jsonable(v) for k, v in summary.items()})
        finally:
            self.run.finish()


class MetricLogger:
    """Fans each ``log(step, epoch, metrics)`` out to the sinks that are on."""

    def __init__(self, sinks: list[Any]) -> None:
        self.sinks = sinks

    def log(self, step: int, epoch: int, metrics: Mapping[str, Any]) -> None:
        for sink in self.sinks:
            sink.log(step, epoch, metrics)

    def finish(self, summary: Mapping[str, Any]) -> None:
        errors = []
        for sink in self.sinks:
            try:
                sink.finish(summary)
            except Exception as e:  # a failing sink must not hide the others' results
                errors.append(e)
        if errors:
            raise errors[0]
