"""What Hydra knows about the running job, read from Hydra's config (a module that faces Hydra):
its choices and overrides, and in a multirun the sweep directory, the job number and the keys the
sweep varies (from ``<sweep dir>/multirun.yaml``: the sweep's raw overrides and the preset's
``hydra.sweeper.params``, parsed with Hydra's own OverridesParser). The W&B run is named by it
(`normbench.sinks.wandb_run.run_identity`); its ``experiment`` choice goes into the run's provenance,
and its ``output_subdir`` is where a run directory's Hydra records lie."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def swept_keys(task_overrides: list[str], sweeper_params: Mapping[str, Any] | None = None) -> list[str]:
    """The keys (Hydra key elements, e.g. ``norm``, ``+x``, ``group@pkg``) that take more than one
    value in a sweep: the preset's ``hydra.sweeper.params`` first, then the command line's
    overrides, a later override of a key replacing an earlier one (as Hydra's BasicSweeper does)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = [f"{k}={v}" for k, v in (sweeper_params or {}).items()] + list(task_overrides)
    last: dict[str, bool] = {}
    for override in OverridesParser.create().parse_overrides(lines):
        last[override.get_key_element()] = override.is_sweep_override()
    return [key for key, swept in last.items() if swept]


@dataclass
class HydraJob:
    """What Hydra knows about the running job (`current_hydra_job`)."""

    choices: dict[str, str] = field(default_factory=dict)
    overrides: list[str] = field(default_factory=list)
    multirun: bool = False
    sweep_dir: str | None = None
    job_num: int | None = None
    swept: list[str] = field(default_factory=list)


def _container(node: Any) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.to_container(node, resolve=False) if node is not None else None


def _resolved(node: Any) -> Any:
    """A sweep's params with their interpolations resolved (``norm: ${normbench.norms:}``, the
    registered norms: `normbench.cli.store.norm_list`)."""
    from omegaconf import OmegaConf

    try:
        return OmegaConf.to_container(node, resolve=True) if node is not None else None
    except Exception:  # a resolver this process lacks: the values as written
        return _container(node)


def _user_group(group: str) -> bool:
    """The config groups a user picks: not ``schema/…`` (typing), not Hydra's own but its launcher
    and sweeper."""
    return not group.startswith(("schema", "hydra/")) or group in ("hydra/launcher", "hydra/sweeper")


def current_hydra_job() -> HydraJob | None:
    """The running Hydra job, or None outside Hydra (e.g. ``train.run(cfg, run_dir)`` in a test)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode
    from omegaconf import OmegaConf

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    job = HydraJob(
        choices={k: v for k, v in _container(hc.runtime.choices).items() if v is not None and _user_group(k)},
        overrides=list(hc.overrides.task),
        multirun=hc.mode == RunMode.MULTIRUN,
    )
    if not job.multirun:
        return job
    job.sweep_dir, job.job_num = str(hc.sweep.dir), hc.job.get("num")
    raw, params = [], _resolved(hc.sweeper.get("params"))
    saved = Path(job.sweep_dir) / "multirun.yaml"  # written by the sweeper before the first job
    if saved.is_file():
        sweep_cfg = OmegaConf.load(saved)
        raw = _container(OmegaConf.select(sweep_cfg, "hydra.overrides.task")) or []
        params = _resolved(OmegaConf.select(sweep_cfg, "hydra.sweeper.params")) or params
    try:
        job.swept = swept_keys(raw, params)
    except Exception:  # an override this Hydra cannot parse: name the run by all its overrides
        job.swept = [o.split("=", 1)[0] for o in job.overrides]
    return job


def hydra_preset() -> str | None:
    """Hydra's ``experiment`` choice of the running job (None outside Hydra, or with no preset)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    preset = HydraConfig.get().runtime.choices.get("experiment")
    return str(preset) if preset else None


def hydra_output_subdir() -> str | None:
    """``hydra.output_subdir`` (``.hydra``) of the running Hydra job; None outside Hydra or when
    Hydra writes no such folder."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized() or HydraConfig.get().output_subdir is None:
        return None
    return str(HydraConfig.get().output_subdir)
