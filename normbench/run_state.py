"""What a training run holds, and the small things the runner does with it.

`Run` is the one object the phases of `normbench.train` pass around: the task, the model (and
the model the step calls: wrapped for DDP, maybe compiled), optimizer and schedule, diagnostic
hooks, sinks, checkpointer, divergence monitor, timer and counters. `Epoch` is what one epoch of
training steps keeps. Nothing here decides the order of a run; `normbench.train` does.
"""

from __future__ import annotations

import functools
import json
import random
import signal
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from normbench import distributed, run_records, rundir
from normbench.checkpoint import Checkpointer, training_state
from normbench.diagnostics import DiagContext, run_hooks
from normbench.divergence import DivergenceMonitor
from normbench.errors import ConfigError, RunInterrupted, is_environment_error, one_line_os_error, signal_name
from normbench.output import info, warn
from normbench.sinks import LocalSink, MetricLogger
from normbench.wandb_sink import WandbSink


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def plain(cfg: DictConfig) -> dict[str, Any]:
    """The resolved config as plain python (what checkpoints and sinks store)."""
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


class StepTimer:
    """Wall time of training steps only: paused around evaluation and diagnostics."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.elapsed = 0.0
        self._start: float | None = None

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start(self) -> None:
        if self._start is None:
            self._sync()
            self._start = time.perf_counter()

    def stop(self) -> None:
        if self._start is not None:
            self._sync()
            self.elapsed += time.perf_counter() - self._start
            self._start = None

    def lap(self) -> float:
        """Seconds since `start` (no sync: for progress display only)."""
        return time.perf_counter() - self._start if self._start is not None else 0.0

    @property
    def running(self) -> bool:
        return self._start is not None


@dataclass
class Sinks:
    """Where metrics go: ``metrics.jsonl`` / ``summary.json`` (``local``) and W&B, on the main process."""

    logger: MetricLogger
    local: LocalSink | None = None
    wandb: WandbSink | None = None


@dataclass
class Counters:
    """Where the run stands: what a checkpoint restores and the summary reports."""

    step: int = 0
    """Optimizer steps taken."""
    start_epoch: int = 0
    skip: int = 0
    """Batches of ``start_epoch`` already trained before a resume (the loader replays past them)."""
    resumed_sums: dict[str, torch.Tensor] = field(default_factory=dict)
    """The resumed epoch's running metric sums."""
    final: dict[str, Any] = field(default_factory=dict)
    """The last epoch's metrics."""
    epochs_done: int = 0
    diverged_at: int | None = None
    diag_seconds: float = 0.0
    wall_before: float = 0.0
    """Wall time of the earlier segments of a resumed run, up to the checkpoint it resumed from."""
    carried_offset: int | None = None
    """``metrics.jsonl``'s length in the resumed checkpoint: a segment without the local sink
    passes it on, so that a later one with it cuts the file back to there (never to nothing)."""
    carried_wandb_id: str | None = None
    """The W&B run id in the resumed checkpoint, passed on the same way."""

    @classmethod
    def resumed(cls, state: Mapping[str, Any], device: torch.device) -> Counters:
        """Where a checkpoint left the run: step, epoch, batch within it, the epoch's sums so far,
        the time spent so far, the files' positions."""
        return cls(
            step=state["step"],
            start_epoch=state["epoch"],
            skip=state["batch_in_epoch"],
            resumed_sums={k: v.to(device) for k, v in state["epoch_sums"].items()},
            final=dict(state["final"]),
            epochs_done=state["epoch"],
            wall_before=float(state.get("wall_time_s", 0.0)),
            carried_offset=state.get("metrics_offset"),
            carried_wandb_id=state.get("wandb_run_id"),
        )


@dataclass
class Run:
    """Everything a training run holds, built by `normbench.train.setup`."""

    cfg: DictConfig
    run_dir: Path
    ddp: distributed.DistState
    device: torch.device
    t_start: float
    config: dict[str, Any]
    """The config a checkpoint is checked against (before the resolved hardware is added)."""
    task: Any
    model: nn.Module
    """The model as built: diagnostics, checkpoints and evaluation statistics use it."""
    step_model: nn.Module
    """The model the training step calls: ``model`` wrapped for DDP and maybe compiled."""
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    hooks: list[Any]
    checkpointer: Checkpointer
    monitor: DivergenceMonitor
    generator: torch.Generator
    """The training loader's random stream (checkpointed)."""
    autocast: AbstractContextManager
    sinks: Sinks
    info: dict[str, Any]
    """What the summary reports about the setup: device, precision, git commit, seed, parameters."""
    steps_per_epoch: int
    total_steps: int
    epochs: int
    timer: StepTimer
    counters: Counters

    @property
    def step(self) -> int:
        return self.counters.step

    def loss(self, model: nn.Module, batch: Any) -> torch.Tensor:
        """The training loss of ``batch`` as the step computes it (the diagnostics' ``loss_fn``)."""
        with self.autocast:
            return self.task.forward_loss(model, batch).loss


@dataclass
class Epoch:
    """One epoch of training steps in progress."""

    index: int
    generator_state: torch.Tensor
    """The loader's random stream at the epoch's start: a resume replays the epoch from here."""
    batches: Iterator[Any]
    sums: dict[str, torch.Tensor]
    """Running sums of the task's step statistics (on the device: no sync per step)."""
    batch_in_epoch: int
    timed_units: int = 0
    """Samples (or tokens) trained while the step timer ran."""
    bar: Any = None


RESULT_STATUSES = ("finished", "diverged")
"""A run that ended with one of these is a result: nothing starts over it."""


def resume_state(cfg: DictConfig, checkpointer: Checkpointer, config: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint to continue from (``resume=true``: a verified one, else `ConfigError`).

    A new run is refused where a run left a checkpoint or a result. Where one left neither (killed
    or interrupted before its first checkpoint, or failed), the new run starts over; the old
    records are moved to ``restarts/<n>/`` first (`run_records.set_aside`), so nothing is lost."""
    if cfg.get("resume", False):
        return checkpointer.resume_state(config)
    run_dir = checkpointer.run_dir
    status = summary_status(run_dir / "summary.json")
    if checkpointer.has_checkpoints() or status in (*RESULT_STATUSES, "unreadable"):
        raise ConfigError(
            f"the run directory {run_dir} already holds a run; pass resume=true to continue it, "
            "or choose another hydra.run.dir"
        )
    if not rundir.secondary_rank():  # rank 0 moves them
        moved = run_records.set_aside(run_dir)
        if moved is not None:
            warn(
                f"{run_dir} holds a run that left no checkpoint (status {status or 'unknown: it was killed'}); "
                f"starting over, its records moved to {moved}"
            )
    return None


def summary_status(path: Path) -> str | None:
    """``status`` in a run's ``summary.json``; None when there is none; ``unreadable`` when it
    does not parse (a result that cannot be read is still not overwritten)."""
    try:
        return str(json.loads(path.read_text()).get("status"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, AttributeError):
        return "unreadable"


@dataclass
class Ending:
    """How a run ended: its status, the exit code W&B records (0: finished or diverged, 128 +
    signal: interrupted, 1: failed), the error in one line, the signal's name."""

    status: str
    exit_code: int = 0
    error: str | None = None
    signal: str | None = None

    @classmethod
    def of(cls, error: BaseException, run: Run) -> Ending:
        """The ending that ``error`` (raised out of `normbench.train.fit`) makes."""
        if isinstance(error, (RunInterrupted, KeyboardInterrupt)):
            signum = error.signum if isinstance(error, RunInterrupted) else signal.SIGINT
            if run.counters.epochs_done >= run.epochs:  # the signal came after the last step: nothing is missing
                return cls("finished")
            return cls("interrupted", 128 + signum, signal=signal_name(signum))
        if isinstance(error, SystemExit):  # submitit requeues a preempted job with sys.exit(-1)
            code = error.code if isinstance(error.code, int) and error.code else 1
            return cls("interrupted", code, signal="exit")
        return cls("failed", 1, error=one_line(error))


def one_line(error: BaseException) -> str:
    """``error`` as one line: a `ConfigError`'s message, a refused write's file and reason, else
    the type and the first line of the message."""
    if isinstance(error, ConfigError):
        return str(error)
    if is_environment_error(error):
        return one_line_os_error(error)  # type: ignore[arg-type]
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def save_checkpoint(run: Run, epoch: int, batch_in_epoch: int, generator_state: torch.Tensor, sums: dict) -> None:
    """Write a checkpoint at the run's step (main process), positioned at ``batch_in_epoch`` of ``epoch``."""
    if not run.checkpointer.enabled or not run.ddp.is_main:
        return
    c, sinks = run.counters, run.sinks
    path = run.checkpointer.save(
        training_state(
            config=run.config,
            model=run.model,
            optimizer=run.optimizer,
            scheduler=run.scheduler,
            hooks=run.hooks,
            epoch_generator_state=generator_state,
            step=c.step,
            epoch=epoch,
            batch_in_epoch=batch_in_epoch,
            epoch_sums=sums,
            final=c.final,
            reference_loss=run.monitor.reference_loss(),
            wandb_run_id=sinks.wandb.run_id if sinks.wandb is not None else c.carried_wandb_id,
            metrics_offset=sinks.local.offset() if sinks.local is not None else c.carried_offset,
            wall_time_s=wall_time(run),
        )
    )
    if path is not None and sinks.wandb is not None:
        sinks.wandb.log_checkpoint(path, c.step)  # a W&B artifact when logger.log_checkpoints


def write_summary(run: Run, ending: Ending) -> dict[str, Any]:
    """The run's summary, written to ``summary.json`` and W&B (whose run is finished with the
    ending's exit code); ``wall_time_s`` counts every segment of a resumed run. Temporary files of
    failed writes go first (on a full disk, that is the space the summary needs); when the run is
    failing anyway, a summary that cannot be written is a warning, not a second error."""
    c = run.counters
    summary = {"status": ending.status, "step": c.step, "epoch": c.epochs_done, "wall_time_s": wall_time(run)}
    summary.update({**run.info, **c.final})
    if ending.error is not None:
        summary["error"] = ending.error
    if ending.signal is not None:
        summary["interrupted_by"] = ending.signal
    if c.diverged_at is not None:
        summary["diverged_step"] = c.diverged_at
    if run.sinks.wandb is not None:
        summary["wandb_run_id"] = run.sinks.wandb.run_id
    try:
        if run.ddp.is_main:
            run_records.remove_tmp_files(run.run_dir)
        run.sinks.logger.finish(summary, exit_code=ending.exit_code)
    except Exception as e:
        if ending.status in ("finished", "diverged"):
            raise
        warn(f"the summary of this {ending.status} run could not be written ({one_line(e)})")
    finally:
        if run.ddp.is_main:
            run_records.remove_tmp_files(run.run_dir)
    return summary


def wall_time(run: Run) -> float:
    """Seconds of wall time over every segment of the run: the earlier ones up to the checkpoint
    this one resumed from, and this one so far."""
    return run.counters.wall_before + time.time() - run.t_start


def diverged_step(run: Run) -> int | None:
    """The step where the loss diverged on any rank (every rank agrees), or None."""
    at = run.monitor.diverged_step()
    if run.ddp.active:
        flag = torch.tensor(float(at if at is not None else -1), device=run.device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        at = int(flag.item()) if flag.item() >= 0 else None
    return at


def call_diagnostics(due: list[Any], ctx: DiagContext, hooks: list[Any]) -> dict[str, Any]:
    """The due hooks on ``ctx`` with the training state restored after each (`run_hooks`); a
    diagnostic that raises is reported once and removed from ``hooks``."""
    return run_hooks(due, ctx, on_error=functools.partial(switch_off, hooks, ctx.step))


def switch_off(hooks: list[Any], step: int, hook: Any, error: Exception) -> None:
    hooks.remove(hook)
    warn(f"diagnostic {hook.name} failed at step {step} ({type(error).__name__}: {error}); switched off for this run")


def progress_bar(cfg: DictConfig, epoch: int, epochs: int, steps: int) -> Any:
    if not cfg.logger.progress_bar:
        return None
    from tqdm import tqdm

    return tqdm(total=steps, desc=f"epoch {epoch + 1}/{epochs}", leave=False, file=sys.stderr, dynamic_ncols=True)


def show_progress(run: Run, epoch: Epoch) -> None:
    """The epoch's running train metrics and throughput on the progress bar."""
    running = run.task.summarize({k: float(v) for k, v in epoch.sums.items()}, "train")
    speed = epoch.timed_units / max(run.timer.elapsed + run.timer.lap(), 1e-9)
    postfix = {**{k.split("/")[1]: f"{v:.3f}" for k, v in running.items()}, f"{run.task.unit}/s": f"{speed:.0f}"}
    epoch.bar.set_postfix(postfix, refresh=False)


def print_summary(summary: Mapping[str, Any], unit: str) -> None:
    """The run's one result line (stdout and the job's log file)."""
    keys = ["val/acc", "val/bleu", "test/bleu", "val/loss", "train/loss", f"perf/{unit}_per_s"]
    parts = [f"{k}={summary[k]:.4g}" for k in keys if isinstance(summary.get(k), (int, float))]
    info(
        f"[normbench] {summary['status']} after {summary['step']} steps, {summary['wall_time_s']:.1f}s: "
        + " ".join(parts)
    )


def print_resume(counters: Counters) -> None:
    """Where a resumed run continues (stdout and the job's log file)."""
    c = counters
    info(f"[normbench] resuming from step {c.step} (epoch {c.start_epoch + 1}, batch {c.skip})")
