"""What a training run holds, and the small things the runner does with it.

`Run` is the one object the phases of `normbench.run.loop.train` pass around: the task, the model (and
the model the step calls: wrapped for DDP, maybe compiled), optimizer and schedule, diagnostic
hooks, sinks, checkpointer, divergence monitor, timer and progress, and the `LoopPlan`: what the
loop reads of the config (the run's length, the cadences, the warm-up, the seed, the display),
fixed at set-up; `Run` holds no config. `Epoch` is what one epoch of training steps keeps. Nothing
here decides the order of a run; `normbench.run.loop.train` does.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import nn

from normbench.base.output import info as info_line
from normbench.base.output import warn
from normbench.diagnostics import DiagContext, run_hooks
from normbench.divergence import DivergenceMonitor, diverged_reason, non_finite
from normbench.placement.placement import Placement
from normbench.resume.checkpoint import Carried, Position, Trained
from normbench.resume.checkpointer import Checkpointer
from normbench.run.loop.sums import RunningSums
from normbench.run.loop.timer import StepTimer
from normbench.sinks.files import LocalSink, MetricLogger
from normbench.sinks.progress import show_postfix
from normbench.sinks.wandb_run import WandbSink
from normbench.tasks.base import StepOutput, stat_values

if TYPE_CHECKING:
    from normbench.config import RunConfig


class Place(NamedTuple):
    """Where a run trains (`normbench.run.loop.train.prepare`): its run directory (rank 0's in a
    distributed run), its checkpoints and the state it resumes from (None: a new run)."""

    run_dir: Path
    checkpointer: Checkpointer
    resumed: dict[str, Any] | None


@dataclass
class Sinks:
    """Where metrics go: ``metrics.jsonl`` / ``summary.json`` (``local``) and W&B, on the main process."""

    logger: MetricLogger
    local: LocalSink | None = None
    wandb: WandbSink | None = None


@dataclass
class Progress:
    """Where the run stands (steps, epochs, the position in an epoch, the last epoch's metrics,
    wall time of earlier segments): what a checkpoint restores and the summary reports."""

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
    diverged_in: str = "training"
    """Where the divergence showed: ``training`` (the loss) or ``evaluation`` (a non-finite metric)."""
    diverged_reason: str | None = None
    """What went bad, in words (`normbench.divergence.diverged_reason`); None: the training loss."""
    diag_seconds: float = 0.0
    wall_before: float = 0.0
    """Wall time of the earlier segments of a resumed run, up to the checkpoint it resumed from."""
    train_before: float = 0.0
    """Training-step time of the earlier segments, up to the checkpoint (`Run.train_time`)."""
    carried_offset: int | None = None
    """``metrics.jsonl``'s length in the resumed checkpoint: a segment without the local sink
    passes it on, so that a later one with it cuts the file back to there (never to nothing)."""
    carried_sha256: str | None = None
    """SHA-256 of those ``carried_offset`` bytes (a resume checks the file still holds them)."""
    carried_wandb_id: str | None = None
    """The W&B run id in the resumed checkpoint, passed on the same way."""
    segments: list[dict[str, Any]] = field(default_factory=list)
    """Each segment of the run (the first, then each resume): the step it started from, its code
    and thread count (`segment_record`); the summary lists them."""

    @classmethod
    def resumed(cls, state: Mapping[str, Any], device: torch.device) -> Progress:
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
            train_before=float(state.get("train_time_s", 0.0)),
            carried_offset=state.get("metrics_offset"),
            carried_sha256=state.get("metrics_sha256"),
            carried_wandb_id=state.get("wandb_run_id"),
            segments=[dict(seg) for seg in state.get("segments", [])],
        )


@dataclass(frozen=True)
class LoopPlan:
    """What the loop reads of the config, fixed at set-up (`LoopPlan.of`)."""

    steps_per_epoch: int
    total_steps: int
    """Optimizer steps of the whole run: ``max_steps``, else ``epochs`` x steps per epoch."""
    epochs: int
    """Epochs the run spans (the last one cut short where ``max_steps`` ends the run)."""
    eval_every_epochs: int
    log_every_n_steps: int
    throughput_warmup_steps: int
    """Steps at the start of the run left out of ``perf/*``."""
    seed: int
    """The run's seed: the population statistics before evaluation ``e`` draw from ``seed + e``."""
    loss_factor: float
    """`normbench.divergence.DivergenceConfig.loss_factor`: the summary's words for a diverged loss."""
    show_progress: bool
    """Whether this process shows the progress within an epoch (``logger.progress_bar``, main process)."""
    progress: str
    """``logger.progress``: ``auto``, ``bar`` or ``lines`` (`normbench.sinks.progress`)."""
    progress_every_s: float

    @classmethod
    def of(cls, config: RunConfig, steps_per_epoch: int, main: bool) -> LoopPlan:
        """The plan of a run of ``config`` whose epoch takes ``steps_per_epoch`` steps (``main``:
        this is the main process, the one that shows the progress)."""
        total_steps = config.max_steps or config.epochs * steps_per_epoch
        logger = config.logger
        return cls(
            steps_per_epoch=steps_per_epoch,
            total_steps=total_steps,
            epochs=math.ceil(total_steps / steps_per_epoch),
            eval_every_epochs=config.eval_every_epochs,
            log_every_n_steps=logger.log_every_n_steps,
            throughput_warmup_steps=config.throughput_warmup_steps,
            seed=config.seed,
            loss_factor=config.divergence.loss_factor,
            show_progress=main and logger.progress_bar,
            progress=logger.progress,
            progress_every_s=logger.progress_every_s,
        )


@dataclass
class Run:
    """Everything a training run holds, built by `normbench.run.loop.train.setup`."""

    plan: LoopPlan
    record: dict[str, Any]
    """The config as composed (`normbench.config.as_recorded`): what a checkpoint is checked against."""
    run_dir: Path
    placement: Placement
    """The device and the processes of the job (one, unless ``hardware=ddp``): every collective goes through it."""
    t_start: float
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
    timer: StepTimer
    progress: Progress
    load_start: tuple[float, float, float]
    """The machine's load averages when the run was set up (`Placement.machine_record`)."""

    @property
    def step(self) -> int:
        return self.progress.step

    def wall_time(self) -> float:
        """Seconds of wall time over every segment of the run: the earlier ones up to the
        checkpoint this one resumed from, and this one so far."""
        return self.progress.wall_before + time.time() - self.t_start

    def train_time(self) -> float:
        """The training clock: seconds spent in training steps (forward, backward, optimizer; the
        first steps with torch.compile's compilation included), over every segment of the run —
        not in evaluation, diagnostics, logging or checkpoints. Logged on every row as
        ``perf/train_s`` (x-axis of equal-time comparisons)."""
        return self.progress.train_before + self.timer.total + self.timer.lap()

    def trained(self) -> Trained:
        """What trains: the objects a checkpoint saves (`normbench.resume.checkpointer.Saved`)."""
        return Trained(self.model, self.optimizer, self.scheduler, self.hooks, self.generator)

    def carried(self) -> Carried:
        """What the run's records stand at, for its checkpoint: a segment without the local sink or
        W&B passes on the resumed checkpoint's positions (`Progress`)."""
        c, sinks = self.progress, self.sinks
        return Carried(
            final=c.final,
            reference_loss=self.monitor.reference_loss(),
            wandb_run_id=sinks.wandb.run_id if sinks.wandb is not None else c.carried_wandb_id,
            metrics_offset=sinks.local.offset() if sinks.local is not None else c.carried_offset,
            metrics_sha256=sinks.local.digest() if sinks.local is not None else c.carried_sha256,
            wall_time_s=self.wall_time(),
            train_time_s=self.train_time(),
            segments=c.segments,
        )

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
    sums: RunningSums
    """Running sums of the task's step statistics (on the device: no sync per step)."""
    batch_in_epoch: int
    timed_units: int = 0
    """Samples (or tokens) trained while the step timer ran."""
    bar: Any = None
    before: list[Callable[[int], None]] = field(default_factory=list)
    """The hooks' ``before_step`` / ``after_step`` that do something (`step_calls`)."""
    after: list[Callable[[int], None]] = field(default_factory=list)
    calls: StepCalls | None = None
    next_diag: int = 0
    """The next step at which a diagnostic on a fixed cadence is due (`normbench.run.loop.events`)."""
    asked: list[Any] = field(default_factory=list)
    """The hooks with a ``due`` of their own, asked at every step."""
    next_event: int = 0
    """The next step counter at which a log row, a checkpoint or a progress update is due."""
    shown: int = 0
    """The steps of this epoch the progress display has been given."""


class StepCalls(NamedTuple):
    """What a training step calls, looked up once per epoch (`StepCalls.of`), not per step."""

    forward_loss: Callable[..., StepOutput]
    step_model: nn.Module
    autocast: AbstractContextManager | None
    """The forward's precision context; None where it does nothing (`contextlib.nullcontext`)."""
    zero_grad: Callable[..., None]
    optimizer_step: Callable[[], Any]
    scheduler_step: Callable[[], None]
    observe: Callable[[torch.Tensor, int], None]
    batch_units: Callable[[Any], int]
    add_sums: Callable[[Mapping[str, torch.Tensor]], None]
    warmup: int
    """``throughput_warmup_steps``: the steps before it are left out of the throughput."""

    @classmethod
    def of(cls, run: Run, sums: RunningSums) -> StepCalls:
        autocast = None if isinstance(run.autocast, contextlib.nullcontext) else run.autocast
        return cls(run.task.forward_loss, run.step_model, autocast, run.optimizer.zero_grad, run.optimizer.step,
                   run.scheduler.step, run.monitor.observe, run.task.batch_units, sums.add,
                   run.plan.throughput_warmup_steps)  # fmt: skip


def log(run: Run, metrics: dict[str, Any]) -> None:
    """One row of metrics at the current step. ``epoch`` in every row (step or epoch rows alike)
    is the training progress in epochs, step / steps per epoch; ``perf/train_s`` the training clock."""
    run.sinks.logger.log(run.step, run.step / run.plan.steps_per_epoch, {**metrics, "perf/train_s": run.train_time()})


def save_checkpoint(run: Run, epoch: int, batch_in_epoch: int, generator_state: torch.Tensor, sums: dict) -> None:
    """A checkpoint at the run's step, positioned at ``batch_in_epoch`` of ``epoch`` (`Checkpointer.save`:
    rank 0 writes it, every other rank its own random state); a W&B artifact when ``logger.log_checkpoints``."""
    path = run.checkpointer.save(run, Position(run.step, epoch, batch_in_epoch, generator_state, sums))
    if path is not None and run.sinks.wandb is not None:
        run.sinks.logger.flush(run.step)  # a row that failed on W&B's worker drops it here, as at `log`
        run.sinks.wandb.log_checkpoint(path, run.step)


def diverged_step(run: Run) -> int | None:
    """The step where the loss diverged on any rank (every rank agrees), or None."""
    at = run.monitor.diverged_step()
    latest = run.placement.reduce_max(-1.0 if at is None else float(at))  # -1: none on this rank
    return int(latest) if latest >= 0 else None


def call_diagnostics(due: list[Any], ctx: DiagContext, hooks: list[Any]) -> dict[str, Any]:
    """The due hooks on ``ctx`` with the training state restored after each (`run_hooks`); a
    diagnostic that raises is reported once and removed from ``hooks``."""
    return run_hooks(due, ctx, on_error=functools.partial(switch_off, hooks, ctx.step))


def switch_off(hooks: list[Any], step: int, hook: Any, error: Exception) -> None:
    hooks.remove(hook)
    warn(f"diagnostic {hook.name} failed at step {step} ({type(error).__name__}: {error}); switched off for this run")


def show_progress(run: Run, epoch: Epoch) -> None:
    """The epoch's running train metrics (as they stand when the display draws: the sums are read
    then, not at every log step) and the throughput at this step; formatted and shown only when
    the display draws (`show_postfix`)."""
    # every process trains an equal share of the batch: this rank's rate times the processes is the
    # global rate the records show (`Placement.reduce_throughput`), with no collective here
    units = epoch.timed_units * run.placement.world_size
    seconds = run.timer.elapsed + run.timer.lap()
    show_postfix(epoch.bar, functools.partial(progress_postfix, run.task, epoch.sums.totals, units, seconds))


def progress_postfix(
    task: Any, sums: Callable[[], Mapping[str, torch.Tensor]], units: int, seconds: float
) -> dict[str, str]:
    """What the progress display shows: the running train metrics (``sums()``) and the throughput."""
    running = task.summarize({k: float(v) for k, v in sums().items()}, "train")
    speed = units / max(seconds, 1e-9)
    return {**{k.split("/")[1]: f"{v:.3f}" for k, v in running.items()}, f"{task.unit}/s": f"{speed:.0f}"}


SEGMENT_KEYS = ("git_commit", "git_diff_hash", "num_threads")
"""What a segment records beside its first step: a change of any of them between segments means
the run's metrics are not those of one uninterrupted run (other code; another thread count sums
in another order on CPU)."""


def segment_record(step: int, info: Mapping[str, Any]) -> dict[str, Any]:
    """This segment of the run: its first step, commit (``+dirty``), the tree's diff hash, threads."""
    git = info.get("git") or {}
    return {"from_step": step, "git_commit": info.get("git_commit"), "git_diff_hash": git.get("diff_hash"),
            "num_threads": info.get("num_threads")}  # fmt: skip


def start_segment(progress: Progress, info: Mapping[str, Any], resumed: bool, main: bool) -> None:
    """Record this segment; a resume prints where it continues and warns when its code or thread
    count differ from the segment before it (stdout / stderr and the job's log file)."""
    c = progress
    c.segments.append(segment_record(c.step, info))
    if not (resumed and main):
        return
    info_line(f"[normbench] resuming from step {c.step} (epoch {c.start_epoch + 1}, batch {c.skip})")
    if len(c.segments) < 2:
        return
    before, now = c.segments[-2], c.segments[-1]
    changed = [f"{k} {before.get(k)} -> {now.get(k)}" for k in SEGMENT_KEYS if before.get(k) != now.get(k)]
    if changed:
        warn(
            f"this resume (from step {c.step}) differs from the segment before it: {', '.join(changed)}; its "
            "metrics are not bit for bit those of one run; the summary's segments list each"
        )


def batch_metrics(run: Run, out: StepOutput) -> dict[str, float]:
    """The logged batch's metrics over all processes: ``train/batch_loss`` (the loss optimized)
    and the task's other statistics of the batch (``train/batch_acc``, ``train/batch_ppl``, …)."""
    stats = run.placement.reduce_sum(stat_values(out.stats))
    summary = run.task.summarize({k: float(v) for k, v in stats.items()}, "train/batch")
    metrics = {k.replace("train/batch/", "train/batch_"): v for k, v in summary.items() if k != "train/batch/loss"}
    return {"train/batch_loss": run.placement.reduce_mean(out.loss.detach()).item(), **metrics}


def check_evaluation(run: Run, metrics: Mapping[str, Any]) -> None:
    """An evaluation with a non-finite metric makes the run diverged at this step, naming the metrics."""
    bad = non_finite(metrics)
    if bad:
        c = run.progress
        c.diverged_at, c.diverged_in = run.step, "evaluation"
        c.diverged_reason = diverged_reason({k: metrics[k] for k in bad})


def evaluation_due(run: Run, epoch: int) -> bool:
    """Whether epoch ``epoch`` (0-based) ends with an evaluation: every ``eval_every_epochs``, and the last."""
    return epoch + 1 == run.plan.epochs or (epoch + 1) % run.plan.eval_every_epochs == 0
