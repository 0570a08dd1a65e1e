"""One W&B run per training job, laid out for reading: sections, tables, names, tags, groups.

What goes where in a run is `normbench.sinks.wandb_layout` (one section per diagnostic, per-layer values
as one table per diagnostic and step, a ``define_metric`` for every key). Who the run is comes from
Hydra (`run_identity`):

- name: in a multirun, the overrides that differ between the sweep's jobs, e.g. ``norm=gn,seed=1``
  (the swept keys are read from ``<sweep dir>/multirun.yaml``, which holds the sweep's raw
  overrides and the preset's ``hydra.sweeper.params``, parsed with Hydra's own OverridesParser;
  this job's values come from its ``hydra.overrides.task``); a single run: ``<experiment>-<norm>-
  <model>``.
- group: one sweep invocation, ``sweep-<sweep dir name>``; ``job_type``: the experiment preset, so
  repeated sweeps of a preset stay apart but filter together; tags ``experiment:…``, ``norm:…``,
  ``model:…``, ``dataset:…``, ``hardware:…`` (the names in the config; ``hardware:auto`` shows the
  device it picked).
- the logged config gains ``hydra``: Hydra's choices, this job's overrides, the swept keys, the
  sweep directory and job number.

``logger.run_name`` / ``group`` / ``job_type`` / ``tags``, when the user sets them (to anything but
`LoggerConfig`'s default), win over all of this. W&B is imported lazily; offline unless
``logger.mode`` or ``$WANDB_MODE`` says otherwise.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from normbench.base.hydra_job import HydraJob, current_hydra_job
from normbench.base.layout import RunDir
from normbench.base.output import warn
from normbench.sinks.background import SerialWorker
from normbench.sinks.files import Histogram, _jsonable
from normbench.sinks.logger_config import LoggerConfig
from normbench.sinks.wandb_layout import EPOCH, STEP, is_epoch_row, layout, metric_definition
from normbench.sinks.wandb_start import start

TAG_KEYS = ("experiment", "norm", "model", "dataset", "hardware")


SUMMARY_VALUE_MAX_BYTES = 4096
"""The largest value (as JSON) the W&B summary takes; a larger one stays in ``summary.json`` only."""


def small_summary(summary: Mapping[str, Any]) -> dict[str, Any]:
    """``summary`` for W&B: each value JSON-ready, and any value over `SUMMARY_VALUE_MAX_BYTES` as JSON
    replaced by a note of its size (W&B warns on, and slows with, large summary values)."""
    out: dict[str, Any] = {}
    for key, value in summary.items():
        value = _jsonable(value)
        size = len(json.dumps(value, default=str))
        out[key] = value if size <= SUMMARY_VALUE_MAX_BYTES else f"({size} bytes: see summary.json)"
    return out


def new_run_id() -> str:
    """An 8-character W&B run id (lower-case letters and digits), not from the seeded RNGs."""
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(8))


def _short_key(key_element: str) -> str:
    """``experiment/arms/gn_batch_size@_global_`` -> ``gn_batch_size``; ``+model.depth`` -> ``model.depth``."""
    return key_element.lstrip("+~").split("@")[0].split("/")[-1]


def sweep_run_name(job_overrides: list[str], swept: list[str]) -> str | None:
    """``norm=gn,seed=1``: this job's values of the swept keys, in the job's override order."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parts = [
        f"{_short_key(o.get_key_element())}={o.get_value_element_as_str()}"
        for o in OverridesParser.create().parse_overrides(list(job_overrides))
        if o.get_key_element() in swept
    ]
    return ",".join(parts) or None


def _schema_default(name: str) -> Any:
    return LoggerConfig.__dataclass_fields__[name].default


def _user_set(value: Any, name: str) -> Any:
    """``value`` (``logger.<name>``) when the user set it to something other than the schema's default."""
    return value if value and value != _schema_default(name) else None


@dataclass
class RunIdentity:
    name: str | None
    group: str | None
    job_type: str
    tags: list[str]
    hydra: dict[str, Any] | None


def run_identity(cfg: LoggerConfig, config: Mapping[str, Any], group: str | None, job: HydraJob | None) -> RunIdentity:
    """Name, group, job type, tags and the Hydra part of the logged config (see the module doc)."""
    job = job or HydraJob()

    def picked(key: str) -> str | None:
        section = config.get(key)
        name = section.get("name") if isinstance(section, Mapping) else None
        return name or job.choices.get(key)

    values = {"experiment": job.choices.get("experiment"), **{k: picked(k) for k in TAG_KEYS[1:]}}
    device = str(((config.get("hardware") or {}).get("resolved") or {}).get("device") or "")
    if values["hardware"] == "auto" and device:
        values["hardware"] = device.split(":")[0]  # what auto picked: cpu / cuda / mps
    name = sweep_run_name(job.overrides, job.swept) if job.multirun else None
    name = name or "-".join(v for v in (values["experiment"], values["norm"], values["model"]) if v) or None
    if group is None and job.multirun and job.sweep_dir:
        group = f"sweep-{Path(job.sweep_dir).name}"
    hydra = None
    if job.choices or job.overrides:
        hydra = {
            "choices": job.choices,
            "overrides": job.overrides,
            "swept": job.swept,
            "sweep_dir": job.sweep_dir,
            "job_num": job.job_num,
        }
    user_tags = list(cfg.tags)
    return RunIdentity(
        name=_user_set(cfg.run_name, "run_name") or name,
        group=_user_set(cfg.group, "group") or group,
        job_type=_user_set(cfg.job_type, "job_type") or values["experiment"] or _schema_default("job_type") or "train",
        tags=user_tags or [f"{k}:{v}" for k, v in values.items() if v],
        hydra=hydra,
    )


def writable(folder: Path) -> bool:
    """Whether ``folder`` can be made and written (tried: a read-only HOME refuses even root)."""
    import tempfile

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


def redirect_unwritable_home(run_dir: Path) -> dict[str, str]:
    """W&B's folders under HOME (config, cache, data; ``XDG_CACHE_HOME``: where W&B's service
    writes its log, else on the terminal) that cannot be written go under
    ``<run_dir>/wandb/home/``, with one warning: the ``WANDB_*`` ones set for the process (W&B
    stages files there while the run logs); the returned ``XDG_CACHE_HOME`` only for starting W&B
    (it would move other caches too). A variable the user set and that works is kept."""
    home = Path.home()
    defaults = {
        "WANDB_CONFIG_DIR": home / ".config" / "wandb",
        "WANDB_CACHE_DIR": home / ".cache" / "wandb",
        "WANDB_DATA_DIR": home / ".local" / "share" / "wandb",
        "XDG_CACHE_HOME": home / ".cache",
    }
    spare = RunDir(run_dir).wandb / "home"
    moved = {k: str(spare / k.lower()) for k, d in defaults.items() if not writable(Path(os.environ.get(k) or d))}
    if moved:
        warn(f"HOME ({home}) cannot be written; W&B's cache, config and data folders go under {spare}")
        os.environ.update({k: v for k, v in moved.items() if k.startswith("WANDB_")})
    return {k: v for k, v in moved.items() if not k.startswith("WANDB_")}


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Any:
    """``values`` in ``os.environ`` for the block, as they were after it."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class WandbSink:
    """One W&B run. If it cannot start online (no network: a connect tried first, no key, a server
    that refuses within ``logger.init_timeout_s``), it starts offline with the same id and one
    warning line; if it cannot start at all, the run stops with one line (`normbench.sinks.wandb_start`).
    ``run_id`` given: the run is resumed (``resume="allow"``)."""

    def __init__(
        self,
        cfg: LoggerConfig,
        run_dir: Path,
        config: Mapping[str, Any],
        group: str | None,
        run_id: str | None = None,
    ) -> None:
        import wandb

        mode = cfg.mode or os.environ.get("WANDB_MODE") or "offline"
        self.wandb = wandb
        self.cfg = cfg
        ident = run_identity(cfg, config, group, current_hydra_job())
        kwargs = {
            "project": cfg.project,
            "entity": cfg.entity,
            "group": ident.group,
            "job_type": ident.job_type,
            "tags": ident.tags,
            "name": ident.name,
            "dir": str(run_dir),
            "config": {**config, **({"hydra": ident.hydra} if ident.hydra else {})},
            "id": run_id or new_run_id(),
            "resume": "allow",
            # offline: W&B's start lines only (where the run is saved), no history or summary at the end
            "settings": wandb.Settings(init_timeout=cfg.init_timeout_s, quiet=mode == "offline"),
        }
        with environment(redirect_unwritable_home(run_dir)):  # W&B's service starts here
            self.run = start(wandb, mode, kwargs, cfg.init_timeout_s, run_dir, new_run_id)  # or offline, or stop
        for axis in (STEP, EPOCH):
            self.run.define_metric(axis, hidden=True)  # x-axes only: no panels of their own
        self._worker = SerialWorker("normbench-wandb")
        self._defined: set[str] = {STEP, EPOCH}
        self._epoch_rows: dict[tuple[str, ...], bool] = {}  # is_epoch_row by the row's keys (fnmatch per key)

    @property
    def run_id(self) -> str:
        return self.run.id

    def _define(self, key: str, epoch_row: bool) -> None:
        if key not in self._defined:
            self._defined.add(key)
            self.run.define_metric(key, **metric_definition(key, epoch_row))

    def log(self, step: int, epoch: int, metrics: Mapping[str, Any]) -> None:
        """One W&B history row at ``step`` (``epoch`` comes from the row's own ``epoch`` metric),
        made and logged on the sink's worker (`SerialWorker`): the training loop does not wait on W&B.
        An earlier row's error is raised here (or by `flush`), with its step as ``failed_step``."""
        self._worker.submit(self._log, step, dict(metrics), step=step)

    def flush(self) -> None:
        """Return when every row given to `log` is in W&B's hands; raise the first error."""
        self._worker.drain()

    def _log(self, step: int, metrics: Mapping[str, Any]) -> None:
        laid = layout(metrics)
        keys = tuple(metrics)
        epoch_row = self._epoch_rows.get(keys)
        if epoch_row is None:  # a step's rows carry the same keys: matched once
            epoch_row = self._epoch_rows[keys] = is_epoch_row(metrics)
        row: dict[str, Any] = {STEP: step}
        for key, v in laid.scalars.items():
            row[key] = self.wandb.Histogram(np_histogram=(v.counts, v.edges)) if isinstance(v, Histogram) else v
        for key, t in laid.tables.items():
            row[key] = self.wandb.Table(columns=t.columns, data=t.rows)
        for key in row:
            self._define(key, epoch_row)
        self.run.log(row, step=step)

    def log_checkpoint(self, path: Path | str | None, step: int) -> None:
        """The checkpoint file at ``path`` as a ``model`` artifact ``model-<run id>`` (aliases
        ``latest`` and ``step-<step>``), when ``logger.log_checkpoints`` is true; else nothing.
        The file is copied into W&B's staging area at once, so rotating it away later is safe."""
        if not self.cfg.log_checkpoints or path is None:
            return
        self.flush()  # in order after the rows before it, and the file copied before it can rotate away
        artifact = self.wandb.Artifact(f"model-{self.run.id}", type="model", metadata={"step": int(step)})
        artifact.add_file(str(path))
        self.run.log_artifact(artifact, aliases=["latest", f"step-{int(step)}"])

    def finish(self, summary: Mapping[str, Any], exit_code: int = 0) -> None:
        """Adds the run's final facts to the W&B summary (keys that were logged keep the summary
        their ``define_metric`` gives them, e.g. ``val/acc: {max, last}``) and ends the run with
        ``exit_code`` (non-zero: W&B shows the run as failed / interrupted)."""
        try:
            self._worker.close()  # what `MetricLogger.finish` has not flushed (a sink it dropped)
            self.run.summary.update(small_summary({k: v for k, v in summary.items() if k not in self._defined}))
        finally:
            self.run.finish(exit_code=exit_code)
