"""Typed config schemas, stored in Hydra's ConfigStore.

The top-level `RunConfig` types the run-level keys; each group's entries carry their own
schema through their registry (``conf/<group>/<name>.yaml`` lists
``/schema/<group>@_here_: <name>`` in its defaults). Unknown keys and wrong types fail when Hydra composes the config.

`register_configs` also registers the resolvers the config files use: ``${normbench.checkout:…}``
(data roots independent of the current directory, `normbench.data_roots`) and
``${normbench.help:}`` (``normbench --help``, `normbench.cli_help`). `objective` is the one number
a sweeper optimizes: ``optimized_metric`` of the run's final metrics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from normbench.checkpoint import CheckpointConfig
from normbench.divergence import DivergenceConfig
from normbench.hardware import HardwareConfig
from normbench.optim import OptimizerConfig, ScheduleConfig
from normbench.output import warn


@dataclass
class LoggerConfig:
    name: str = "wandb"
    local: bool = True
    """Write ``metrics.jsonl``, ``config.yaml`` and ``summary.json`` into the run directory."""
    wandb: bool = True
    project: str = "normbench"
    entity: str | None = None
    group: str | None = None
    """Default: ``sweep-<sweep dir name>`` in a multirun (one sweep invocation), none otherwise."""
    job_type: str | None = None
    """Default: the experiment preset's name (``train`` without one): every sweep of a preset."""
    tags: list[str] = field(default_factory=list)
    run_name: str | None = None
    mode: str | None = None
    """``online`` / ``offline`` / ``disabled``; default: ``$WANDB_MODE``, else ``offline``."""
    log_every_n_steps: int = 10
    progress_bar: bool = True
    log_checkpoints: bool = False
    """Log each checkpoint file as a W&B ``model`` artifact (``model-<run id>``, aliases ``latest``, ``step-<N>``)."""
    init_timeout_s: float = 60.0
    """How long ``wandb.init`` may try to reach the server before the run falls back to offline."""


@dataclass
class RunConfig:
    model: Any = MISSING
    dataset: Any = MISSING
    norm: Any = MISSING
    hardware: Any = MISSING
    logger: Any = MISSING
    diagnostics: Any = MISSING
    seed: int = 0
    epochs: int = 10
    max_steps: int | None = None
    """Stop after this many optimizer steps (overrides ``epochs`` when set)."""
    batch_size: int = 128
    eval_batch_size: int = 500
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    lr: float = 0.1
    weight_decay: float = 5e-4
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    eval_every_epochs: int = 1
    throughput_warmup_steps: int = 3
    """Steps at the start of the run left out of ``perf/*`` (allocator, autotuning, compile)."""
    resume: bool = False
    """Continue from the last checkpoint in the run directory (``hydra.run.dir=<that dir>``)."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    divergence: DivergenceConfig = field(default_factory=DivergenceConfig)
    optimized_metric: str | None = None
    """The final metric the task function returns, for sweepers that optimize (Optuna); None:
    the task's (`DEFAULT_METRICS`: ``val/acc`` for image classification, ``val/bleu`` for translation)."""


DEFAULT_METRICS = {"image": "val/acc", "sequence": "val/bleu"}
"""The metric to optimize by the kind of input the model takes (the task's kind)."""


def optimized_metric(cfg: Any) -> str:
    """``cfg.optimized_metric``, or the task's default."""
    from normbench.models import model_input_kind

    return cfg.get("optimized_metric") or DEFAULT_METRICS[model_input_kind(cfg.model.name)]


def objective(cfg: Any, result: Mapping[str, Any]) -> float | None:
    """The number a sweeper optimizes: ``optimized_metric`` of a finished run's final metrics.

    None (which Optuna records as a failed trial, and the basic sweeper ignores) for a run that
    did not finish (diverged, interrupted, failed) or a metric the run did not report (with a
    warning naming the ones it did); never NaN, which Optuna's sweeper cannot record."""
    if not isinstance(result, Mapping) or result.get("status") != "finished":
        return None
    name = optimized_metric(cfg)
    value = result.get(name)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        reported = ", ".join(k for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
        warn(f"optimized_metric={name} is not among the run's final metrics ({reported}); the job returns None")
        return None
    return float(value)


def register_configs() -> None:
    """Store the top-level schema and every registry's schemas in the ConfigStore."""
    from hydra.core.config_store import ConfigStore

    import normbench.models
    import normbench.norms
    import normbench.tasks
    from normbench.cli_help import register_resolvers as register_help
    from normbench.data_roots import register_resolvers as register_data_roots
    from normbench.registry import store_schemas

    register_data_roots()
    register_help()
    cs = ConfigStore.instance()
    cs.store(group="schema", name="run", node=RunConfig)
    cs.store(group="schema/hardware", name="hardware", node=HardwareConfig)
    cs.store(group="schema/logger", name="logger", node=LoggerConfig)
    for registry in (normbench.norms.NORMS, normbench.models.MODELS, normbench.tasks.DATASETS):
        store_schemas(registry)
