"""The training runner: ``run(cfg) -> dict`` of final metrics.

seed → data (task) → norm → model → optimizer/schedule → sinks → epochs of training with
diagnostics on their cadence → evaluation under ``no_grad`` → ``summary.json`` / W&B summary.
"""

from __future__ import annotations

import itertools
import math
import random
import sys
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from normbench import distributed, hardware
from normbench.checkpoint import Checkpointer, restore, training_state
from normbench.data import build_task
from normbench.diagnostics import DiagContext, build_diagnostics, run_hooks
from normbench.diagnostics.probe import resolve_probe_directions
from normbench.divergence import DivergenceMonitor
from normbench.errors import ConfigError
from normbench.models import build_model, model_input_kind
from normbench.norms import norm_factory
from normbench.norms.population import refresh_population_stats
from normbench.optim import build_optimizer, lr_factor
from normbench.output import warn
from normbench.sinks import LocalSink, MetricLogger, WandbSink, git_commit
from normbench.validate import check_norm_in_model, validate_config


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


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


def _plain(cfg: DictConfig) -> dict[str, Any]:
    return OmegaConf.to_container(cfg, resolve=True)  # type: ignore[return-value]


def resume_state(cfg: DictConfig, checkpointer: Checkpointer, config: dict[str, Any]) -> dict[str, Any] | None:
    """The checkpoint to continue from (``resume=true``); refuse to start over an existing run."""
    if cfg.get("resume", False):
        state = checkpointer.resume_state(config)
        if state is None:
            warn(f"resume=true but {checkpointer.folder} holds no checkpoint; starting from step 0")
        return state
    if checkpointer.has_checkpoints() or (checkpointer.run_dir / "summary.json").exists():
        raise ConfigError(
            f"the run directory {checkpointer.run_dir} already holds a run; pass resume=true to continue it, "
            "or choose another hydra.run.dir"
        )
    return None


def call_diagnostics(due: list[Any], ctx: DiagContext, hooks: list[Any]) -> dict[str, Any]:
    """The due hooks on ``ctx`` with the training state restored after each (`run_hooks`); a
    diagnostic that raises is reported once and removed from ``hooks``."""

    def switch_off(hook: Any, e: Exception) -> None:
        hooks.remove(hook)
        warn(f"diagnostic {hook.name} failed at step {ctx.step} ({type(e).__name__}: {e}); switched off for this run")

    return run_hooks(due, ctx, on_error=switch_off)


def _wandb_group() -> str | None:
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
        if hc.mode == RunMode.MULTIRUN:
            return f"sweep-{Path(hc.sweep.dir).name}"
    except ValueError:  # not running under Hydra
        pass
    return None


def run(cfg: DictConfig, run_dir: str | Path | None = None) -> dict[str, Any]:
    """Train and evaluate as ``cfg`` says; write the run's files into ``run_dir``."""
    if run_dir is None:
        from hydra.core.hydra_config import HydraConfig

        run_dir = HydraConfig.get().runtime.output_dir
    run_dir = Path(run_dir)
    t_start = time.time()
    validate_config(cfg)
    resolve_probe_directions(cfg)  # direction=auto -> gradient | update, into the logged config
    hw = cfg.hardware
    hardware.check(hw)
    ddp = distributed.init(hw, hardware.device_type(hw))
    try:
        result = _run(cfg, run_dir, t_start, ddp)
    except BaseException:
        distributed.shutdown(ddp, wait_for_others=False)  # the others may be stuck in a collective
        raise
    distributed.shutdown(ddp)
    return result


def _run(cfg: DictConfig, run_dir: Path, t_start: float, ddp: distributed.DistState) -> dict[str, Any]:
    hw = cfg.hardware
    distributed.check_batch(cfg.batch_size, ddp)
    run_dir = distributed.shared_run_dir(run_dir, ddp)
    hooks = build_diagnostics(cfg.diagnostics)  # validates the diagnostics config before anything is written
    config = _plain(cfg)  # what a checkpoint is checked against (before the resolved hardware is added)
    checkpointer = Checkpointer(run_dir, cfg.checkpoint)
    resumed = resume_state(cfg, checkpointer, config)
    hardware.configure_backends(hw)
    device = hardware.resolve_device(hw, ddp.local_rank if ddp.active else None)
    seed_everything(cfg.seed)

    with distributed.main_first(ddp):
        task = build_task(cfg.dataset, cfg, device, run_dir)
    if task.kind != model_input_kind(cfg.model.name):
        raise ConfigError(
            f"model={cfg.model.name} takes {model_input_kind(cfg.model.name)} inputs but "
            f"dataset={cfg.dataset.name} gives {task.kind} inputs"
        )
    if hw.channels_last:
        task.memory_format = torch.channels_last
    check_norm_in_model(cfg, task.model_kwargs())
    task = distributed.shard_task(task, ddp)
    model = build_model(cfg.model, norm_factory(cfg.norm), **task.model_kwargs()).to(device)
    hardware.prepare_model(model, hw)
    step_model = hardware.maybe_compile(distributed.wrap_model(model, ddp, device), hw)
    steps_per_epoch = task.steps_per_epoch()
    total_steps = cfg.max_steps or cfg.epochs * steps_per_epoch
    epochs = math.ceil(total_steps / steps_per_epoch)
    optimizer = build_optimizer(model, cfg.optimizer, cfg.lr, cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg.schedule, total_steps))
    for hook in hooks:
        hook.setup(model)
    generator = torch.Generator().manual_seed(cfg.seed)
    autocast = hardware.autocast(hw, device)
    monitor = DivergenceMonitor(cfg.divergence.loss_factor, resumed["reference_loss"] if resumed else None)
    step, start_epoch, skip, final = 0, 0, 0, {}
    resumed_sums: dict[str, torch.Tensor] = {}
    if resumed is not None:
        restore(resumed, model=model, optimizer=optimizer, scheduler=scheduler, hooks=hooks, generator=generator)
        step, start_epoch, skip = resumed["step"], resumed["epoch"], resumed["batch_in_epoch"]
        final = dict(resumed["final"])
        resumed_sums = {k: v.to(device) for k, v in resumed["epoch_sums"].items()}
        if ddp.is_main:
            print(f"[normbench] resuming from step {step} (epoch {start_epoch + 1}, batch {skip})", flush=True)

    def diag_loss(m: torch.nn.Module, b: Any) -> torch.Tensor:
        with autocast:
            return task.forward_loss(m, b).loss

    resolved = {**hardware.describe(device, hw), **distributed.describe(ddp, cfg.batch_size, cfg.norm)}
    cfg.hardware.resolved = resolved
    plain = _plain(cfg)
    sinks: list[Any] = []
    local_sink = None
    if cfg.logger.local and ddp.is_main:
        offset = resumed["metrics_offset"] if resumed else None
        local_sink = LocalSink(run_dir, plain, OmegaConf.to_yaml(cfg, resolve=True), resume_offset=offset)
        sinks.append(local_sink)
    wandb_id = resumed["wandb_run_id"] if resumed else None
    use_wandb = cfg.logger.wandb and ddp.is_main
    wandb_sink = WandbSink(cfg.logger, run_dir, plain, _wandb_group(), wandb_id) if use_wandb else None
    if wandb_sink is not None:
        sinks.append(wandb_sink)
    logger = MetricLogger(sinks)

    info = {
        **resolved,
        "git_commit": git_commit(),
        "seed": cfg.seed,
        "num_params": sum(p.numel() for p in model.parameters()),
    }
    status, diag_seconds, epochs_done, diverged_at = "running", 0.0, start_epoch, None
    timer = StepTimer(device)
    log_every = max(int(cfg.logger.log_every_n_steps), 1)

    def checkpoint(epoch: int, batch_in_epoch: int, epoch_generator_state: torch.Tensor, sums: dict) -> None:
        if not checkpointer.enabled or not ddp.is_main:
            return
        checkpointer.save(
            training_state(
                config=config,
                model=model,
                optimizer=optimizer,
                scheduler=scheduler,
                hooks=hooks,
                epoch_generator_state=epoch_generator_state,
                step=step,
                epoch=epoch,
                batch_in_epoch=batch_in_epoch,
                epoch_sums=sums,
                final=final,
                reference_loss=monitor.reference_loss(),
                wandb_run_id=wandb_sink.run_id if wandb_sink is not None else None,
                metrics_offset=local_sink.offset() if local_sink is not None else None,
            )
        )

    def diverged() -> int | None:
        """The step where the loss diverged on any rank (every rank agrees), or None."""
        at = monitor.diverged_step()
        if ddp.active:
            flag = torch.tensor(float(at if at is not None else -1), device=device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            at = int(flag.item()) if flag.item() >= 0 else None
        return at

    try:
        for epoch in range(start_epoch, epochs):
            model.train()
            epoch_generator_state = generator.get_state()  # the loader replays from here on resume
            sums: dict[str, torch.Tensor] = resumed_sums if skip else {}
            batch_in_epoch, timed_units, timer.elapsed = skip, 0, 0.0
            steps_left = min(steps_per_epoch - skip, total_steps - step)
            bar = _progress(cfg, epoch, epochs, steps_left) if ddp.is_main else None
            batches = itertools.islice(task.train_batches(epoch, generator), skip, None)  # replay to the position
            skip = 0
            for batch in batches:
                if step >= total_steps:
                    break
                due = [h for h in hooks if h.due(step)]
                if due:
                    timer.stop()
                    t0 = time.perf_counter()
                    ctx = DiagContext(
                        model, batch, diag_loss, optimizer, step, epoch, scheduler.get_last_lr()[0], task=task
                    )
                    logger.log(step, epoch, call_diagnostics(due, ctx, hooks))
                    diag_seconds += time.perf_counter() - t0
                if step >= cfg.throughput_warmup_steps:
                    timer.start()
                for hook in hooks:
                    hook.before_step(step)
                with autocast:
                    out = task.forward_loss(step_model, batch)
                optimizer.zero_grad(set_to_none=True)
                out.loss.backward()
                optimizer.step()
                scheduler.step()
                for hook in hooks:
                    hook.after_step(step)
                monitor.observe(out.loss, step + 1)  # on the device: no sync
                if timer.running:
                    timed_units += task.batch_units(batch)
                for k, v in out.stats.items():
                    sums[k] = sums[k] + v if k in sums else v.clone()
                step += 1
                batch_in_epoch += 1
                log_now = step % log_every == 0 or step == total_steps
                mid_epoch_checkpoint = checkpointer.due(step) and batch_in_epoch < steps_per_epoch
                if log_now:
                    loss = distributed.mean_over_ranks(out.loss.detach(), ddp).item()
                    logger.log(step, epoch, {"train/batch_loss": loss, "lr": scheduler.get_last_lr()[0]})
                    if bar is not None:
                        running = task.summarize({k: float(v) for k, v in sums.items()}, "train")
                        speed = timed_units / max(timer.elapsed + timer.lap(), 1e-9)
                        bar.set_postfix(
                            {
                                **{k.split("/")[1]: f"{v:.3f}" for k, v in running.items()},
                                f"{task.unit}/s": f"{speed:.0f}",
                            },
                            refresh=False,
                        )
                if log_now or mid_epoch_checkpoint:  # points that sync anyway: check for divergence
                    diverged_at = diverged()
                    if diverged_at is not None:
                        status = "diverged"
                        break
                    if mid_epoch_checkpoint and step < total_steps:
                        timer.stop()
                        checkpoint(epoch, batch_in_epoch, epoch_generator_state, sums)
                if bar is not None:
                    bar.update(1)
            timer.stop()
            if bar is not None:
                bar.close()
            sums = distributed.sum_over_ranks(sums, ddp)
            timed_units, timer.elapsed = distributed.throughput_over_ranks(timed_units, timer.elapsed, ddp, device)
            train_metrics = task.summarize({k: float(v) for k, v in sums.items()}, "train")
            epoch_metrics = {"epoch": epoch + 1, **train_metrics}
            if timer.elapsed > 0:
                epoch_metrics[f"perf/{task.unit}_per_s"] = timed_units / timer.elapsed
            if status != "diverged" and (diverged_at := diverged()) is not None:
                status = "diverged"
            if status == "diverged":
                logger.log(step, epoch, epoch_metrics)
                break
            if (epoch + 1) % cfg.eval_every_epochs == 0 or epoch + 1 == epochs:
                # norm.eval_stats=population: exact BN statistics of K training batches (no-op otherwise)
                refresh_population_stats(model, partial(task.train_batches, epoch), task.forward_loss, cfg.seed + epoch)
                model.eval()
                with torch.no_grad(), autocast:
                    epoch_metrics.update(task.evaluate(step_model))
            t0 = time.perf_counter()
            diag_metrics = {f"diag/{h.name}/{k}": v for h in hooks for k, v in h.epoch_end().items()}
            diag_seconds += time.perf_counter() - t0
            epoch_metrics["perf/diag_seconds"] = diag_seconds
            epoch_metrics["perf/diag_share"] = diag_seconds / max(time.time() - t_start, 1e-9)
            logger.log(step, epoch, {**epoch_metrics, **diag_metrics})
            final.update(epoch_metrics)
            epochs_done = epoch + 1
            checkpoint(epoch + 1, 0, generator.get_state(), {})
        if status == "running":
            status = "finished"
    except BaseException as e:
        status = "interrupted" if isinstance(e, (KeyboardInterrupt, SystemExit)) else "failed"
        raise
    finally:
        wall = time.time() - t_start
        summary = {
            "status": status,
            "step": step,
            "epoch": epochs_done,
            "wall_time_s": wall,
            **info,
            **final,
        }
        if diverged_at is not None:
            summary["diverged_step"] = diverged_at
        if wandb_sink is not None:
            summary["wandb_run_id"] = wandb_sink.run_id
        logger.finish(summary)
        if ddp.is_main:
            _print_summary(summary, task.unit)
    return {**final, "status": status}


def _progress(cfg: DictConfig, epoch: int, epochs: int, steps: int) -> Any:
    if not cfg.logger.progress_bar:
        return None
    from tqdm import tqdm

    return tqdm(total=steps, desc=f"epoch {epoch + 1}/{epochs}", leave=False, file=sys.stderr, dynamic_ncols=True)


def _print_summary(summary: Mapping[str, Any], unit: str) -> None:
    keys = ["val/acc", "val/bleu", "test/bleu", "val/loss", "train/loss", f"perf/{unit}_per_s"]
    parts = [f"{k}={summary[k]:.4g}" for k in keys if isinstance(summary.get(k), (int, float))]
    print(
        f"[normbench] {summary['status']} after {summary['step']} steps, {summary['wall_time_s']:.1f}s: "
        + " ".join(parts),
        flush=True,
    )
