"""Where normbench's files lie: a run's folder (`RunDir`) and the configs' folder (`conf_dir`).

Every file name of a run directory is written here and nowhere else (``tests/base/test_layout.py``
fails on a second module that spells one): the sinks write through `RunDir`, the run's lock and its
records (``normbench.records``), the checkpoints (``normbench.resume``), the runner's policy,
the command line and the analysis read through it. A run directory holds::

    <run dir>/
      metrics.jsonl   one JSON object a line (normbench.sinks.files.LocalSink)
      config.yaml     the resolved config as recorded (normbench.config.as_recorded)
      summary.json    final metrics, status, wall time, provenance
      checkpoints/    step-<step>.pt with SHA-256 sidecars; rejected/ (normbench.resume.files)
      wandb/          W&B's own files
      restarts/<n>/   the records of an attempt set aside (normbench.records.segments)
      traceback.txt   a sweep's job that crashed (normbench.cli.main.refused_job)
      .normbench.lock the writer's PID while it runs (normbench.records.rundir.RunDirLock)
      .hydra/         Hydra's layout, not ours: config.yaml, hydra.yaml, overrides.yaml (at
                      Hydra's default ``hydra.output_subdir``); trained/ holds the copy taken when
                      the run was last accepted (normbench.records.segments)

Hydra's names are routed through here too, so that a file name is spelt once; Hydra decides them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar


@dataclass(frozen=True)
class RunDir:
    """A run directory's layout: the path of each file a run writes or reads there. Makes and
    checks nothing; ``RunDir(path).summary`` is ``path / "summary.json"``. Hydra's files are
    Hydra's layout, named here so that each name is spelt once: `hydra` is its folder at Hydra's
    default ``hydra.output_subdir`` (where a finished run's records are read); the running job's
    own setting is `normbench.records.segments.hydra_dir`'s."""

    path: Path

    METRICS: ClassVar[str] = "metrics.jsonl"
    SUMMARY: ClassVar[str] = "summary.json"
    CONFIG: ClassVar[str] = "config.yaml"
    CHECKPOINTS: ClassVar[str] = "checkpoints"
    WANDB: ClassVar[str] = "wandb"
    RESTARTS: ClassVar[str] = "restarts"
    TRACEBACK: ClassVar[str] = "traceback.txt"
    LOCK: ClassVar[str] = ".normbench.lock"
    HYDRA: ClassVar[str] = ".hydra"
    """Hydra's default ``hydra.output_subdir``."""
    HYDRA_OVERRIDES: ClassVar[str] = "overrides.yaml"
    HYDRA_FILES: ClassVar[tuple[str, ...]] = (CONFIG, "hydra.yaml", HYDRA_OVERRIDES)
    """What Hydra (re)writes into its folder at every start of a job."""
    TRAINED: ClassVar[str] = "trained"
    """``.hydra/trained/``: Hydra's files as they were when the run was last accepted."""

    RECORDS: ClassVar[tuple[str, ...]] = (METRICS, SUMMARY, CONFIG)
    """What a run writes at its top level (`normbench.sinks.files.LocalSink`)."""
    RESULTS: ClassVar[tuple[str, ...]] = (METRICS, SUMMARY, CHECKPOINTS, WANDB)
    """Entries that mean a run got as far as results: a run that wrote one is never cleaned away."""
    NOT_RUNS: ClassVar[tuple[str, ...]] = (WANDB, HYDRA, CHECKPOINTS)
    """Folders of a run that are never runs themselves (W&B's own, Hydra's, the checkpoints)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def metrics(self) -> Path:
        return self.path / self.METRICS

    @property
    def summary(self) -> Path:
        return self.path / self.SUMMARY

    @property
    def config(self) -> Path:
        return self.path / self.CONFIG

    @property
    def checkpoints(self) -> Path:
        return self.path / self.CHECKPOINTS

    @property
    def wandb(self) -> Path:
        return self.path / self.WANDB

    @property
    def restarts(self) -> Path:
        return self.path / self.RESTARTS

    @property
    def traceback(self) -> Path:
        """A crashed job's traceback (a sweep's job, `normbench.cli.main.refused_job`)."""
        return self.path / self.TRACEBACK

    @property
    def lock(self) -> Path:
        return self.path / self.LOCK

    @property
    def hydra(self) -> Path:
        return self.path / self.HYDRA

    @property
    def hydra_config(self) -> Path:
        """Hydra's ``.hydra/config.yaml``: the config as composed, also of a job refused before training."""
        return self.hydra / self.CONFIG

    @property
    def hydra_overrides(self) -> Path:
        return self.hydra / self.HYDRA_OVERRIDES

    @property
    def trained_overrides(self) -> Path:
        """``.hydra/trained/overrides.yaml``: the overrides of the run that was last accepted."""
        return self.hydra / self.TRAINED / self.HYDRA_OVERRIDES


PACKAGE_DIR = Path(__file__).resolve().parents[1]
PRIMARY_CONFIG = RunDir.CONFIG
"""Hydra's primary config in ``conf/`` (``config_name="config"``): by Hydra's convention the same
name as a run's recorded config."""


def conf_dir() -> Path | None:
    """``conf/`` beside the package in a checkout, else the copy packed into the wheel (``_conf``);
    None when neither holds the primary config."""
    for candidate in (PACKAGE_DIR.parent / "conf", PACKAGE_DIR / "_conf"):
        if (candidate / PRIMARY_CONFIG).is_file():
            return candidate
    return None
