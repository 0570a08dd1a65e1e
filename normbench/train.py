"""The training runner: ``run(cfg) -> dict`` of final metrics.

Read `run` and `fit` first: they are the table of contents of a training run.

    run(cfg)                          validate the config, start the processes (DDP)
      setup(cfg) -> Run               seed → task → model → optimizer/schedule → hooks → resume → sinks
      fit(run)                        for each epoch:
        train_epoch(run, epoch)         training steps, diagnostics on their cadence, logging,
                                        divergence checks, mid-epoch checkpoints
        evaluate(run, epoch)            when due: population statistics, then the task's metrics
        end_epoch(run, epoch, metrics)  per-epoch diagnostics, log, checkpoint
      finish(run, status)             ``summary.json`` / W&B summary, the printed line

Every phase reads and writes the one `Run` object (`normbench.run_state`); nothing is kept in
closures. The order of the calls in `setup` is the order in which the random streams are drawn,
which is what makes a seeded run repeat and a resumed run continue bit for bit.
"""

from __future__ import annotations

import itertools
import math
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from normbench import distributed, hardware, run_records
from normbench.checkpoint import Checkpointer, restore
from normbench.diagnostics import DiagContext, build_diagnostics
from normbench.diagnostics.probe import resolve_probe_directions
from normbench.divergence import DivergenceMonitor
from normbench.errors import ConfigError
from normbench.interrupts import Interrupts
from normbench.models import build_model, model_input_kind
from normbench.norms import norm_factory
from normbench.norms.population import refresh_population_stats
from normbench.optim import build_optimizer, lr_factor
from normbench.run_state import (
    Counters,
    Ending,
    Epoch,
    Run,
    Sinks,
    StepTimer,
    call_diagnostics,
    diverged_step,
    plain,
    print_resume,
    print_summary,
    progress_bar,
    resume_state,
    save_checkpoint,
    seed_everything,
    show_progress,
    write_summary,
)
from normbench.sinks import LocalSink, MetricLogger, run_provenance
from normbench.tasks import build_task
from normbench.tasks.base import StepOutput
from normbench.validate import check_norm_in_model, validate_config
from normbench.wandb_sink import WandbSink


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> dict[str, Any]:
    """Train and evaluate as ``cfg`` says; write the run's files into ``run_dir``."""
    if run_dir is None:
        from hydra.core.hydra_config import HydraConfig

        run_dir = HydraConfig.get().runtime.output_dir
    t_start = time.time()
    validate_config(cfg)
    resolve_probe_directions(cfg)  # direction=auto -> gradient | update, into the logged config
    hardware.check(cfg.hardware)
    with Interrupts() as interrupts:  # SIGINT / SIGTERM: at once during setup, at a step boundary after
        ddp = distributed.init(cfg.hardware, hardware.device_type(cfg.hardware))
        try:
            state = setup(cfg, Path(run_dir), ddp, t_start)
            if ddp.is_main:
                run_records.keep_trained_records(state.run_dir)  # what a refused job of a sweep puts back
            interrupts.attach(state.checkpointer)
            result = train(state)
        except BaseException:
            distributed.shutdown(ddp, wait_for_others=False)  # the others may be stuck in a collective
            raise
    distributed.shutdown(ddp)
    return result


def train(run: Run) -> dict[str, Any]:
    """`fit`, then `finish` whatever happened: finished, diverged, failed (an exception) or
    interrupted (a signal; see `normbench.interrupts`). A signal that takes effect only at the
    checkpoint after the last step leaves nothing to do: the run is finished."""
    ending = Ending("failed", 1)
    try:
        ending = Ending(fit(run))
    except BaseException as e:
        ending = Ending.of(e, run)
        if ending.status != "finished":
            raise
    finally:
        result = finish(run, ending)
    return result


def fit(run: Run) -> str:
    """The epochs, from where a resume left off: ``"finished"``, or ``"diverged"`` (the loss)."""
    for epoch in range(run.counters.start_epoch, run.epochs):
        metrics = train_epoch(run, epoch)
        if run.counters.diverged_at is not None:
            log(run, metrics)
            return "diverged"
        if (epoch + 1) % run.cfg.eval_every_epochs == 0 or epoch + 1 == run.epochs:
            metrics.update(evaluate(run, epoch))
        end_epoch(run, epoch, metrics)
    return "finished"


# ---------------------------------------------------------------------------------------------
# setup


def setup(cfg: DictConfig, run_dir: Path, ddp: distributed.DistState, t_start: float) -> Run:
    """Everything the first step needs, built in the order the random streams are drawn."""
    distributed.check_batch(cfg.batch_size, ddp)
    run_dir = distributed.shared_run_dir(run_dir, ddp)
    hooks = build_diagnostics(cfg.diagnostics)  # validates the diagnostics config before anything is written
    config = plain(cfg)  # what a checkpoint is checked against (before the resolved hardware is added)
    checkpointer = Checkpointer(run_dir, cfg.checkpoint)
    resumed = resume_state(cfg, checkpointer, config)
    hardware.configure_backends(cfg.hardware)
    device = hardware.resolve_device(cfg.hardware, ddp.local_rank if ddp.active else None)
    seed_everything(cfg.seed)
    task = load_task(cfg, run_dir, ddp, device)
    model, step_model = build_models(cfg, task, ddp, device)
    steps_per_epoch = task.steps_per_epoch()
    total_steps = cfg.max_steps or cfg.epochs * steps_per_epoch
    for module in model.modules():  # schedules given as fractions of the run (pn, brn): in steps
        if hasattr(module, "plan_schedule"):
            module.plan_schedule(total_steps)
    optimizer = build_optimizer(model, cfg.optimizer, cfg.lr, cfg.weight_decay)
    schedule = partial(lr_factor, cfg=cfg.schedule, total_steps=total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    for hook in hooks:
        hook.setup(model)
    generator = torch.Generator().manual_seed(cfg.seed)
    monitor = DivergenceMonitor(cfg.divergence.loss_factor, resumed["reference_loss"] if resumed else None)
    counters = Counters()
    if resumed is not None:
        restore(resumed, model=model, optimizer=optimizer, scheduler=scheduler, hooks=hooks, generator=generator)
        counters = Counters.resumed(resumed, device)
        if ddp.is_main:
            print_resume(counters)
    sinks, info = open_sinks(cfg, run_dir, ddp, device, model, resumed)
    return Run(
        cfg=cfg,
        run_dir=run_dir,
        ddp=ddp,
        device=device,
        t_start=t_start,
        config=config,
        task=task,
        model=model,
        step_model=step_model,
        optimizer=optimizer,
        scheduler=scheduler,
        hooks=hooks,
        checkpointer=checkpointer,
        monitor=monitor,
        generator=generator,
        autocast=hardware.autocast(cfg.hardware, device),
        sinks=sinks,
        info=info,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
        epochs=math.ceil(total_steps / steps_per_epoch),
        timer=StepTimer(device),
        counters=counters,
    )


def load_task(cfg: DictConfig, run_dir: Path, ddp: distributed.DistState, device: torch.device) -> Any:
    """The data set's task (the main process first: it downloads or writes the files), checked
    against the model's input kind and the norm's needs, sharded across processes."""
    with distributed.main_first(ddp):
        task = build_task(cfg.dataset, cfg, device, run_dir)
    if task.kind != model_input_kind(cfg.model.name):
        raise ConfigError(
            f"model={cfg.model.name} takes {model_input_kind(cfg.model.name)} inputs but "
            f"dataset={cfg.dataset.name} gives {task.kind} inputs"
        )
    if cfg.hardware.channels_last:
        task.memory_format = torch.channels_last
    check_norm_in_model(cfg, task.model_kwargs())
    return distributed.shard_task(task, ddp)


def build_models(
    cfg: DictConfig, task: Any, ddp: distributed.DistState, device: torch.device
) -> tuple[nn.Module, nn.Module]:
    """The model with the run's norm, and the model the step calls (DDP-wrapped, maybe compiled)."""
    model = build_model(cfg.model, norm_factory(cfg.norm), **task.model_kwargs()).to(device)
    hardware.prepare_model(model, cfg.hardware)
    step_model = hardware.maybe_compile(distributed.wrap_model(model, ddp, device), cfg.hardware)
    return model, step_model


def open_sinks(
    cfg: DictConfig,
    run_dir: Path,
    ddp: distributed.DistState,
    device: torch.device,
    model: nn.Module,
    resumed: dict[str, Any] | None,
) -> tuple[Sinks, dict[str, Any]]:
    """The local files and W&B (main process), with the resolved hardware in the logged config;
    and the setup facts the summary reports."""
    resolved = {**hardware.describe(device, cfg.hardware), **distributed.describe(ddp, cfg.batch_size, cfg.norm)}
    cfg.hardware.resolved = resolved
    logged = plain(cfg)
    local = wandb = None
    if cfg.logger.local and ddp.is_main:
        offset = resumed["metrics_offset"] if resumed else None
        local = LocalSink(run_dir, logged, OmegaConf.to_yaml(cfg, resolve=True), resume_offset=offset)
    if cfg.logger.wandb and ddp.is_main:
        wandb_id = resumed["wandb_run_id"] if resumed else None
        wandb = WandbSink(cfg.logger, run_dir, logged, None, wandb_id)  # None: the sweep's group
    sinks = Sinks(MetricLogger([s for s in (local, wandb) if s is not None]), local, wandb)
    info = {
        **resolved,
        **run_provenance(),  # git_commit, git (the tree: dirty files, diff hash), rules (preset, hash)
        "seed": cfg.seed,
        "num_params": sum(p.numel() for p in model.parameters()),
    }
    return sinks, info


# ---------------------------------------------------------------------------------------------
# one epoch of training


def train_epoch(run: Run, epoch: int) -> dict[str, Any]:
    """Training steps until the epoch (or the run) ends or the loss diverges; the epoch's
    ``train/*`` metrics and throughput, over all processes."""
    run.model.train()
    ep = start_epoch(run, epoch)
    for batch in ep.batches:
        if run.step >= run.total_steps:
            break
        run_due_diagnostics(run, batch, epoch)
        out = train_step(run, ep, batch)
        if after_step(run, ep, out):  # diverged
            break
        if ep.bar is not None:
            ep.bar.update(1)
    return end_training_epoch(run, ep)


def start_epoch(run: Run, epoch: int) -> Epoch:
    """The epoch's batches (replayed to the resumed position on the first epoch of a resume)."""
    generator_state = run.generator.get_state()  # the loader replays from here on resume
    c = run.counters
    skip, c.skip = c.skip, 0
    run.timer.elapsed = 0.0
    steps_left = min(run.steps_per_epoch - skip, run.total_steps - c.step)
    bar = progress_bar(run.cfg, epoch, run.epochs, steps_left) if run.ddp.is_main else None
    batches = itertools.islice(run.task.train_batches(epoch, run.generator), skip, None)
    return Epoch(epoch, generator_state, batches, c.resumed_sums if skip else {}, skip, bar=bar)


def run_due_diagnostics(run: Run, batch: Any, epoch: int) -> None:
    """The hooks due at this step, on θ_t and the step's batch, outside the step timer."""
    due = [h for h in run.hooks if h.due(run.step)]
    if not due:
        return
    run.timer.stop()
    t0 = time.perf_counter()
    lr = run.scheduler.get_last_lr()[0]
    ctx = DiagContext(run.model, batch, run.loss, run.optimizer, run.step, epoch, lr, task=run.task)
    log(run, call_diagnostics(due, ctx, run.hooks))
    run.counters.diag_seconds += time.perf_counter() - t0


def train_step(run: Run, ep: Epoch, batch: Any) -> StepOutput:
    """Forward, backward, optimizer and schedule step; the step's loss and statistics (on the device)."""
    if run.step >= run.cfg.throughput_warmup_steps:
        run.timer.start()
    for hook in run.hooks:
        hook.before_step(run.step)
    with run.autocast:
        out = run.task.forward_loss(run.step_model, batch)
    run.optimizer.zero_grad(set_to_none=True)
    out.loss.backward()
    run.optimizer.step()
    run.scheduler.step()
    for hook in run.hooks:
        hook.after_step(run.step)
    run.monitor.observe(out.loss, run.step + 1)  # on the device: no sync
    if run.timer.running:
        ep.timed_units += run.task.batch_units(batch)
    for k, v in out.stats.items():
        ep.sums[k] = ep.sums[k] + v if k in ep.sums else v.clone()
    run.counters.step += 1
    ep.batch_in_epoch += 1
    return out


def after_step(run: Run, ep: Epoch, out: StepOutput) -> bool:
    """Log every ``log_every_n_steps``; at the points that sync anyway, check for divergence
    (True: diverged) and write a mid-epoch checkpoint when one is due."""
    step = run.step
    log_now = step % max(int(run.cfg.logger.log_every_n_steps), 1) == 0 or step == run.total_steps
    mid_epoch_checkpoint = run.checkpointer.due(step) and ep.batch_in_epoch < run.steps_per_epoch
    if log_now:
        log(run, {**batch_metrics(run, out), "lr": run.scheduler.get_last_lr()[0]})
        if ep.bar is not None:
            show_progress(run, ep)
    if not (log_now or mid_epoch_checkpoint):
        return False
    run.counters.diverged_at = diverged_step(run)
    if run.counters.diverged_at is not None:
        return True
    if mid_epoch_checkpoint and step < run.total_steps:
        run.timer.stop()
        save_checkpoint(run, ep.index, ep.batch_in_epoch, ep.generator_state, ep.sums)
    return False


def batch_metrics(run: Run, out: StepOutput) -> dict[str, float]:
    """The logged batch's metrics over all processes: ``train/batch_loss`` (the loss optimized)
    and the task's other statistics of the batch (``train/batch_acc``, ``train/batch_ppl``, …)."""
    stats = distributed.sum_over_ranks(out.stats, run.ddp)
    summary = run.task.summarize({k: float(v) for k, v in stats.items()}, "train/batch")
    metrics = {k.replace("train/batch/", "train/batch_"): v for k, v in summary.items() if k != "train/batch/loss"}
    return {"train/batch_loss": distributed.mean_over_ranks(out.loss.detach(), run.ddp).item(), **metrics}


def log(run: Run, metrics: dict[str, Any]) -> None:
    """One row of metrics at the current step. ``epoch`` in every row (step or epoch rows alike)
    is the training progress in epochs, step / steps per epoch."""
    run.sinks.logger.log(run.step, run.step / run.steps_per_epoch, metrics)


def end_training_epoch(run: Run, ep: Epoch) -> dict[str, Any]:
    """The epoch's sums and throughput over all processes; one more divergence check."""
    run.timer.stop()
    if ep.bar is not None:
        ep.bar.close()
    sums = distributed.sum_over_ranks(ep.sums, run.ddp)
    units, run.timer.elapsed = distributed.throughput_over_ranks(ep.timed_units, run.timer.elapsed, run.ddp, run.device)
    metrics = run.task.summarize({k: float(v) for k, v in sums.items()}, "train")
    if run.timer.elapsed > 0:
        metrics[f"perf/{run.task.unit}_per_s"] = units / run.timer.elapsed
    if run.counters.diverged_at is None:
        run.counters.diverged_at = diverged_step(run)
    return metrics


# ---------------------------------------------------------------------------------------------
# evaluation, the end of an epoch, the end of the run


def evaluate(run: Run, epoch: int) -> dict[str, Any]:
    """The task's evaluation metrics under ``no_grad``, in eval mode (population statistics
    first for ``norm.eval_stats=population``)."""
    # norm.eval_stats=population: exact BN statistics of K training batches (no-op otherwise)
    refresh_population_stats(
        run.model, partial(run.task.train_batches, epoch), run.task.forward_loss, run.cfg.seed + epoch
    )
    run.model.eval()
    with torch.no_grad(), run.autocast:
        return run.task.evaluate(run.step_model)


def end_epoch(run: Run, epoch: int, metrics: dict[str, Any]) -> None:
    """The diagnostics' per-epoch aggregates, the epoch's log line, a checkpoint at the epoch end."""
    c = run.counters
    t0 = time.perf_counter()
    diag_metrics = {f"{h.name}/{k}": v for h in run.hooks for k, v in h.epoch_end().items()}
    c.diag_seconds += time.perf_counter() - t0
    metrics["perf/diag_seconds"] = c.diag_seconds
    metrics["perf/diag_share"] = c.diag_seconds / max(time.time() - run.t_start, 1e-9)
    log(run, {**metrics, **diag_metrics})
    c.final.update(metrics)
    c.epochs_done = epoch + 1
    save_checkpoint(run, epoch + 1, 0, run.generator.get_state(), {})


def finish(run: Run, ending: Ending) -> dict[str, Any]:
    """Write the summary (``summary.json``, W&B with the ending's exit code: `write_summary`) and
    print its line; the run's final metrics."""
    summary = write_summary(run, ending)
    if run.ddp.is_main:
        print_summary(summary, run.task.unit)
    return {**run.counters.final, "status": ending.status}
