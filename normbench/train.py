"""The training runner: ``run(cfg) -> dict`` of final metrics.

seed → data (task) → norm → model → optimizer/schedule → sinks → epochs of training with
diagnostics on their cadence → evaluation under ``no_grad`` → ``summary.json`` / W&B summary.
"""

from __future__ import annotations

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

from normbench import hardware
from normbench.data import build_task
from normbench.diagnostics import DiagContext, build_diagnostics, run_hooks
from normbench.errors import ConfigError
from normbench.models import build_model, model_input_kind
from normbench.norms import norm_factory
from normbench.norms.population import refresh_population_stats
from normbench.optim import build_optimizer, lr_factor
from normbench.sinks import LocalSink, MetricLogger, WandbSink, git_commit


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


def check_config(cfg: DictConfig) -> None:
    """Checks that need more than the schema types; raise `ConfigError` naming the key."""
    for key in ("lr", "batch_size"):
        if not cfg[key] > 0:
            raise ConfigError(f"{key}={cfg[key]} must be positive")
    if cfg.max_steps is None and cfg.epochs <= 0:
        raise ConfigError(f"epochs={cfg.epochs} must be positive (or set max_steps)")
    if cfg.max_steps is not None and cfg.max_steps <= 0:
        raise ConfigError(f"max_steps={cfg.max_steps} must be positive")


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
    check_config(cfg)
    hooks = build_diagnostics(cfg.diagnostics)  # validates the diagnostics config before anything is written
    hw = cfg.hardware
    hardware.configure_backends(hw)
    device = hardware.resolve_device(hw)
    seed_everything(cfg.seed)

    task = build_task(cfg.dataset, cfg, device, run_dir)
    if task.kind != model_input_kind(cfg.model.name):
        raise ConfigError(
            f"model={cfg.model.name} takes {model_input_kind(cfg.model.name)} inputs but "
            f"dataset={cfg.dataset.name} gives {task.kind} inputs"
        )
    if hw.channels_last:
        task.memory_format = torch.channels_last
    model = build_model(cfg.model, norm_factory(cfg.norm), **task.model_kwargs()).to(device)
    if hw.channels_last:
        model = model.to(memory_format=torch.channels_last)
    step_model = torch.compile(model) if hw.compile else model
    steps_per_epoch = task.steps_per_epoch()
    total_steps = cfg.max_steps or cfg.epochs * steps_per_epoch
    epochs = math.ceil(total_steps / steps_per_epoch)
    optimizer = build_optimizer(model, cfg.optimizer, cfg.lr, cfg.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(s, cfg.schedule, total_steps))
    for hook in hooks:
        hook.setup(model)
    generator = torch.Generator().manual_seed(cfg.seed)
    autocast = hardware.autocast(hw, device)

    def diag_loss(m: torch.nn.Module, b: Any) -> torch.Tensor:
        with autocast:
            return task.forward_loss(m, b).loss

    plain = _plain(cfg)
    sinks: list[Any] = []
    if cfg.logger.local:
        sinks.append(LocalSink(run_dir, plain, OmegaConf.to_yaml(cfg, resolve=True)))
    wandb_sink = WandbSink(cfg.logger, run_dir, plain, _wandb_group()) if cfg.logger.wandb else None
    if wandb_sink is not None:
        sinks.append(wandb_sink)
    logger = MetricLogger(sinks)

    info = {
        **hardware.describe(device),
        "git_commit": git_commit(),
        "seed": cfg.seed,
        "num_params": sum(p.numel() for p in model.parameters()),
    }
    final: dict[str, Any] = {}
    status, step, epoch, diag_seconds = "running", 0, 0, 0.0
    timer = StepTimer(device)
    log_every = max(int(cfg.logger.log_every_n_steps), 1)
    try:
        for epoch in range(epochs):
            model.train()
            sums: dict[str, torch.Tensor] = {}
            timed_units, timer.elapsed = 0, 0.0
            bar = _progress(cfg, epoch, epochs, min(steps_per_epoch, total_steps - step))
            for batch in task.train_batches(epoch, generator):
                if step >= total_steps:
                    break
                due = [h for h in hooks if h.due(step)]
                if due:
                    timer.stop()
                    t0 = time.perf_counter()
                    ctx = DiagContext(
                        model, batch, diag_loss, optimizer, step, epoch, scheduler.get_last_lr()[0], task=task
                    )
                    logger.log(step, epoch, run_hooks(due, ctx))
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
                if timer.running:
                    timed_units += task.batch_units(batch)
                for k, v in out.stats.items():
                    sums[k] = sums[k] + v if k in sums else v.clone()
                step += 1
                if step % log_every == 0 or step == total_steps:
                    loss = out.loss.item()
                    logger.log(step, epoch, {"train/batch_loss": loss, "lr": scheduler.get_last_lr()[0]})
                    if not math.isfinite(loss):
                        status = "diverged"
                        break
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
                if bar is not None:
                    bar.update(1)
            timer.stop()
            if bar is not None:
                bar.close()
            train_metrics = task.summarize({k: float(v) for k, v in sums.items()}, "train")
            epoch_metrics = {"epoch": epoch + 1, **train_metrics}
            if timer.elapsed > 0:
                epoch_metrics[f"perf/{task.unit}_per_s"] = timed_units / timer.elapsed
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
        if status == "running":
            status = "finished"
    except BaseException:
        status = "failed"
        raise
    finally:
        wall = time.time() - t_start
        summary = {
            "status": status,
            "step": step,
            "epoch": epoch + 1 if final else epoch,
            "wall_time_s": wall,
            **info,
            **final,
        }
        if wandb_sink is not None:
            summary["wandb_run_id"] = wandb_sink.run_id
        logger.finish(summary)
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
