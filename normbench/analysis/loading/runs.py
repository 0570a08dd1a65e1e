"""Reading finished runs back: local job directories or the W&B public API, into one `Run` type.

A local job directory is what the runner writes (``metrics.jsonl``, ``config.yaml``,
``summary.json``) plus Hydra's ``.hydra/overrides.yaml`` (one run's records:
`normbench.analysis.loading.run_record`). A W&B run gives the same three things through
``wandb.Api()``: ``run.config``, ``run.scan_history()`` and ``run.summary``.

`load_local_runs` is the one door for local folders (``normbench-figures``,
``normbench-leaderboard``): every job folder under the folders given, symlinked folders followed;
every folder found and not used named in a warning with the reason (an attempt set aside in
``restarts/``, no metrics, not a normbench run); a folder with no usable run, or one run read twice
(the same folder by two paths, or the same seed of the same setting in two folders), one line.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from normbench.analysis.loading.run_record import Run, _number, load_local_run, read_record
from normbench.base.errors import ConfigError
from normbench.base.layout import RunDir
from normbench.records.refusals import refusal

__all__ = ["Run", "load_local_run", "read_record", "load_local_runs", "find_job_dirs", "experiment_key"]

RESULT_STATUSES = ("finished", "diverged")
"""A run that ended with one of these is evidence (`normbench.resume.checkpointer.RESULT_STATUSES`)."""
NOT_RUNS = RunDir.NOT_RUNS
"""Folders of a run that are never runs themselves (W&B's own, Hydra's, the checkpoints)."""


def job_records(folder: Path) -> tuple[Path, ...]:
    """What makes a folder a job folder: any of these (a job refused before training has no metrics)."""
    files = RunDir(folder)
    return files.metrics, files.summary, files.hydra_overrides


def find_job_dirs(root: Path) -> list[Path]:
    """Every folder under ``root`` (``root`` included) that holds one of `job_records`, in path order,
    symlinked folders followed (a link back into its own parents is not walked twice). A real
    folder reached by two paths is listed under both: `load_local_runs` names the two."""
    found: list[Path] = []
    walking: set[str] = set()

    def walk(folder: Path) -> None:
        real = os.path.realpath(folder)
        if real in walking:
            return
        walking.add(real)
        if any(path.is_file() for path in job_records(folder)):
            found.append(folder)
        try:
            children = sorted(p for p in folder.iterdir() if p.name not in NOT_RUNS and p.is_dir())
        except OSError:
            children = []
        for child in children:
            walk(child)
        walking.discard(real)

    walk(root)
    return found


def load_job(job: Path, unfinished: bool, needs: Sequence[str]) -> tuple[Run | None, str]:
    """One job folder as a `Run`, or None and why it is not used. ``unfinished``: a job that did
    not end finished or diverged (refused, killed, crashed, still running) is a run too, with its
    config from Hydra's ``.hydra/config.yaml`` where it has no metrics, and its status from
    ``summary.json`` (none: ``failed``); without it such a job is not used (its metrics stop where
    it stopped). ``needs``: config keys a run must have."""
    import yaml

    if job.parent.name == RunDir.RESTARTS:
        return None, f"an earlier attempt, set aside when the run in {job.parent.parent} started over"
    files = RunDir(job)
    config = read_record(files.config, yaml.safe_load)
    config = config or read_record(files.hydra_config, yaml.safe_load)
    if not config:
        return None, "no config.yaml or .hydra/config.yaml: not a normbench run"
    missing = [k for k in needs if k not in config]
    if missing:
        return None, f"its config has no {', '.join(missing)}: not a normbench run"
    if files.metrics.is_file():
        run = load_local_run(job)
    else:
        summary = {k: _number(v) for k, v in (read_record(files.summary, json.loads) or refusal(job) or {}).items()}
        if not unfinished:
            error = f": {summary['error']}" if "error" in summary else ""
            return None, f"no metrics.jsonl (status {summary.get('status', 'unknown: no summary.json')}{error})"
        run = Run(name=job.name, config={}, history=[], summary=summary, source=str(job))
    run.config = run.config or config
    if not run.summary:  # a job refused before it wrote (another run held its folder) says so
        run.summary = refusal(job) or {"status": "failed", "error": "no summary.json (the job was killed or crashed)"}
    if not unfinished and run.status not in RESULT_STATUSES:
        error = f": {run.summary['error']}" if run.summary.get("error") else ""
        return None, (f"status {run.status}{error}: it ended neither finished nor diverged, so its metrics stop "
                      "where it stopped; resume it (resume=true) or rerun it")  # fmt: skip
    return run, ""


def load_local_runs(paths: Iterable[str | Path], unfinished: bool = False, needs: Sequence[str] = ()) -> list[Run]:
    """All runs under the given multirun (or single-run) folders (see the module doc; `load_job`
    for ``unfinished`` and ``needs``). A `ConfigError` for a path that is not a folder, a folder
    with no usable run, and a run read twice; a warning naming each folder found and not used."""
    from normbench.base.output import warn

    runs: list[Run] = []
    seen: dict[str, Path] = {}
    for p in paths:
        root = Path(p).expanduser()
        if not root.is_dir():
            what = "is not a directory" if root.exists() else "does not exist"
            raise ConfigError(f"--runs {str(root)!r} {what}; pass a multirun directory")
        jobs, used, skipped = find_job_dirs(root), [], []
        for job in jobs:
            real = os.path.realpath(job)
            if real in seen:
                raise ConfigError(
                    f"{job} and {seen[real]} are the same run folder ({real}): it would be counted twice; "
                    "pass each run once"
                )
            seen[real] = job
            run, reason = load_job(job, unfinished, needs)
            (used.append(run) if run is not None else skipped.append((job, reason)))
        for job, reason in skipped:
            warn(f"{job}: not used: {reason}")
        if not used:
            what = "no runs (no metrics.jsonl, summary.json or .hydra/ under it)"
            if jobs:
                what = f"no usable runs ({len(jobs)} found: {skipped[0][1]})"
            raise ConfigError(
                f"--runs {str(root)!r} holds {what}; pass the folder of a sweep (hydra.sweep.dir) or of a run"
            )
        runs += used
    check_distinct_runs(runs)
    return runs


def check_distinct_runs(runs: Sequence[Run]) -> None:
    """A `ConfigError` naming both when two runs are the same seed of the same setting
    (`experiment_key`): a run copied, or a sweep passed twice, would be counted as two seeds."""
    seen: dict[str, Run] = {}
    for run in runs:
        key = json.dumps([experiment_key(run), run.get("seed")], sort_keys=True, default=str)
        other = seen.setdefault(key, run)
        if other is not run:
            raise ConfigError(
                f"{other.source} and {run.source} are the same run (seed {run.get('seed')} of one setting): it "
                "would be counted twice; pass each run once"
            )


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
