"""Reading finished runs back: local job directories or the W&B public API, into one `Run` type.

A local job directory is what the runner writes (``metrics.jsonl``, ``config.yaml``,
``summary.json``) plus Hydra's ``.hydra/overrides.yaml``. A W&B run gives the same three
things through ``wandb.Api()``: ``run.config``, ``run.scan_history()`` and ``run.summary``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from normbench.errors import ConfigError


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

    def get(self, dotted: str, default: Any = None) -> Any:
        """A config value by dotted key (``norm.name``), or ``default`` when absent."""
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
    from normbench.output import warn

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


def find_job_dirs(root: Path) -> Iterator[Path]:
    """Every directory under ``root`` (``root`` included) that holds a run's ``metrics.jsonl``."""
    if (root / "metrics.jsonl").is_file():
        yield root
        return
    for path in sorted(root.rglob("metrics.jsonl")):
        if "wandb" not in path.parts:
            yield path.parent


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

    config = read_record(job_dir / "config.yaml", yaml.safe_load)
    summary = read_record(job_dir / "summary.json", json.loads)
    overrides_path = job_dir / ".hydra" / "overrides.yaml"
    overrides = (yaml.safe_load(overrides_path.read_text()) or []) if overrides_path.is_file() else []
    return Run(
        name=job_dir.name,
        config=config or {},
        history=_read_jsonl(job_dir / "metrics.jsonl"),
        summary={k: _number(v) for k, v in (summary or {}).items()},
        overrides=list(overrides),
        source=str(job_dir),
    )


def load_local_runs(paths: Iterable[str | Path]) -> list[Run]:
    """All runs found under the given multirun (or single-run) directories; a `ConfigError` for a
    path that is not a directory or holds no run."""
    runs = []
    for p in paths:
        root = Path(p).expanduser()
        if not root.is_dir():
            raise ConfigError(f"--runs {str(root)!r} is not a directory; pass a multirun directory")
        found = [load_local_run(d) for d in find_job_dirs(root)]
        if not found:
            raise ConfigError(
                f"--runs {str(root)!r} holds no runs (no metrics.jsonl under it); pass the folder of a sweep "
                "(hydra.sweep.dir) or of a run"
            )
        runs += found
    return runs


NOT_THE_EXPERIMENT = ("seed", "logger", "checkpoint", "resume", "diagnostics", "optimized_metric", "hardware.resolved")
"""Config keys (and the sections under them) in which runs of one experiment may differ: the seed,
where and how the run is logged and saved, what is measured on the side. `dataset.root` too (the
same data in another folder); every other difference is another experiment."""


def experiment_key(run: Run) -> dict[str, Any]:
    """The run's config flattened to dotted keys, without `NOT_THE_EXPERIMENT` and ``dataset.root``:
    two runs are seeds of one experiment when their keys are equal."""
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if prefix in NOT_THE_EXPERIMENT or prefix == "dataset.root":
            return
        if isinstance(node, Mapping) and node:
            for k, v in node.items():
                walk(v, f"{prefix}.{k}" if prefix else str(k))
        else:
            flat[prefix] = node

    walk(run.config, "")
    return flat


def check_seeds_only(runs: Sequence[Run], what: str) -> None:
    """A `ConfigError` unless ``runs`` (to be pooled as seeds of ``what``) differ in the seed and
    `NOT_THE_EXPERIMENT` alone; the message names the first keys that differ and two values."""
    if len(runs) < 2:
        return
    first = experiment_key(runs[0])
    for run in runs[1:]:
        other = experiment_key(run)
        differ = sorted(k for k in first.keys() | other.keys() if first.get(k, "<absent>") != other.get(k, "<absent>"))
        if differ:
            shown = "; ".join(f"{k}: {first.get(k, '<absent>')} vs {other.get(k, '<absent>')}" for k in differ[:3])
            more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
            raise ConfigError(
                f"the runs of {what} differ in more than the seed ({shown}{more}: {runs[0].source} vs {run.source}); "
                "only seeds of one setting are pooled: pass each setting's runs separately"
            )


def _wandb_row(row: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"step": int(row.get("_step", 0))}
    for k, v in row.items():
        if k.startswith("_") or v is None or isinstance(v, Mapping):  # W&B internals, histograms
            continue
        out[k] = _number(v)
    out.setdefault("epoch", 0)
    return out


SUMMARY_JOB_TYPES = ("figures", "leaderboard-summary")
"""W&B job types of the summary runs that normbench-figures / normbench-leaderboard log into a
group: read back, they are not training runs."""


W_AND_B_SUMMARIES = frozenset(("min", "max", "mean", "last", "first", "best"))


def _summary_value(v: Any) -> Any:
    """A W&B summary entry: a ``define_metric`` summary dict ({max, last, …}) gives its ``last``;
    another dict (a record such as ``git`` or ``rules``) is kept as it is; anything else too
    (``"nan"`` / ``"inf"`` strings back to floats)."""
    if isinstance(v, Mapping) and v and set(v) <= W_AND_B_SUMMARIES:
        return _number(v.get("last"))
    if isinstance(v, Mapping):
        return dict(v)
    return _number(v)


def load_wandb_runs(
    path: str,
    group: str | None = None,
    job_type: str | None = None,
    keys: Callable[[Iterable[str]], Iterable[str]] | None = None,
    api: Any = None,
) -> list[Run]:
    """The training runs of W&B project ``path`` (``entity/project``) in ``group`` (one sweep
    invocation) and/or of ``job_type`` (the preset: every sweep of it), read with
    ``wandb.Api().runs(path, filters=…)``.

    ``keys(summary_keys)`` names the history keys to fetch (one ``scan_history(keys=[key])`` each,
    as W&B returns only rows holding every requested key); None: the whole history. Summary runs
    (`SUMMARY_JOB_TYPES`) are left out. ``api`` stands in for ``wandb.Api()`` (tests pass a fake)."""
    if group is None and job_type is None:
        raise ConfigError("reading W&B runs needs a group (one sweep) or a job type (a preset)")
    if api is None:
        import wandb

        api = wandb.Api()
    filters = {k: v for k, v in (("group", group), ("jobType", job_type)) if v is not None}
    runs = []
    for r in api.runs(path, filters=filters):
        if getattr(r, "job_type", None) in SUMMARY_JOB_TYPES:
            continue
        summary = getattr(r.summary, "_json_dict", None)
        summary = dict(summary if summary is not None else r.summary)
        if keys is None:
            history = [_wandb_row(row) for row in r.scan_history()]
        else:
            history = [
                _wandb_row({"_step": row.get("_step", 0), key: row.get(key)})
                for key in keys(summary)
                for row in r.scan_history(keys=["_step", key])
            ]
            history.sort(key=lambda row: row["step"])
        runs.append(
            Run(
                name=str(r.name or r.id),
                config=dict(r.config),
                history=history,
                summary={k: _summary_value(v) for k, v in summary.items() if not k.startswith("_")},
                source=f"wandb:{path}/{r.id}",
            )
        )
    if not runs:
        where = " and ".join(f"{k} {v!r}" for k, v in filters.items())
        raise ConfigError(f"no W&B training runs with {where} in {path!r}")
    return runs


def group_runs(runs: Iterable[Run], keys: Iterable[str]) -> dict[tuple[Any, ...], list[Run]]:
    """Runs grouped by their config values at the dotted ``keys`` (seeds fall into one group)."""
    keys = list(keys)
    groups: dict[tuple[Any, ...], list[Run]] = {}
    for run in runs:
        groups.setdefault(tuple(run.get(k) for k in keys), []).append(run)
    for members in groups.values():
        members.sort(key=lambda r: r.seed)
    return groups


def select(runs: Iterable[Run], **criteria: Any) -> list[Run]:
    """Runs whose config matches every criterion; keys use ``__`` for dots (``norm__name="bn"``);
    floats compare with a relative tolerance of 1e-9. Sorted by seed."""
    return matching(runs, {key.replace("__", "."): want for key, want in criteria.items()})


def matching(runs: Iterable[Run], criteria: Mapping[str, Any]) -> list[Run]:
    """`select` with dotted keys (``{"norm.name": "bn"}``, as the claim rules write them)."""
    return sorted((run for run in runs if config_matches(run.get, criteria)), key=lambda r: r.seed)


def config_matches(get: Callable[[str], Any], criteria: Mapping[str, Any]) -> bool:
    """Whether the values ``get(key)`` match every criterion (floats within a relative 1e-9)."""
    for key, want in criteria.items():
        have = get(key)
        if isinstance(want, float) and isinstance(have, (int, float)):
            if not math.isclose(float(have), want, rel_tol=1e-9):
                return False
        elif have != want:
            return False
    return True
