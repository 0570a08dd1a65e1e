"""`LoggerConfig`: the ``logger`` group's schema (``conf/logger/*.yaml``), for the sinks it
configures: the local files (`normbench.sinks.files`), the W&B run (`normbench.sinks.wandb_run`)
and the progress display (`normbench.sinks.progress`)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from normbench.base.errors import ConfigError, require
from normbench.sinks.progress import PROGRESS_MODES


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
    """Show the progress within each epoch (false: only the logged rows and the result line)."""
    progress: str = "auto"
    """``bar`` (tqdm, redrawn in place), ``lines`` (plain lines: one per epoch, one every
    ``progress_every_s`` within a long one) or ``auto`` (the bar on a terminal, lines in a log file)."""
    progress_every_s: float = 60.0
    log_checkpoints: bool = False
    """Log each checkpoint file as a W&B ``model`` artifact (``model-<run id>``, aliases ``latest``, ``step-<N>``)."""
    init_timeout_s: float = 60.0
    """How long ``wandb.init`` may try to start the run online (W&B's ``init_timeout``) before the run
    falls back to offline; a TCP connect of at most 5 s is tried first, so without a network it
    falls back at once (`normbench.sinks.wandb_start`)."""

    def __post_init__(self) -> None:
        require(self.log_every_n_steps > 0, "logger.log_every_n_steps", self.log_every_n_steps, "a positive integer")
        require(
            self.progress in PROGRESS_MODES, "logger.progress", self.progress, f"one of {', '.join(PROGRESS_MODES)}"
        )
        require(
            math.isfinite(self.progress_every_s) and self.progress_every_s > 0,
            "logger.progress_every_s",
            self.progress_every_s,
            "> 0 seconds",
        )
        if self.wandb:  # W&B reads its variables whatever the config says
            for key, value in (("logger.project", self.project), ("logger.entity", self.entity),
                               ("$WANDB_PROJECT", os.environ.get("WANDB_PROJECT")),
                               ("$WANDB_ENTITY", os.environ.get("WANDB_ENTITY"))):  # fmt: skip
                check_wandb_name(key, value)


WANDB_NAME_FORBIDDEN = "/\\#?%:"
"""Characters W&B refuses in a project or entity name (``logger.project=a/b/c`` failed with a 30-41-line UsageError)."""


def check_wandb_name(key: str, value: str | None) -> None:
    """A W&B project or entity name W&B will take (not empty, none of `WANDB_NAME_FORBIDDEN`, at most
    128 characters); else one line naming the key (or the environment variable)."""
    if value is None:
        return
    bad = sorted({c for c in value if c in WANDB_NAME_FORBIDDEN})
    if not value.strip() or bad or len(value) > 128:
        why = f"it holds {' '.join(repr(c) for c in bad)}" if bad else ("it is empty" if not value.strip() else
                                                                       "it is over 128 characters")  # fmt: skip
        raise ConfigError(f"{key}={value!r} is not a W&B name: {why}; use letters, digits, "
                          "'-', '_' and '.' (an entity goes in logger.entity, not in the project's name)")
