"""Typed config schemas, stored in Hydra's ConfigStore.

The top-level `RunConfig` types the run-level keys; each group's entries carry their own
schema through their registry (``conf/<group>/<name>.yaml`` lists
``/schema/<group>@_here_: <name>`` in its defaults). Unknown keys and wrong types fail when Hydra composes the config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from normbench.checkpoint import CheckpointConfig
from normbench.divergence import DivergenceConfig
from normbench.hardware import HardwareConfig
from normbench.optim import OptimizerConfig, ScheduleConfig


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


def register_configs() -> None:
    """Store the top-level schema and every registry's schemas in the ConfigStore."""
    from hydra.core.config_store import ConfigStore

    import normbench.models
    import normbench.norms
    import normbench.tasks
    from normbench.registry import store_schemas

    cs = ConfigStore.instance()
    cs.store(group="schema", name="run", node=RunConfig)
    cs.store(group="schema/hardware", name="hardware", node=HardwareConfig)
    cs.store(group="schema/logger", name="logger", node=LoggerConfig)
    for registry in (normbench.norms.NORMS, normbench.models.MODELS, normbench.tasks.DATASETS):
        store_schemas(registry)
