"""The diagnostics registry, the typed diagnostics config and the hook protocol the runner calls.

A diagnostic is a pure function at its core (``compute(...) -> dict[str, float]``) and a thin
hook built by ``builder(cfg) -> Hook`` from its typed config (a `CadenceConfig` subclass). The
runner, for each hook:

- ``setup(model)`` once, on the uncompiled model, before training;
- ``due(step)`` before each training step and, when due, ``hook(ctx)`` with the step's
  `DiagContext` (parameters θ_t, the batch the step is about to use), through `run_hooks`, which
  restores parameters, buffers, gradients, optimizer state, module modes and RNG streams after
  every hook; the returned keys are logged as ``<name>/<metric>``. Inside a hook every
  evaluation of the loss goes through `DiagContext.closure` / `DiagContext.loss_on`, which put
  the buffers, extra state, modes and RNG streams back before each evaluation (`DiagContext.reset`);
- ``before_step(step)`` / ``after_step(step)`` around every training step (forward, backward,
  optimizer step), for diagnostics that read what the step's own forward recorded (``bn_stats``);
- ``epoch_end() -> dict`` after every epoch, for per-epoch aggregates;
- ``state_dict()`` / ``load_state_dict(d)`` for accumulators a checkpoint must keep.

A hook whose class sets ``needs_fp32 = True`` (second-order diagnostics and the probes that
evaluate losses and gradients along a step: ``hessian``, ``landscape``, ``predictiveness``,
``beta_smoothness``) evaluates the loss in float32 whatever the training precision: while it
runs, `DiagContext.loss_on` calls `DiagContext.fp32_loss_fn` with autocast switched off. In
bf16 a Hessian-vector product is asymmetric at 1e-3 and Lanczos never converges.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from torch import nn

from normbench.base.errors import ConfigError
from normbench.base.registry import Registry, check_keys
from normbench.diagnostics.state import ModelState, RngState, TrainingState


@dataclass
class DiagContext:
    model: nn.Module
    """The uncompiled model (the compiled one shares its parameters and buffers)."""
    batch: Any
    loss_fn: Callable[[nn.Module, Any], torch.Tensor]
    """``loss_fn(model, batch)``: the training loss of this step, as the step computes it
    (under the run's autocast)."""
    optimizer: torch.optim.Optimizer
    step: int
    epoch: int
    lr: float
    task: Any = None
    """The run's `Task`: ``train_batches(epoch, generator)`` draws fresh batches."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Shared between the hooks due at one step (e.g. the gradient-step probe's cache)."""
    rng: RngState = field(default_factory=RngState.capture)
    """The RNG streams as the training step will find them."""
    model_state: ModelState | None = None
    """The model's buffers, extra state and modes as the training step will find them
    (captured when the context is made, unless given)."""
    fp32_loss_fn: Callable[[nn.Module, Any], torch.Tensor] | None = None
    """The same loss without autocast, for hooks with ``needs_fp32``. None: the task's loss,
    ``task.forward_loss(model, batch).loss`` (what the runner's ``loss_fn`` computes under the
    run's autocast), when the task has one, else ``loss_fn``; called with autocast off."""
    full_precision: bool = False
    """Set by `run_hooks` while a hook with ``needs_fp32`` runs: `loss_on` is in float32."""

    def __post_init__(self) -> None:
        if self.model_state is None:
            self.model_state = ModelState.capture(self.model)

    def reset(self) -> None:
        """Put buffers, extra state, modes and RNG streams back where the training step finds them.

        Norms with state change it in every training forward (BN's running statistics, Batch
        Renormalization's r and d past warm-up, PowerNorm's running ψ²) or backward (PowerNorm's
        ``ema_gz``), and noisy norms and dropout draw from the RNG: without this, each
        evaluation inside a diagnostic would see a different function of θ.
        """
        assert self.model_state is not None
        self.model_state.restore()
        self.rng.restore()

    def loss_on(self, batch: Any) -> torch.Tensor:
        """``loss_fn(model, batch)`` at the model's current parameters, after `reset`.

        Every evaluation a diagnostic makes goes through here (or `closure`), so that two
        evaluations at the same θ on the same batch give bit-identical losses and gradients.
        With ``full_precision``, `fp32_loss_fn` with autocast off.
        """
        self.reset()
        if not self.full_precision:
            return self.loss_fn(self.model, batch)
        with autocast_off(self.model):
            return self.float32_loss()(self.model, batch)

    def float32_loss(self) -> Callable[[nn.Module, Any], torch.Tensor]:
        """`fp32_loss_fn`, or its default (see there)."""
        if self.fp32_loss_fn is not None:
            return self.fp32_loss_fn
        forward_loss = getattr(self.task, "forward_loss", None)
        if forward_loss is None:
            return self.loss_fn
        return lambda model, batch: forward_loss(model, batch).loss

    def closure(self) -> Callable[[], torch.Tensor]:
        """The step's loss at the model's current parameters, with the step's own state and RNG draws.

        Each call runs `reset` first, so that a forward with dropout or noise sees the draws the
        step does, a stateful norm the state the step does, and L(θ_t) is the step's own loss.
        """
        return lambda: self.loss_on(self.batch)


def autocast_off(model: nn.Module) -> contextlib.ExitStack:
    """Autocast switched off on every device type that holds ``model``'s parameters and buffers."""
    stack = contextlib.ExitStack()
    types = {t.device.type for t in (*model.parameters(), *model.buffers())} or {"cpu"}
    for device_type in sorted(types):
        stack.enter_context(torch.autocast(device_type, enabled=False))
    return stack


class Hook(Protocol):
    name: str

    def setup(self, model: nn.Module) -> None: ...

    def due(self, step: int) -> bool: ...

    def __call__(self, ctx: DiagContext) -> dict[str, Any]: ...

    def before_step(self, step: int) -> None: ...

    def after_step(self, step: int) -> None: ...

    def epoch_end(self) -> dict[str, Any]: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


@dataclass
class CadenceConfig:
    """When a diagnostic runs: every N steps (0 = never) from ``start_step`` on, and/or at an
    explicit list of steps.

    Steps count optimizer steps from 0; the diagnostic at step t sees θ_t, before step t's update.
    """

    every_n_steps: int = 0
    steps: list[int] = field(default_factory=list)
    start_step: int = 0
    """The first step of the every-N cadence (a short run need not pay for a call at step 0)."""

    def check(self, name: str) -> None:
        """Raise `ConfigError` for values the types allow but the diagnostic cannot use."""
        if self.every_n_steps < 0:
            raise ConfigError(f"diagnostics.{name}.every_n_steps={self.every_n_steps} must be >= 0 (0 = off)")
        if self.start_step < 0:
            raise ConfigError(f"diagnostics.{name}.start_step={self.start_step} must be >= 0")
        bad = [s for s in self.steps if s < 0]
        if bad:
            raise ConfigError(f"diagnostics.{name}.steps has negative steps {bad}")

    @property
    def enabled(self) -> bool:
        return self.every_n_steps > 0 or bool(self.steps)


class DiagnosticHook:
    """Base of the hooks: the cadence from a `CadenceConfig`, no-op extras."""

    name = "diagnostic"  # the registered name, set by `register_diagnostic`
    order = 0
    """Hooks due at one step run in increasing ``order`` (then config order)."""
    needs_fp32 = False
    """Evaluate the loss in float32, autocast off, whatever the training precision (`DiagContext.loss_on`)."""

    def __init__(self, cfg: CadenceConfig) -> None:
        self.cfg = cfg
        self._steps = frozenset(cfg.steps)

    def next_on_cadence(self, step: int) -> int | None:
        """The first step >= ``step`` on the cadence: every ``every_n_steps`` from ``start_step``
        (0: none), or one of ``steps``; None when there is none. The one place the cadence is read."""
        every, start = self.cfg.every_n_steps, self.cfg.start_step
        due = min((s for s in self._steps if s >= step), default=None)
        if every > 0:
            periodic = start if step <= start else start + -(-(step - start) // every) * every
            due = periodic if due is None else min(due, periodic)
        return due

    def on_cadence(self, step: int) -> bool:
        return self.next_on_cadence(step) == step

    def setup(self, model: nn.Module) -> None:
        return None

    def due(self, step: int) -> bool:
        return self.on_cadence(step)

    def __call__(self, ctx: DiagContext) -> dict[str, Any]:  # pragma: no cover
        raise NotImplementedError

    def before_step(self, step: int) -> None:
        return None

    def after_step(self, step: int) -> None:
        return None

    def epoch_end(self) -> dict[str, Any]:
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        return None


DIAGNOSTICS: Registry[Callable[..., Hook]] = Registry("diagnostic")


def register_diagnostic(
    name: str, config: type = CadenceConfig
) -> Callable[[Callable[..., Hook]], Callable[..., Hook]]:
    return DIAGNOSTICS.register(name, config)


def list_diagnostics() -> list[str]:
    return DIAGNOSTICS.names()


def diagnostics_config(cfg: Mapping[str, Any] | None) -> dict[str, CadenceConfig]:
    """Check ``cfg.diagnostics`` against the registered dataclasses; return one typed config each.

    An unknown diagnostic name, an unknown key or a value of the wrong type raises `ConfigError`
    in one line naming the key and the valid choices.
    """
    if cfg is None:
        return {}
    plain = OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg)
    if not isinstance(plain, dict):
        raise ConfigError(f"diagnostics must be a mapping of diagnostic name to settings, got {plain!r}")
    typed: dict[str, CadenceConfig] = {}
    for name, sub in plain.items():
        entry = DIAGNOSTICS.entry(name)  # unknown name: lists the registered ones
        schema = entry.config or CadenceConfig
        if sub is None:
            sub = {}
        elif dataclasses.is_dataclass(sub) and not isinstance(sub, type):
            sub = dataclasses.asdict(sub)
        if not isinstance(sub, dict):
            raise ConfigError(f"diagnostics.{name} must be a mapping of settings, got {sub!r}")
        check_keys(entry, sorted(sub), f"diagnostics.{name}", owner=f"diagnostics.{name}")
        try:
            merged = OmegaConf.merge(OmegaConf.structured(schema), sub)
        except OmegaConfBaseException as e:
            key = getattr(e, "full_key", "") or "?"
            raise ConfigError(f"diagnostics.{name}.{key}: {getattr(e, 'msg', e)}".splitlines()[0]) from None
        obj = OmegaConf.to_object(merged)
        obj.check(name)
        typed[name] = obj
    return typed


def build_diagnostics(cfg: Mapping[str, Any] | None) -> list[Hook]:
    """Hooks for every diagnostic named in ``cfg`` that is switched on, in run order. ``cfg``: the
    typed diagnostics (`RunConfig.diagnostics`: each built from its config as it is), or their
    settings, typed here (`diagnostics_config`)."""
    typed = cfg if cfg and all(isinstance(sub, CadenceConfig) for sub in cfg.values()) else diagnostics_config(cfg)
    hooks = [DIAGNOSTICS.get(name)(sub) for name, sub in typed.items() if sub.enabled]
    return sorted(hooks, key=lambda h: getattr(h, "order", 0))


def step_calls(hooks: list[Hook]) -> tuple[list[Callable[[int], None]], list[Callable[[int], None]]]:
    """The hooks' ``before_step`` and ``after_step`` that do something: those a hook's class
    defines itself, not `DiagnosticHook`'s no-ops. The training step calls only these."""

    def own(hook: Hook, name: str) -> bool:
        return getattr(type(hook), name, None) is not getattr(DiagnosticHook, name)

    return (
        [hook.before_step for hook in hooks if own(hook, "before_step")],
        [hook.after_step for hook in hooks if own(hook, "after_step")],
    )


def run_hooks(
    hooks: list[Hook], ctx: DiagContext, on_error: Callable[[Hook, Exception], None] | None = None
) -> dict[str, Any]:
    """Call each due hook on ``ctx``; restore the training state after each one.

    Returns the hooks' metrics as ``<name>/<metric>``. Whatever a hook does to parameters,
    gradients, buffers (BN running statistics, PowerNorm's ψ²), optimizer state, module modes or
    the python/numpy/torch/CUDA RNG streams is undone bit for bit before the next hook and the
    training step. The state is captured once for all ``hooks``. A hook that raises propagates,
    unless ``on_error(hook, error)`` is given: then it is called and the other hooks still run.
    A hook with ``needs_fp32`` runs with ``ctx.full_precision`` set (its losses in float32).
    """
    metrics: dict[str, Any] = {}
    state = TrainingState.capture(ctx.model, ctx.optimizer)
    try:
        for hook in hooks:
            ctx.full_precision = bool(getattr(hook, "needs_fp32", False))
            try:
                out = hook(ctx)
            except Exception as e:
                if on_error is None:
                    raise
                on_error(hook, e)
                out = {}
            finally:
                ctx.full_precision = False
                state.restore()
            metrics.update({f"{hook.name}/{k}": v for k, v in out.items()})
    finally:
        ctx.rng.restore()
    return metrics
