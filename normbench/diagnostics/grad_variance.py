"""``grad_variance``: the noise of the mini-batch gradient at fixed parameters.

``method=batches``: at θ_t, the gradients g_1 … g_K of K fresh training batches (drawn with
their own generator, so the run's data order is untouched; train mode, as the steps). Logged:
``total`` = 1/(K − 1)·Σ‖g_k − ḡ‖², the unbiased estimate of the total variance (trace of the
covariance) of one mini-batch gradient, ``relative`` = total / ‖ḡ‖² (noise-to-signal ratio),
``grad_sq_norm`` = ‖ḡ‖², and ``<layer>/total``, ``<layer>/relative`` over each layer's own
parameters. Each batch's loss is evaluated through `DiagContext.loss_on`, so every gradient sees
the norms' buffers (running statistics, PowerNorm's ψ² and ``ema_gz``) and the RNG streams as
the training step will find them: the variance is that of the data at one fixed function of θ
(dropout masks and the noisy norms' draws are the step's for every batch of the step's shape).

``method=per_sample``: the gradients of each sample of the step's batch, through
``torch.func.vmap(torch.func.grad(...))``; ``per_sample_total`` = 1/(B − 1)·Σ‖g_i − ḡ‖² (unbiased)
and ``total`` = per_sample_total / B, the variance of a B-sample mean gradient that it implies
(comparable with ``method=batches``); under data parallelism the samples of every rank's shard,
i.e. the global batch (Σ over ranks of counts and gradients, then of centred squares). Not for
models whose norms use batch statistics (BatchNorm, PowerNorm): there each sample's output
depends on the whole batch, so the batch loss is not a mean of per-sample losses and a
per-sample gradient has no meaning.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils._pytree import tree_map

from normbench.base.errors import ConfigError
from normbench.diagnostics.layers import model_layers
from normbench.diagnostics.registry import CadenceConfig, DiagContext, DiagnosticHook, register_diagnostic
from normbench.diagnostics.vectors import grads_or_zeros, ranks_mean, ranks_sum
from normbench.norms.probes import uses_batch_statistics

METHODS = ("batches", "per_sample")
Groups = Sequence[tuple[str, Sequence[int]]]


def _summary(mean: list[Tensor], sum_sq_dev: list[Tensor], count: int, groups: Groups | None) -> dict[str, float]:
    """Totals from per-parameter means and summed squared deviations of ``count`` gradients (float64).

    The variance is the unbiased one: the summed squared deviations divided by ``count − 1``.
    """
    var = torch.stack([m2.sum() for m2 in sum_sq_dev]) / (count - 1)  # (P,) per parameter tensor
    sig = torch.stack([m.pow(2).sum() for m in mean])
    keys, vals = ["total", "relative", "grad_sq_norm"], [var.sum(), var.sum() / sig.sum(), sig.sum()]
    for name, idx in groups or []:
        i = torch.tensor(list(idx), device=var.device)
        keys += [f"{name}/total", f"{name}/relative"]
        vals += [var[i].sum(), var[i].sum() / sig[i].sum()]
    return dict(zip(keys, torch.stack(vals).tolist()))


def gradient_variance(
    loss_fn: Callable[[Any], Tensor], params: Sequence[Tensor], batches: Iterable[Any], groups: Groups | None = None
) -> dict[str, float]:
    """1/(K − 1)·Σ‖g_k − ḡ‖² (unbiased) and its ratio to ‖ḡ‖² over the gradients of ``loss_fn(batch)``.

    ``groups``: (name, parameter indices) for per-layer values. Streaming (Welford) in float64,
    so memory is two copies of the parameters whatever K.
    """
    params = list(params)
    mean = [torch.zeros_like(p, dtype=torch.float64) for p in params]
    m2 = [torch.zeros_like(p, dtype=torch.float64) for p in params]
    k = 0
    for batch in batches:
        k += 1
        grads = ranks_mean(grads_or_zeros(torch.autograd.grad(loss_fn(batch), params, allow_unused=True), params))
        for mu, s, g in zip(mean, m2, grads):  # under DDP, g is the global batch's (the ranks' shards averaged)
            delta = g.detach().double() - mu
            mu.add_(delta / k)
            s.add_(delta * (g.detach().double() - mu))
    if k < 2:
        raise ValueError(f"gradient variance needs at least 2 batches, got {k}")
    return _summary(mean, m2, k, groups)


class _LossOf(nn.Module):
    """``loss_fn(model, batch)`` as a module, so `torch.func.functional_call` can swap its parameters."""

    def __init__(self, model: nn.Module, loss_fn: Callable[[nn.Module, Any], Tensor]) -> None:
        super().__init__()
        self.model = model
        self.loss_fn = loss_fn

    def forward(self, batch: Any) -> Tensor:
        return self.loss_fn(self.model, batch)


def check_per_sample(model: nn.Module) -> None:
    """Raise `ConfigError` when a norm of ``model`` uses batch statistics."""
    for name, module in model.named_modules():
        if uses_batch_statistics(module):
            raise ConfigError(
                f"diagnostics.grad_variance.method=per_sample cannot be used with the batch-statistic norm "
                f"{name!r} ({type(module).__name__}): each sample's output depends on the whole batch, so the "
                f"loss has no per-sample gradients; use method=batches (valid choices: {', '.join(METHODS)})"
            )


def per_sample_gradient_variance(
    model: nn.Module,
    loss_fn: Callable[[nn.Module, Any], Tensor],
    batch: Any,
    params: Sequence[Tensor] | None = None,
    groups: Groups | None = None,
) -> dict[str, float]:
    """1/(B − 1)·Σ‖g_i − ḡ‖² (unbiased) over the per-sample gradients of one batch (``torch.func``), and /B.

    ``batch`` is a tuple (or other pytree) of tensors whose first axis is the sample; each sample
    is passed to ``loss_fn`` as a batch of one. ``params``: the parameters to differentiate
    (default: all trainable ones); ``groups`` index them.
    """
    check_per_sample(model)
    wrapper = _LossOf(model, loss_fn)
    names = {id(p): n for n, p in model.named_parameters()}
    if params is None:
        params = [p for p in model.parameters() if p.requires_grad]
    named = {f"model.{names[id(p)]}": p.detach() for p in params}

    def sample_loss(p: dict[str, Tensor], sample: Any) -> Tensor:
        one = tree_map(lambda t: t.unsqueeze(0), sample)
        return torch.func.functional_call(wrapper, p, (one,))

    per = torch.func.vmap(torch.func.grad(sample_loss), in_dims=(None, 0), randomness="different")(named, batch)
    grads = [per[k].double() for k in named]  # each (B, *param shape)
    local = torch.full((), grads[0].shape[0], dtype=torch.float64, device=grads[0].device)
    # under data parallelism the samples are the global batch's: (Σ count, Σ gradients) over the
    # ranks give the mean, then the squared deviations from it (centred) are summed over the ranks
    count, *sums = ranks_sum([local, *(g.sum(0) for g in grads)])
    size = int(count)
    if size < 2:
        raise ValueError(f"per-sample gradient variance needs at least 2 samples, got {size}")
    mean = [total / size for total in sums]
    m2 = ranks_sum([(g - mu).pow(2).sum(0) for g, mu in zip(grads, mean)])
    out = _summary(mean, m2, size, groups)
    result = {"per_sample_total": out["total"], "total": out["total"] / size}
    result["relative"] = result["total"] / out["grad_sq_norm"]
    result["grad_sq_norm"] = out["grad_sq_norm"]
    for name, _ in groups or []:
        result[f"{name}/per_sample_total"] = out[f"{name}/total"]
        result[f"{name}/total"] = out[f"{name}/total"] / size
        result[f"{name}/relative"] = out[f"{name}/relative"] / size
    return result


def fresh_batches(task: Any, epoch: int, count: int, generator: torch.Generator) -> Iterator[Any]:
    """``count`` training batches from ``task``, drawn with ``generator`` (passing into later epochs if needed)."""
    drawn = 0
    while drawn < count:
        before = drawn
        for batch in task.train_batches(epoch, generator):
            yield batch
            drawn += 1
            if drawn == count:
                return
        if drawn == before:
            raise ValueError("the task yielded no training batches")
        epoch += 1


@dataclass
class GradVarianceConfig(CadenceConfig):
    num_batches: int = 8
    """K, for ``method=batches``."""
    method: str = "batches"
    """``batches`` (K fresh mini-batches) or ``per_sample`` (within the step's batch, torch.func)."""
    seed: int = 0
    """The batches' generator is seeded with seed + step."""

    def check(self, name: str) -> None:
        super().check(name)
        if self.method not in METHODS:
            raise ConfigError(f"unknown diagnostics.{name}.method {self.method!r}; valid choices: {', '.join(METHODS)}")
        if self.method == "batches" and self.num_batches < 2:
            raise ConfigError(f"diagnostics.{name}.num_batches={self.num_batches} must be >= 2")


@register_diagnostic("grad_variance", GradVarianceConfig)
class GradVarianceHook(DiagnosticHook):
    def setup(self, model: nn.Module) -> None:
        if self.cfg.method == "per_sample":  # type: ignore[attr-defined]
            check_per_sample(model)

    def __call__(self, ctx: DiagContext) -> dict[str, float]:
        cfg: GradVarianceConfig = self.cfg  # type: ignore[assignment]
        layers = model_layers(ctx.model)
        params = [p for _, ps in layers for p in ps]
        groups, k = [], 0
        for name, ps in layers:
            groups.append((name, range(k, k + len(ps))))
            k += len(ps)
        if cfg.method == "per_sample":
            ctx.reset()  # one (vmapped) evaluation of the step's batch, in the step's state
            return per_sample_gradient_variance(ctx.model, ctx.loss_fn, ctx.batch, params, groups)
        if ctx.task is None:
            raise ValueError("grad_variance with method=batches needs the run's task in the DiagContext")
        generator = torch.Generator().manual_seed(cfg.seed + ctx.step)
        batches = fresh_batches(ctx.task, ctx.epoch, cfg.num_batches, generator)
        return gradient_variance(ctx.loss_on, params, batches, groups)
