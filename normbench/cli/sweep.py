"""A sweep (``normbench -m``) as one unit: one writer per sweep directory, a summary of every job
whatever happened, an exit status that says whether every job ran to its end, and
``resume=true`` to continue a sweep that was stopped.

- `open_sweep` (when the multirun starts, before Hydra makes the sweep directory or writes
  ``multirun.yaml``): the sweep directory's lock (`SweepLock`: a second sweep there is refused in
  one line naming the holder); a directory that holds an earlier sweep is refused unless
  ``resume=true``, and a resume is refused when its jobs are not the earlier sweep's (each job
  directory's recorded overrides must be the job's, so a job's records always say what it ran).
- `job_action` (each job of a sweep continued with ``resume=true``): ``keep`` a job that ended
  with a result (finished, diverged), ``resume`` one that left a checkpoint, ``start`` one that
  never started or left none.
- `close_sweep` (at the end, also after Ctrl-C, SIGTERM or a job's crash): ``sweep_summary.csv``
  lists every job of the sweep with its status: ``finished`` / ``diverged`` / ``failed`` (with its
  one-line error) / ``refused`` (its folder held by another run, or not writable: the reason, kept
  beside the folder by `normbench.records.refusals`) / ``interrupted`` / ``not started`` (jobs
  the basic sweeper planned that have no directory), and whether this invocation ran it (``ran``:
  ``this sweep`` or ``earlier``).
- `exit_code`: 0 when every job ended with a result (finished or diverged: a diverging run is a
  result), 1 otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from normbench.base.errors import ConfigError
from normbench.base.layout import RunDir
from normbench.base.output import format_table, info, write_csv
from normbench.data.roots import BASIC_SWEEPER, sweep_jobs
from normbench.records.refusals import refusal
from normbench.records.rundir import RunDirError, RunDirLock, Snapshot, check_output_folder
from normbench.resume.checkpointer import RESULT_STATUSES

SWEEP_LOCK_NAME = ".normbench-sweep.lock"
SUMMARY_NAME = "sweep_summary.csv"
SUMMARY_KEYS = (
    "diverged_step",
    "val/acc",
    "val/loss",
    "val/bleu",
    "test/bleu",
    "train/loss",
    "perf/samples_per_s",
    "perf/tokens_per_s",
)


class SweepLock(RunDirLock):
    """`RunDirLock` on ``<sweep dir>/.normbench-sweep.lock``: one sweep writes a sweep directory."""

    name = SWEEP_LOCK_NAME

    def busy_message(self, holder: str) -> str:
        return (
            f"the sweep directory {self.run_dir} is in use by another normbench sweep ({holder}); "
            "wait for it to end, or pass another hydra.sweep.dir"
        )


@dataclass
class OpenSweep:
    """The sweep this process is running."""

    sweep_dir: Path
    lock: SweepLock
    planned: list[list[str]] | None
    """Every job's overrides, when the sweeper plans them up front (the basic sweeper); else None."""
    started: float
    """``time.time()`` when it started: a job whose summary is older ran in an earlier invocation."""


_open: OpenSweep | None = None
_last: tuple[Path, list[dict[str, Any]]] | None = None
"""The last sweep this process closed: its directory and summary rows (`exit_code`)."""


# ---------------------------------------------------------------------------------------------
# The jobs


def planned_jobs(config: DictConfig) -> list[list[str]] | None:
    """Every job's overrides in Hydra's order, as the basic sweeper will launch them
    (`normbench.data.roots.sweep_jobs`); None for another sweeper (Optuna's trials are not known
    in advance)."""
    if OmegaConf.select(config, "hydra.sweeper._target_") != BASIC_SWEEPER:
        return None
    return sweep_jobs(config)


def job_dirs(sweep_dir: Path) -> list[Path]:
    """The job directories of a sweep (those holding Hydra's ``overrides.yaml``), in job order."""
    dirs = {p.parent.parent for p in sweep_dir.glob(f"*/{RunDir.HYDRA}/{RunDir.HYDRA_OVERRIDES}")}
    return sorted(dirs, key=lambda p: (int(p.name), "") if p.name.isdigit() else (1 << 30, p.name))


def recorded_overrides(job_dir: Path) -> list[str]:
    """The overrides the job's run trained with (``.hydra/trained/`` when kept, else Hydra's)."""
    import yaml

    files = RunDir(job_dir)
    path = files.trained_overrides
    if not path.is_file():
        path = files.hydra_overrides
    try:
        return [str(o) for o in yaml.safe_load(path.read_text()) or []]
    except (OSError, ValueError, yaml.YAMLError):
        return []


def same_job(a: list[str], b: list[str]) -> bool:
    """Whether two jobs' overrides name the same run (``resume=…`` aside: it continues a run)."""

    def key(overrides: list[str]) -> list[str]:
        return sorted(o for o in overrides if not o.lstrip("+~").startswith("resume="))

    return key(a) == key(b)


def job_action(run_dir: Path) -> str:
    """What a job of a sweep continued with ``resume=true`` does: ``keep`` (it ended with a result),
    ``resume`` (it left a checkpoint) or ``start`` (it never started, or left no checkpoint)."""
    from normbench.resume.checkpointer import summary_status
    from normbench.resume.files import list_checkpoints

    if summary_status(RunDir(run_dir).summary) in RESULT_STATUSES:
        return "keep"
    if list_checkpoints(run_dir):
        return "resume"
    return "start"


def read_summary(job_dir: Path) -> dict[str, Any] | None:
    path = RunDir(job_dir).summary
    try:
        summary = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"status": "failed", "error": f"{path} is not readable JSON"}
    return summary if isinstance(summary, dict) else {"status": "failed", "error": "summary.json is not a JSON object"}


# ---------------------------------------------------------------------------------------------
# Opening a sweep


def open_sweep(config: DictConfig) -> OpenSweep:
    """Lock the sweep directory and check what it holds; `RunDirError` (one line) when another
    sweep holds it, when it holds an earlier sweep and ``resume`` is not set, or when a resume's
    jobs are not the earlier sweep's. A refused sweep leaves no folder it made."""
    global _open, _last
    check_output_folder(str(OmegaConf.select(config, "hydra.sweep.dir")), "hydra.sweep.dir")
    check_search(config)
    if planned_jobs(config) == []:
        overrides = " ".join(OmegaConf.select(config, "hydra.overrides.task") or [])
        raise RunDirError(f"the sweep has no jobs ({overrides}): a swept value list is empty (e.g. range(0,0)); "
                          "nothing to run")  # fmt: skip
    sweep_dir = Path(os.path.abspath(str(OmegaConf.select(config, "hydra.sweep.dir"))))
    resume = bool(OmegaConf.select(config, "resume", default=False))
    snap = Snapshot.take(sweep_dir)  # what a refused sweep must not leave behind
    if resume and not snap.existed:
        raise RunDirError(
            f"resume=true continues the sweep in hydra.sweep.dir, but {sweep_dir} does not exist; "
            "pass hydra.sweep.dir=<the folder of the sweep to continue>"
        )
    if resume and OmegaConf.select(config, "hydra.sweeper._target_") != BASIC_SWEEPER:
        raise RunDirError(resume_search_refusal(config, sweep_dir))
    holder = enclosing_run(sweep_dir)
    if holder is not None:
        raise RunDirError(
            f"hydra.sweep.dir={sweep_dir} is inside the run directory {holder} (its jobs would be mixed with "
            "that run's records); pass a folder outside any run"
        )
    lock = SweepLock(sweep_dir)
    lock.acquire()
    try:
        planned = planned_jobs(config)
        check_sweep_dir(sweep_dir, planned, resume)
    except BaseException:
        lock.release()
        if snap.created_root is not None:
            shutil.rmtree(snap.created_root, ignore_errors=True)
        raise
    if resume and (sweep_dir / "multirun.yaml").is_file():  # Hydra rewrites it: the earlier one is kept
        n = 1
        while (sweep_dir / f"multirun.{n}.yaml").exists():
            n += 1
        shutil.copy2(sweep_dir / "multirun.yaml", sweep_dir / f"multirun.{n}.yaml")
    _open, _last = OpenSweep(sweep_dir, lock, planned, time.time()), None
    info(f"[normbench] sweep directory: {sweep_dir}")
    return _open


def check_search(config: DictConfig) -> None:
    """An Optuna search's settings, before any trial trains: ``n_trials`` ≥ 1 and an
    ``optimized_metric`` the task reports (`normbench.config.check_optimized_metric`)."""
    from normbench.config import check_optimized_metric

    if "optuna" not in str(OmegaConf.select(config, "hydra.sweeper._target_", default="")).lower():
        return
    trials = OmegaConf.select(config, "hydra.sweeper.n_trials")
    if not isinstance(trials, int) or trials < 1:
        raise ConfigError(f"hydra.sweeper.n_trials={trials} is not allowed; a search needs at least 1 trial")
    check_optimized_metric(OmegaConf.select(config, "optimized_metric"), str(OmegaConf.select(config, "model.name")))


def resume_search_refusal(config: DictConfig, sweep_dir: Path) -> str:
    """Why ``resume=true`` does not continue an Optuna search, and what does."""
    storage = OmegaConf.select(config, "hydra.sweeper.storage")
    if storage:
        return (f"resume=true continues sweeps of Hydra's basic sweeper; a stored Optuna study continues by itself: "
                f"run the same search without resume=true in a new hydra.sweep.dir, with storage={storage} and the "
                "same study_name (its trials then join the earlier ones, and the best is over all)")  # fmt: skip
    return (f"resume=true continues sweeps of Hydra's basic sweeper only; the Optuna study of {sweep_dir} was kept in "
            "memory (hydra.sweeper.storage=null) and is gone; start a new search in another hydra.sweep.dir, with "
            "hydra.sweeper.storage=sqlite:///<file> to keep the study")  # fmt: skip


def enclosing_run(folder: Path) -> Path | None:
    """The run directory ``folder`` is, or lies in (Hydra's ``.hydra/`` beside a run's records); None."""
    for candidate in (folder, *folder.parents):
        files = RunDir(candidate)
        records = any(path.exists() for path in (files.summary, files.metrics, files.checkpoints))
        if records and files.hydra.is_dir():
            return candidate
    return None


def check_sweep_dir(sweep_dir: Path, planned: list[list[str]] | None, resume: bool) -> None:
    """An earlier sweep in ``sweep_dir`` needs ``resume=true``; a resume needs the same jobs."""
    jobs = job_dirs(sweep_dir) if sweep_dir.is_dir() else []
    if not resume:
        if jobs or (sweep_dir / "multirun.yaml").exists():
            raise RunDirError(
                f"hydra.sweep.dir={sweep_dir} holds an earlier sweep ({describe(jobs)}); continue it with "
                "the same command and resume=true, or pass another hydra.sweep.dir"
            )
        return
    if planned is None:
        return
    for job_dir in jobs:
        index = int(job_dir.name) if job_dir.name.isdigit() else None
        ran = recorded_overrides(job_dir)
        if index is None or index >= len(planned) or not same_job(ran, planned[index]):
            wanted = " ".join(planned[index]) if index is not None and index < len(planned) else "no such job"
            raise RunDirError(
                f"resume=true: job {job_dir.name} in {sweep_dir} ran [{' '.join(ran)}], but this sweep's job "
                f"{job_dir.name} is [{wanted}]; continue a sweep with the command that started it, "
                "or pass another hydra.sweep.dir"
            )


def describe(jobs: list[Path]) -> str:
    """``3 jobs: 2 finished, 1 interrupted``."""
    from collections import Counter

    counts = Counter((read_summary(j) or {"status": "no summary"}).get("status") for j in jobs)
    parts = ", ".join(f"{n} {status}" for status, n in counts.items())
    return f"{len(jobs)} job{'s' * (len(jobs) != 1)}" + (f": {parts}" if parts else "")


# ---------------------------------------------------------------------------------------------
# Closing a sweep


def collect(sweep_dir: Path, planned: list[list[str]] | None = None, started: float | None = None) -> list[dict]:
    """One row per job: its directory's overrides, status, final metrics and wall time, then one
    ``not started`` row per planned job without a directory. A directory without ``summary.json``
    is ``failed`` (killed, or crashed before writing it)."""
    rows, seen = [], []
    for job_dir in job_dirs(sweep_dir):
        overrides = recorded_overrides(job_dir)
        seen.append(overrides)
        row: dict[str, Any] = {"job": job_dir.name, "overrides": " ".join(overrides)}
        summary = refusal(job_dir) or read_summary(job_dir)  # refused: its folder held by another run
        if summary is None:
            summary = {"status": "failed", "error": "no summary.json (the job was killed or crashed before writing it)"}
        row["status"] = summary.get("status", "unknown")
        if started is not None:
            with contextlib.suppress(OSError):
                path = RunDir(job_dir).summary
                mtime = path.stat().st_mtime if path.exists() else None
                row["ran"] = "earlier" if mtime is not None and mtime < started else "this sweep"
        row.update({key: summary[key] for key in SUMMARY_KEYS if key in summary})
        row["wall_time_s"] = summary.get("wall_time_s")
        if summary.get("error"):
            row["error"] = summary["error"]
        rows.append(row)
    for index, overrides in enumerate(planned or []):
        if not any(same_job(overrides, ran) for ran in seen):
            rows.append({"job": str(index), "overrides": " ".join(overrides), "status": "not started"})
    return rows


def write_summary(sweep_dir: Path, planned: list[list[str]] | None = None, started: float | None = None) -> list[dict]:
    """``sweep_summary.csv`` and its table on stdout; the rows."""
    rows = collect(sweep_dir, planned, started)
    if rows:
        write_csv(sweep_dir / SUMMARY_NAME, rows)
        info(format_table(*terminal_table(rows)))
        info(f"[normbench] sweep summary: {sweep_dir / SUMMARY_NAME}")
    return rows


TERMINAL_WIDTH = 120
SHORT_NAMES = {"perf/samples_per_s": "samples/s", "perf/tokens_per_s": "tokens/s", "wall_time_s": "wall_s",
               "diverged_step": "diverged@"}  # fmt: skip


def terminal_table(rows: list[dict[str, Any]], width: int = TERMINAL_WIDTH) -> tuple[list[dict[str, Any]], list[str]]:
    """The summary's rows and columns as printed (the CSV keeps them whole): the overrides that
    differ between jobs (``swept``; never one of how a job runs, `normbench.cli.recorded.how_it_runs`:
    a continued sweep's jobs run now record ``resume=True``, those kept do not), short metric names,
    no empty column, and the swept overrides and the error cut (``…``) so that a line fits ``width``
    columns."""
    from normbench.cli.recorded import how_it_runs

    settings = [[o for o in str(r.get("overrides", "")).split() if not how_it_runs(o)] for r in rows]
    common = set.intersection(*(set(s) for s in settings))
    shown = []
    for row, setting in zip(rows, settings, strict=True):
        out = {SHORT_NAMES.get(k, k): v for k, v in row.items() if k not in ("overrides", "error")}
        out["swept"] = _cut(" ".join(o for o in setting if o not in common), 40)
        shown.append({**out, "error": row.get("error")})
    names = dict.fromkeys(["job", "swept", *(k for r in shown for k in r)])
    columns = [c for c in names if any(r.get(c) not in (None, "") for r in shown)]

    def cell(v: Any) -> int:
        return len(f"{v:.4g}" if isinstance(v, float) else str(v if v is not None else ""))

    used = sum(max(len(c), *(cell(r.get(c)) for r in shown)) + 2 for c in columns if c != "error")
    for row in shown:
        row["error"] = _cut(row.get("error") or "", max(20, width - used))
    return shown, columns


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def close_sweep() -> list[dict[str, Any]] | None:
    """The open sweep's summary (every job, whatever stopped it), then its lock released; None
    when no sweep is open in this process."""
    global _open, _last
    sweep, _open = _open, None
    if sweep is None:
        return None
    try:
        rows = write_summary(sweep.sweep_dir, sweep.planned, sweep.started)
        _last = (sweep.sweep_dir, rows)
    finally:
        sweep.lock.release()
    return rows


def exit_code() -> int:
    """For the sweep this process closed last (once: it is forgotten here): 0 when every job ended
    with a result (finished or diverged), else 1 with one line saying how many did not and where
    to look; 0 when no sweep was closed since the last call."""
    from collections import Counter

    from normbench.base.output import error_line

    global _last
    if _last is None:
        return 0
    (sweep_dir, rows), _last = _last, None
    unfinished = [r for r in rows if r["status"] not in RESULT_STATUSES]
    if not unfinished:
        return 0
    counts = ", ".join(f"{n} {s}" for s, n in Counter(r["status"] for r in unfinished).items())
    error_line(
        f"{len(unfinished)} of {len(rows)} jobs of the sweep did not end with a result ({counts}); see "
        f"{sweep_dir / SUMMARY_NAME}; the same command with resume=true continues the sweep"
    )
    return 1
