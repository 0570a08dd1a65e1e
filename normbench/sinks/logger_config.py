"""`LoggerConfig`: the ``logger`` group's schema (``conf/logger/*.yaml``), for the sinks it
configures: the local files (`normbench.sinks.files`), the W&B run (`normbench.sinks.wandb_run`)
and the progress display (`normbench.sinks.progress`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from normbench.base.errors import require
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
    """How long ``wandb.init`` may try to reach the server before the run falls back to offline."""

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
