"""Where metrics go: local files in the run directory, and Weights & Biases.

Local: ``metrics.jsonl`` (one JSON object a line: ``step``, ``epoch`` and every metric as logged),
``config.yaml`` (the resolved config) and ``summary.json`` (final metrics, status, wall time,
git commit, versions, device), each written atomically. W&B: `normbench.wandb_sink.WandbSink`
(which imports this module, never the other way round), finished in a ``finally`` so that each
job of a multirun in one process is its own W&B run.
"""

from __future__ import annotations

import contextlib
import json
import math
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normbench.output import atomic_write_text, warn


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

    ``metrics.jsonl`` is only ever appended to, or cut back to ``resume_offset``: its byte length
    at the checkpoint a run resumes from (what was written after it, steps that will be trained
    again or a half-written line, goes). A resume from a checkpoint that knows no offset (every
    segment so far ran with ``logger.local=false``) appends to whatever is there; nothing a
    segment logged is ever rewritten from scratch."""

    def __init__(
        self, run_dir: Path, config: Mapping[str, Any], config_yaml: str, resume_offset: int | None = None
    ) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(run_dir / "config.yaml", config_yaml)
        self.path = run_dir / "metrics.jsonl"
        self._metrics = open(self.path, "ab", buffering=0)  # noqa: SIM115  (open for the run; unbuffered)
        if resume_offset is not None and resume_offset < self._metrics.tell():
            self._metrics.truncate(resume_offset)
            self._metrics.seek(resume_offset)

    def offset(self) -> int:
        """Bytes of ``metrics.jsonl`` written so far (every row is written through at once)."""
        return self._metrics.tell()

    def log(self, step: int, epoch: int, metrics: Mapping[str, Any]) -> None:
        """One JSON line. A write that fails (a full disk) takes its partial line back out, so that
        the file stays whole, and raises the ``OSError`` naming the file."""
        row = {"step": step, "epoch": epoch}
        row.update({k: _jsonable(v) for k, v in metrics.items() if not isinstance(v, Histogram)})
        data = memoryview((json.dumps(row) + "\n").encode())
        start = self._metrics.tell()
        try:
            while data:
                data = data[self._metrics.write(data) :]
        except OSError as e:
            with contextlib.suppress(OSError):
                self._metrics.truncate(start)
                self._metrics.seek(start)
            e.filename = e.filename or str(self.path)
            raise

    def finish(self, summary: Mapping[str, Any], exit_code: int = 0) -> None:
        self._metrics.close()
        text = json.dumps({k: _jsonable(v) for k, v in summary.items()}, indent=2, default=str)
        atomic_write_text(self.run_dir / "summary.json", text + "\n")


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
                warn(
                    f"{type(sink).__name__} failed at step {step} "
                    f"({type(e).__name__}: {e}); it is switched off for the rest of the run"
                )

    def finish(self, summary: Mapping[str, Any], exit_code: int = 0) -> None:
        """Every sink's end of the run; ``exit_code``: the process's (W&B records it: 128 + signal
        for an interrupted run)."""
        errors = []
        for sink in self.sinks:
            try:
                sink.finish(summary, exit_code=exit_code)
            except Exception as e:  # a failing sink must not hide the others' results
                errors.append(e)
        for sink in self._dropped:
            with contextlib.suppress(Exception):
                sink.finish(summary, exit_code=exit_code)
        if errors:
            raise errors[0]
