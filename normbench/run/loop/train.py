"""The training runner: ``run(cfg) -> dict`` of final metrics. `run` and `fit` are its table of contents.

    run(cfg)                          parse the config (typed), check it, start the processes (DDP)
      setup(config, record) -> Run    prepare: run directory, device, resume, seeds; then
                                      task → model → optimizer/schedule → hooks → sinks
      fit(run)                        for each epoch:
        train_epoch(run, epoch)         steps, diagnostics, logging, divergence, mid-epoch checkpoints
        evaluate(run, epoch)            when due: population statistics, then the task's metrics
        end_epoch(run, epoch, metrics)  per-epoch diagnostics, log, checkpoint, the epoch's line
      finish(run, status)             ``summary.json`` / W&B summary, the printed line

Only `run` sees Hydra's ``DictConfig``: it parses it into the typed `RunConfig` (`normbench.config.parse`);
each room below takes its own dataclass and plain values. Every phase reads and writes the one `Run` object
(`normbench.run.loop.state`); nothing is kept in closures. The order of the calls in `setup` is the order in
which the random streams are drawn: a seeded run repeats and a resumed run continues bit for bit.
"""

from __future__ import annotations

import itertools
import time
from functools import partial
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import nn

from normbench.config import RunConfig, as_recorded, comparable_record, parse
from normbench.diagnostics import build_diagnostics
from normbench.diagnostics.registry import step_calls
from normbench.divergence import DivergenceMonitor
from normbench.models import build_model
from normbench.norms.population import evaluate_each, refresh_population_stats
from normbench.optim import build_optimizer, lr_factor
from normbench.placement.placement import Placement
from normbench.records import segments as run_records
from normbench.resume.checkpoint import Trained
from normbench.resume.checkpointer import Checkpointer
from normbench.run.loop.events import any_due, next_diagnostic, next_run_event, run_due_diagnostics
from normbench.run.loop.interrupts import Interrupts
from normbench.run.loop.policy import Ending, print_summary, write_summary
from normbench.run.loop.state import (
    Epoch,
    LoopPlan,
    Place,
    Progress,
    Run,
    Sinks,
    StepCalls,
    StepTimer,
    batch_metrics,
    call_diagnostics,  # noqa: F401 (named here: run_due_diagnostics moved to events.py)
    check_evaluation,
    diverged_step,
    evaluation_due,
    log,
    save_checkpoint,
    show_progress,
    start_segment,
)
from normbench.run.loop.sums import RunningSums
from normbench.run.loop.validate import RunNorm, check_before_data, check_norm_in_model
from normbench.sinks.files import LocalSink, MetricLogger, run_provenance
from normbench.sinks.logger_config import LoggerConfig
from normbench.sinks.progress import progress_display, show_epoch
from normbench.sinks.wandb_run import WandbSink
from normbench.tasks import build_task
from normbench.tasks.base import StepOutput


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> dict[str, Any]:
    """Train and evaluate as ``cfg`` (the composed config) says; write the run's files into ``run_dir``."""
    if run_dir is None:
        from hydra.core.hydra_config import HydraConfig

        run_dir = HydraConfig.get().runtime.output_dir
    t_start = time.time()
    config = parse(cfg)  # every value checked by the dataclass that owns it; the probe direction chosen
    record = as_recorded(cfg, config)
    norm = check_before_data(  # the norm's factory, built once
        config.model, config.norm, config.dataset, config.batch_size, config.hardware.compile
    )
    with Interrupts() as interrupts:  # STOP_SIGNALS: at once during setup, at a step boundary after
        placement = Placement.start(config.hardware)  # the processes (DDP) joined, the device chosen
        try:
            state = setup(config, record, Path(run_dir), placement, t_start, norm)
            if placement.is_main:
                run_records.keep_trained_records(state.run_dir)  # what a refused job of a sweep puts back
            interrupts.attach(state.checkpointer)
            result = train(state)
        except BaseException:
            placement.shutdown(wait_for_others=False)  # the others may be stuck in a collective
            raise
    placement.shutdown()
    return result


def train(run: Run) -> dict[str, Any]:
    """`fit`, then `finish` whatever happened: finished, diverged, failed (an exception) or
    interrupted (a signal; see `normbench.run.loop.interrupts`). A signal that takes effect only at the
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
    for epoch in range(run.progress.start_epoch, run.plan.epochs):
        metrics = train_epoch(run, epoch)
        if run.progress.diverged_at is None and evaluation_due(run, epoch):
            metrics.update(evaluate(run, epoch))
            check_evaluation(run, metrics)  # a broken model's evaluation is a non-result (diverged), never a score
        if run.progress.diverged_at is not None:  # the training loss, or the evaluation
            log(run, metrics)
            return "diverged"
        end_epoch(run, epoch, metrics)
    return "finished"


# ---------------------------------------------------------------------------------------------
# setup


def prepare(config: RunConfig, record: dict[str, Any], run_dir: Path, placement: Placement) -> Place:
    """Where the run trains, in one phase: the processes' share of the batch and their run
    directory, the device's backends, the checkpoint to resume from (or a directory to start
    in), the seeds."""
    placement.check_batch(config.batch_size)
    run_dir = placement.shared_run_dir(run_dir)
    placement.configure_backends()
    checkpointer = Checkpointer(run_dir, config.checkpoint, record, seed=config.seed, rank=placement.rank)
    resumed = checkpointer.start(config.resume, load=comparable_record)  # compared as typed records
    checkpointer.seed_everything()
    return Place(run_dir, checkpointer, resumed)


def setup(
    config: RunConfig, record: dict[str, Any], run_dir: Path, placement: Placement, t_start: float, norm: RunNorm
) -> Run:
    """The place (`prepare`), then what trains (with the run's ``norm``: `check_before_data`), in
    the order the random streams are drawn."""
    hooks = build_diagnostics(config.diagnostics)
    run_dir, checkpointer, resumed = prepare(config, record, run_dir, placement)
    task = load_task(config, run_dir, placement)
    model, step_model = build_models(config, norm, task, placement)
    plan = LoopPlan.of(config, task.steps_per_epoch(), placement.is_main)
    for module in model.modules():  # schedules given as fractions of the run (pn, brn): in steps
        if hasattr(module, "plan_schedule"):
            module.plan_schedule(plan.total_steps)
    optimizer = build_optimizer(model, config.optimizer, config.lr, config.weight_decay)
    schedule = partial(lr_factor, cfg=config.schedule, total_steps=plan.total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    for hook in hooks:
        hook.setup(model)
    generator = torch.Generator().manual_seed(config.seed)
    checkpointer.seed_rank_streams()  # dropout and noise: each rank its own stream
    monitor = DivergenceMonitor(config.divergence.loss_factor, resumed["reference_loss"] if resumed else None)
    progress = Progress()
    if resumed is not None:
        checkpointer.restore(resumed, Trained(model, optimizer, scheduler, hooks, generator))  # each rank its streams
        progress = Progress.resumed(resumed, placement.device)
    resolved = placement.describe(config.batch_size, config.norm.syncs_statistics())
    sinks = open_sinks(config.logger, record, resolved, run_dir, placement.is_main, resumed)
    num_params = sum(p.numel() for p in model.parameters())
    info = {**resolved, **run_provenance(), "seed": config.seed, "num_params": num_params}
    start_segment(progress, info, resumed is not None, placement.is_main)  # where it resumes; what changed since
    return Run(
        plan=plan,
        record=record,
        run_dir=run_dir,
        placement=placement,
        t_start=t_start,
        task=task,
        model=model,
        step_model=step_model,
        optimizer=optimizer,
        scheduler=scheduler,
        hooks=hooks,
        checkpointer=checkpointer,
        monitor=monitor,
        generator=generator,
        autocast=placement.autocast(),
        sinks=sinks,
        info=info,  # run_provenance: git_commit, git (dirty files, diff hash), rules (preset, hash)
        timer=StepTimer(placement.device),
        progress=progress,
        load_start=placement.machine_load(),
    )


def load_task(config: RunConfig, run_dir: Path, placement: Placement) -> Any:
    """The data set's task (the main process first: it writes the files), laid out and sharded."""
    with placement.main_first():
        task = build_task(
            config.dataset,
            placement.device,
            run_dir,
            batch_size=config.batch_size,
            eval_batch_size=config.eval_batch_size,
        )
    return placement.setup_task(task)


def build_models(config: RunConfig, norm: RunNorm, task: Any, placement: Placement) -> tuple[nn.Module, nn.Module]:
    """The model with the run's norm (checked in it first where that needed the data's sizes), and
    the model the step calls (DDP-wrapped, maybe compiled)."""
    build = partial(build_model, config.model, **task.model_kwargs())
    if not norm.checked:
        check_norm_in_model(build, norm.layer, config.norm.name, config.batch_size)
    model = build(norm.layer)
    step_model = placement.setup_model(model, varying_shapes=task.kind == "sequence")  # model on the device
    return model, step_model


def open_sinks(
    logger: LoggerConfig,
    record: dict[str, Any],
    resolved: dict[str, Any],
    run_dir: Path,
    main: bool,
    resumed: dict[str, Any] | None,
) -> Sinks:
    """The local files and W&B (``main``: the main process only): the logged config is the record
    with ``hardware.resolved``."""
    logged = {**record, "hardware": {**record["hardware"], "resolved": resolved}}
    local = wandb = None
    if logger.wandb and main:  # first: a W&B that cannot start stops the run before it has written a record
        wandb_id = resumed["wandb_run_id"] if resumed else None
        wandb = WandbSink(logger, run_dir, logged, None, wandb_id)  # None: the sweep's group
    if logger.local and main:
        offset, digest = (resumed.get("metrics_offset"), resumed.get("metrics_sha256")) if resumed else (None, None)
        local = LocalSink(run_dir, logged, OmegaConf.to_yaml(logged), offset, digest, comparable_record)
    return Sinks(MetricLogger([s for s in (local, wandb) if s is not None]), local, wandb)


# ---------------------------------------------------------------------------------------------
# one epoch of training


def train_epoch(run: Run, epoch: int) -> dict[str, Any]:
    """Training steps until the epoch (or the run) ends or the loss diverges; the epoch's
    ``train/*`` metrics and throughput, over all processes. A step where nothing else is due
    compares two step numbers (`normbench.run.loop.events`) and calls `train_step`."""
    run.model.train()
    ep = start_epoch(run, epoch)
    c, total, checkpointer = run.progress, run.plan.total_steps, run.checkpointer
    for batch in ep.batches:
        step = c.step
        if step >= total:
            break
        if step >= ep.next_diag or (ep.asked and any_due(ep.asked, step)):
            run_due_diagnostics(run, ep, batch)
        out = train_step(run, ep, batch)
        due = c.step >= ep.next_event or checkpointer.stop_signal is not None
        if due and after_step(run, ep, out):  # diverged
            break
    return end_training_epoch(run, ep)


def start_epoch(run: Run, epoch: int) -> Epoch:
    """The epoch's batches (replayed to the resumed position on the first epoch of a resume), and
    when its first diagnostic, log row, checkpoint and progress update are due."""
    generator_state = run.generator.get_state()  # the loader replays from here on resume
    c = run.progress
    skip, c.skip = c.skip, 0
    run.timer.elapsed = 0.0
    plan = run.plan
    steps_left = min(plan.steps_per_epoch - skip, plan.total_steps - c.step)
    shown = plan.show_progress
    bar = progress_display(plan.progress, epoch, plan.epochs, steps_left, plan.progress_every_s) if shown else None
    batches = itertools.islice(run.task.train_batches(epoch, run.generator), skip, None)
    sums = RunningSums(c.resumed_sums if skip else None)
    before, after = step_calls(run.hooks)
    ep = Epoch(epoch, generator_state, batches, sums, skip, bar=bar, before=before, after=after, shown=skip)
    ep.calls = StepCalls.of(run, sums)
    ep.next_diag, ep.asked = next_diagnostic(run.hooks, c.step)
    ep.next_event = next_run_event(run, ep, c.step)
    return ep


def train_step(run: Run, ep: Epoch, batch: Any) -> StepOutput:
    """Forward, backward, optimizer and schedule step; the step's loss and statistics (on the device)."""
    step = run.progress.step
    calls = ep.calls or StepCalls.of(run, ep.sums)
    warmup = calls.warmup
    if step == warmup or not run.timer.running:  # (re)started after a pause, counted from the warm-up's end
        run.timer.start(counted=step >= warmup)  # the clock runs from step 0
    for before in ep.before:  # the hooks' per-step work, where a hook has some (`step_calls`)
        before(step)
    if calls.autocast is None:
        out = calls.forward_loss(calls.step_model, batch)
    else:
        with calls.autocast:
            out = calls.forward_loss(calls.step_model, batch)
    calls.zero_grad(set_to_none=True)
    out.loss.backward()
    calls.optimizer_step()
    calls.scheduler_step()
    for after in ep.after:
        after(step)
    calls.observe(out.loss, step + 1)  # listed: checked at the next log step (no sync, no kernel)
    if step >= warmup:  # the timer counts (started counted, or restarted at the warm-up's end)
        ep.timed_units += calls.batch_units(batch)
    calls.add_sums(out.stats)  # on the device, one kernel (`RunningSums`)
    run.progress.step = step + 1
    ep.batch_in_epoch += 1
    return out


def after_step(run: Run, ep: Epoch, out: StepOutput) -> bool:
    """At the steps `next_event` names (and after a stop signal): log every ``log_every_n_steps``;
    at the points that sync anyway, check for divergence (True: diverged) and write a mid-epoch
    checkpoint when one is due; give the progress display its steps."""
    step = run.step
    ep.next_event = next_run_event(run, ep, step)
    log_now = step % run.plan.log_every_n_steps == 0 or step == run.plan.total_steps
    mid_epoch_checkpoint = run.checkpointer.due(step) and ep.batch_in_epoch < run.plan.steps_per_epoch
    if log_now:
        log(run, {**batch_metrics(run, out), "lr": run.scheduler.get_last_lr()[0]})
        if ep.bar is not None:
            show_progress(run, ep)
    if log_now or mid_epoch_checkpoint:
        run.progress.diverged_at = diverged_step(run)
        if run.progress.diverged_at is not None:
            return True
        if mid_epoch_checkpoint and step < run.plan.total_steps:
            run.timer.stop()
            save_checkpoint(run, ep.index, ep.batch_in_epoch, ep.generator_state, ep.sums.totals())
    if ep.bar is not None:  # the steps trained since the display's last update
        ep.bar.update(ep.batch_in_epoch - ep.shown)
        ep.shown = ep.batch_in_epoch
    return False


def end_training_epoch(run: Run, ep: Epoch) -> dict[str, Any]:
    """The epoch's sums and throughput over all processes; one more divergence check."""
    run.timer.stop()
    if ep.bar is not None:
        ep.bar.close()
    sums = run.placement.reduce_sum(ep.sums.totals())
    units, run.timer.elapsed = run.placement.reduce_throughput(ep.timed_units, run.timer.elapsed)
    metrics = run.task.summarize({k: float(v) for k, v in sums.items()}, "train")
    if run.timer.elapsed > 0:
        metrics[f"perf/{run.task.unit}_per_s"] = units / run.timer.elapsed
    if run.progress.diverged_at is None:
        run.progress.diverged_at = diverged_step(run)
    return metrics


# ---------------------------------------------------------------------------------------------
# evaluation, the end of an epoch, the end of the run


def evaluate(run: Run, epoch: int) -> dict[str, Any]:
    """The task's evaluation metrics under ``no_grad``, in eval mode (population statistics
    first for ``norm.eval_stats=population``; with ``both``, evaluated with each estimate)."""
    # norm.eval_stats=population|both: exact BN statistics of K training batches (no-op otherwise)
    refresh_population_stats(
        run.model, partial(run.task.train_batches, epoch), run.task.forward_loss, run.plan.seed + epoch
    )
    run.model.eval()
    with torch.no_grad(), run.autocast:
        return evaluate_each(run.model, partial(run.task.evaluate, run.step_model))


def end_epoch(run: Run, epoch: int, metrics: dict[str, Any]) -> None:
    """The diagnostics' per-epoch aggregates, the epoch's log line, a checkpoint at the epoch end."""
    c = run.progress
    t0 = time.perf_counter()
    diag_metrics = {f"{h.name}/{k}": v for h in run.hooks for k, v in h.epoch_end().items()}
    c.diag_seconds += time.perf_counter() - t0
    metrics["perf/diag_seconds"] = c.diag_seconds
    metrics["perf/diag_share"] = c.diag_seconds / max(time.time() - run.t_start, 1e-9)
    log(run, {**metrics, **diag_metrics})
    c.final.update(metrics)
    c.epochs_done = epoch + 1
    if run.plan.show_progress:  # the line that stays: validation metrics, the whole run's ETA
        show_epoch(epoch, run.plan.epochs, c.step, run.plan.total_steps, metrics, time.time() - run.t_start,
                   c.step - c.start_epoch * run.plan.steps_per_epoch - c.skip)
    save_checkpoint(run, epoch + 1, 0, run.generator.get_state(), {})


def finish(run: Run, ending: Ending) -> dict[str, Any]:
    """Write the summary (``summary.json``, W&B with the ending's exit code: `write_summary`) and
    print its line; the run's final metrics."""
    summary = write_summary(run, ending)
    if run.placement.is_main:
        print_summary(summary, run.task.unit)
    return {**run.progress.final, "status": ending.status}
