"""Hydra callbacks: the data roots checked before a sweep starts, the sweep summary at its end."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from normbench.data_roots import check_sweep_data_roots
from normbench.errors import ConfigError
from normbench.output import LOG, format_table, info, use_console, write_csv

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


def collect_sweep(sweep_dir: Path) -> list[dict[str, Any]]:
    """One row per job directory under ``sweep_dir``: overrides, status, final metrics, wall time.

    ``status`` is the job's own (``finished``, ``diverged`` with ``diverged_step``, ``failed`` with
    its ``error``, ``interrupted``); a job that left no ``summary.json`` (killed, or crashed
    before writing it) is listed as ``failed``."""
    import yaml

    rows = []
    job_dirs = sorted((p.parent.parent for p in sweep_dir.glob("*/.hydra/overrides.yaml")), key=_job_order)
    for job_dir in job_dirs:
        overrides = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text()) or []
        row: dict[str, Any] = {"job": job_dir.name, "overrides": " ".join(overrides)}
        summary_path = job_dir / "summary.json"
        if summary_path.is_file():
            summary = json.loads(summary_path.read_text())
            row["status"] = summary.get("status", "unknown")
            for key in SUMMARY_KEYS:
                if key in summary:
                    row[key] = summary[key]
            row["wall_time_s"] = summary.get("wall_time_s")
            if summary.get("error"):
                row["error"] = summary["error"]
        else:
            row["status"] = "failed"
            row["error"] = "no summary.json"
        rows.append(row)
    return rows


def _job_order(path: Path) -> tuple[int, str]:
    return (int(path.name), "") if path.name.isdigit() else (1 << 30, path.name)


def write_sweep_summary(sweep_dir: Path) -> list[dict[str, Any]]:
    rows = collect_sweep(sweep_dir)
    if not rows:
        return rows
    columns = write_csv(sweep_dir / "sweep_summary.csv", rows)
    info(format_table(rows, columns))
    info(f"[normbench] sweep summary: {sweep_dir / 'sweep_summary.csv'}")
    return rows


try:
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover
    Callback = object  # type: ignore[misc,assignment]


class SweepSummaryCallback(Callback):
    """At the end of a multirun: ``sweep_summary.csv`` in the sweep directory and a table."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        use_console()  # the last job's log file (jobs run in this process) is not the sweep's
        write_sweep_summary(Path(config.hydra.sweep.dir))


class DataRootCallback(Callback):
    """Before a sweep makes its directory or starts a job: every job's ``dataset.root`` exists
    (`normbench.data_roots.check_sweep_data_roots`); else one ``normbench: error:`` line, exit 2."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        use_console()  # an earlier job's log file (an earlier sweep in this process) is not this sweep's
        try:
            check_sweep_data_roots(config)
        except ConfigError as e:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            LOG.error(f"normbench: error: {e}")
            sys.exit(2)
