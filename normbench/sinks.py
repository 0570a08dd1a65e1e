"""Where metrics go: local files in the run directory, and Weights & Biases.

Local: ``metrics.jsonl`` (one JSON object a line: ``step``, ``epoch`` and the metrics),
``config.yaml`` (the resolved config) and ``summary.json`` (final metrics, status, wall time,
git commit, versions, device), each written atomically. W&B: imported lazily; offline unless
``logger.mode`` or ``$WANDB_MODE`` says otherwise; finished in a ``finally`` so that each job
of a multirun in one process is its own W&B run.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import string
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normbench.output import atomic_write_text

EPOCH_KEY_PREFIXES = ("train/", "val/", "test/", "perf/")


@dataclass
class Histogram:
    """A histogram metric: ``counts[i]`` values fell in [edges[i], edges[i+1]).

    W&B logs it as ``wandb.Histogram``; ``metrics.jsonl`` leaves it out (log its summary numbers
    beside it).
    """

    counts: list[float]
    edges: list[float]


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
    """``metrics.jsonl`` appended line by line; ``config.yaml`` and ``summary.json`` atomically.

    ``resume_offset``: the byte length of ``metrics.jsonl`` at the checkpoint a run resumes from;
    what was written after it (steps that will be trained again, a half-written line) is cut off.
    A fresh run (``resume_offset=None``) starts the file empty."""

    def __init__(
        self, run_dir: Path, config: Mapping[str, Any], config_yaml: str, resume_offset: int | None = None
    ) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir / "config.yaml", config_yaml)
        path = run_dir / "metrics.jsonl"
        if resume_offset is None or not path.exists():
            self._metrics = open(path, "w")  # noqa: SIM115  (open for the run)
        else:
            self._metrics = open(path, "r+")  # noqa: SIM115
            self._metrics.truncate(resume_offset)
            self._metrics.seek(resume_offset)

    def offset(self) -> int:
        """Bytes of ``metrics.jsonl`` written so far (all flushed)."""
        return self._metrics.tell()

    def log(self, step: int, epoch: int, metrics: Mapping[str, Any]) -> None:
        row = {"step": step, "epoch": epoch}
        row.update({k: _jsonable(v) for k, v in metrics.items() if not isinstance(v, Histogram)})
        self._metrics.write(json.dumps(row) + "\n")
        self._metrics.flush()

    def finish(self, summary: Mapping[str, Any]) -> None:
        self._metrics.close()
        text = json.dumps({k: _jsonable(v) for k, v in summary.items()}, indent=2, default=str)
        atomic_write_text(self.run_dir / "summary.json", text + "\n")


def new_run_id() -> str:
    """An 8-character W&B run id (lower-case letters and digits), not from the seeded RNGs."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


class WandbSink:
    """One W&B run. If it cannot start online (no network, no key, a server that refuses within
    ``logger.init_timeout_s``), it starts offline with the same id and one warning line; ``run_id``
    given: the run is resumed (``resume="allow"``)."""

    def __init__(
        self,
        cfg: Mapping[str, Any],
        run_dir: Path,
        config: Mapping[str, Any],
        group: str | None,
        run_id: str | None = None,
    ) -> None:
        import wandb

        mode = cfg.get("mode") or os.environ.get("WANDB_MODE") or "offline"
        self.wandb = wandb
        run_id = run_id or new_run_id()
        kwargs = {
            "project": cfg.get("project"),
            "entity": cfg.get("entity"),
            "group": cfg.get("group") or group,
            "job_type": cfg.get("job_type"),
            "tags": list(cfg.get("tags") or []),
            "name": cfg.get("run_name"),
            "dir": str(run_dir),
            "config": dict(config),
            "id": run_id,
            "resume": "allow",
            "settings": wandb.Settings(init_timeout=float(cfg.get("init_timeout_s") or 60.0)),
        }
        try:
            self.run = wandb.init(mode=mode, **kwargs)
        except Exception as e:
            if mode in ("offline", "disabled"):
                raise
            reason = " ".join(str(e).split()[:30]) or type(e).__name__
            print(
                f"normbench: warning: W&B could not start {mode} ({type(e).__name__}: {reason}); "
                f"logging offline under {run_dir / 'wandb'} (upload later with `wandb sync`)",
                file=sys.stderr,
                flush=True,
            )
            with contextlib.suppress(Exception):
                wandb.teardown()  # the failed run would keep its id "in use" in W&B's service
            try:
                self.run = wandb.init(mode="offline", **kwargs)
            except Exception:  # the id is still held by the failed attempt: a new offline run
                self.run = wandb.init(mode="offline", **{**kwargs, "id": new_run_id()})
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
    """Fans each ``log(step, epoch, metrics)`` out to the sinks that are on.

    A sink that fails while logging reports its error once and is dropped for the rest of the run
    (the others, the local files above all, go on)."""

    def __init__(self, sinks: list[Any]) -> None:
        self.sinks = sinks
        self._dropped: list[Any] = []

    def log(self, step: int, epoch: int, metrics: Mapping[str, Any]) -> None:
        for sink in list(self.sinks):
            try:
                sink.log(step, epoch, metrics)
            except Exception as e:
                if isinstance(sink, LocalSink):
                    raise
                self.sinks.remove(sink)
                self._dropped.append(sink)
                print(
                    f"normbench: warning: {type(sink).__name__} failed at step {step} "
                    f"({type(e).__name__}: {e}); it is switched off for the rest of the run",
                    file=sys.stderr,
                    flush=True,
                )

    def finish(self, summary: Mapping[str, Any]) -> None:
        errors = []
        for sink in self.sinks:
            try:
                sink.finish(summary)
            except Exception as e:  # a failing sink must not hide the others' results
                errors.append(e)
        for sink in self._dropped:
            with contextlib.suppress(Exception):
                sink.finish(summary)
        if errors:
            raise errors[0]
