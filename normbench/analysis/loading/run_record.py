"""One finished run's records read back: ``config.yaml``, ``metrics.jsonl``, ``summary.json`` and
Hydra's ``.hydra/overrides.yaml`` of a job directory, into the `Run` type that the W&B reader
(`normbench.analysis.loading.runs.load_wandb_runs`) fills too. Which folders hold runs, and which are
used, is `normbench.analysis.loading.runs`'s."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from normbench.base.errors import ConfigError
from normbench.base.layout import RunDir

if TYPE_CHECKING:
    from normbench.config import RunConfig


def _number(v: Any) -> Any:
    """``"nan"`` / ``"inf"`` / ``"-inf"`` (how the local sink writes non-finite floats) back to floats."""
    if isinstance(v, str) and v.lower() in ("nan", "inf", "-inf", "infinity", "-infinity"):
        return float(v)
    return v


@dataclass
class Run:
    """One training run: its resolved config, its logged rows and its final summary."""

    name: str
    config: dict[str, Any]
    history: list[dict[str, Any]]
    """One dict per logged row: ``step``, ``epoch`` and the metrics of that row."""
    summary: dict[str, Any] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    source: str = ""

    @functools.cached_property
    def record(self) -> RunConfig:
        """The run's config typed (`normbench.config.load_record`: keys an older version did not
        record at their schemas' defaults); a `ConfigError` line when it cannot be read. Code
        reads settings here (``run.record.optimizer.momentum``), never by dotted key."""
        from normbench.config import load_record

        return load_record(self.config)

    def stack_norm(self, stack: str) -> Any:
        """The typed norm config of the model's ``<stack>_norm`` (``encoder`` / ``decoder``: a
        Transformer's own norm per stack) when the model has one and it is set, else the run's ``norm``."""
        model = self.record.model
        own = {f.name: getattr(model, f.name) for f in dataclasses.fields(model)}.get(f"{stack}_norm")
        return own if own is not None else self.record.norm

    @property
    def resolved(self) -> dict[str, Any]:
        """What the run found where it ran, recorded beside its config (``hardware.resolved``:
        device, world size, threads); {} when the record has none."""
        hardware = self.config.get("hardware")
        return dict(hardware.get("resolved") or {}) if isinstance(hardware, Mapping) else {}

    def get(self, dotted: str, default: Any = None) -> Any:
        """A config value by a dotted key that comes as data (a rule's ``select``, a grouping key),
        or ``default`` when absent. Code reads settings through `record` instead."""
        node: Any = self.config
        for part in dotted.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node

    @property
    def status(self) -> str:
        return str(self.summary.get("status", "failed" if not self.summary else "unknown"))

    @property
    def seed(self) -> int:
        return int(self.get("seed", 0))

    @property
    def final_step(self) -> int:
        """The last optimizer step the run reached."""
        if "step" in self.summary:
            return int(self.summary["step"])
        return max((int(r["step"]) for r in self.history), default=0)

    def metric_keys(self) -> set[str]:
        return {k for row in self.history for k in row}

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of every row that logged ``key``, in logging order; float64 values."""
        rows = [(int(r["step"]), float(r[key])) for r in self.history if key in r and r[key] is not None]
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros(0)
        steps, values = zip(*rows)
        return np.asarray(steps, dtype=np.int64), np.asarray(values, dtype=np.float64)

    def final(self, key: str) -> float:
        """The summary's value of ``key``; else the last logged one; NaN when never logged."""
        if key in self.summary and isinstance(_number(self.summary[key]), (int, float)):
            return float(_number(self.summary[key]))
        _, values = self.series(key)
        return float(values[-1]) if len(values) else math.nan


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a run's ``metrics.jsonl``. A line that is not one JSON object with an integer
    ``step`` (two writers interleaved, a damaged file) is a ConfigError naming the file and line;
    only a last line without its newline (a run killed mid-write, which a resume cuts off) is
    left out, with a warning."""
    from normbench.base.output import warn

    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    rows = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
            if not isinstance(row, dict) or not isinstance(row.get("step"), int):
                raise ValueError("not a JSON object with an integer step")
        except ValueError as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            if number == len(lines):  # no newline after it: the write was cut short
                warn(f"{path}:{number}: an unfinished last line (a run killed mid-write) is left out")
                break
            text = raw[:60].decode("utf-8", "replace")
            raise ConfigError(
                f"{path}:{number} is not a metrics row ({type(e).__name__}: {str(e).splitlines()[0]}): "
                f"{text!r}; was the run directory written by two runs at once?"
            ) from None
        rows.append({k: _number(v) for k, v in row.items()})
    return rows


ROW_CLOCKS = ("perf/train_s",)
"""Keys read when each row is written (the training clock, on every row: `normbench.run.loop.state.log`):
a step row and the epoch row of one step hold two readings, never compared."""


def _same(a: Any, b: Any) -> bool:
    """Two logged values equal (two NaNs too: the same non-result)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return bool(a == b)


def metrics_problem(rows: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> str | None:
    """What makes a run's logged rows not one run's record, in words; None when they are. Several
    rows may share a step (a step row, diagnostics, the epoch row) but not repeat a measure with
    another value (`ROW_CLOCKS` and the row's coordinates ``step`` and ``epoch`` aside); steps never
    go backwards (a resume cuts the file back to its checkpoint before it appends); a finished run's
    last row is at its summary's ``step`` (the epoch row of its last step): not before it (the file
    cut short), not past it."""
    seen: dict[str, Any] = {}
    previous: int | None = None
    for number, row in enumerate(rows, start=1):
        step = int(row["step"])
        if previous is not None and step < previous:
            return f"steps go backwards at row {number} (step {step} after {previous}): another run's rows appended?"
        if step != previous:
            seen, previous = {}, step
        for key, value in row.items():
            if key in ROW_CLOCKS or key in ("step", "epoch"):  # the clock; the row's coordinates
                continue
            if key in seen and not _same(seen[key], value):
                return (f"row {number} logs {key} at step {step} again with another value ({value!r} after "
                        f"{seen[key]!r}): rows added to the run?")  # fmt: skip
            seen.setdefault(key, value)
    want = summary.get("step")
    if summary.get("status") == "finished" and isinstance(want, int) and previous != want:
        last = "no rows" if previous is None else f"its last row is at step {previous}"
        why = (
            "the file was cut short?"
            if previous is None or previous < want
            else "rows of a longer run, or the summary edited?"
        )
        return f"{last} but summary.json says the run finished at step {want}: {why}"
    return _summary_not_logged(rows, summary)


def _summary_not_logged(rows: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> str | None:
    """A finished run's summary, as the runner writes it (with its ``segments``: the runner's own
    record), holds the last value it logged of each metric: a summary value that is not its last
    logged one is another run's metrics (or summary) under this run's name; None when every one is
    (or the summary is not the runner's: a hand-written one of a test, nothing to compare)."""
    if summary.get("status") != "finished" or not isinstance(summary.get("segments"), list):
        return None
    last: dict[str, Any] = {}
    for row in rows:
        last.update({k: v for k, v in row.items() if v is not None})
    for key, value in summary.items():
        if key in ROW_CLOCKS or key in ("step", "epoch") or key not in last or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)) and not _same(_number(last[key]), _number(value)):
            return (f"summary.json's {key} {value!r} is not the last value the run logged ({last[key]!r}): the "
                    "metrics and the summary are not one run's (a file copied from another run?)")  # fmt: skip
    return None


def read_record(path: Path, parse: Callable[[str], Any]) -> Any:
    """A run's ``summary.json`` or ``config.yaml`` parsed; None when absent; a `ConfigError`
    naming the file when it does not parse (cut short by a kill or a full disk, edited by hand)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} cannot be read ({type(e).__name__}: {e})") from None
    try:
        value = parse(text)
    except Exception as e:  # json.JSONDecodeError, yaml.YAMLError
        first = (str(e).strip().splitlines() or [""])[0]
        raise ConfigError(
            f"{path} is not a readable record ({type(e).__name__}: {first}); the run was cut short or the file "
            "edited: rerun it, or move it out of the folder"
        ) from None
    if value is not None and not isinstance(value, dict):
        raise ConfigError(f"{path} holds a {type(value).__name__}, not a run's record; move it out of the folder")
    return value


def load_local_run(job_dir: Path) -> Run:
    import yaml

    files = RunDir(job_dir)
    config = read_record(files.config, yaml.safe_load)
    summary = read_record(files.summary, json.loads)
    overrides_path = files.hydra_overrides
    overrides = (yaml.safe_load(overrides_path.read_text()) or []) if overrides_path.is_file() else []
    history = _read_jsonl(files.metrics)
    problem = metrics_problem(history, summary or {})
    if problem is not None:
        raise ConfigError(f"{job_dir}: {files.metrics.name}: {problem}; it is not one run's record: move the folder "
                          "out of the sweep, or rerun it")  # fmt: skip
    return Run(
        name=job_dir.name,
        config=config or {},
        history=history,
        summary={k: _number(v) for k, v in (summary or {}).items()},
        overrides=list(overrides),
        source=str(job_dir),
    )
