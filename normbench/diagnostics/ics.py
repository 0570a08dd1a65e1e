"""``ics``: internal covariate shift as a change of gradients (Santurkar et al. 2018, Definition 2.1).

For layer i of k, on the step's batch, G = ∇_{W_i} L(W_1ᵗ, …, W_kᵗ) and
G′ = ∇_{W_i} L(W_1ᵗ⁺¹, …, W_{i−1}ᵗ⁺¹, W_iᵗ, …, W_kᵗ): the gradient of layer i once every layer
before it has taken the step the optimizer is about to take. Logged per chosen layer:
‖G − G′‖₂, ‖G − G′‖₂ / ‖G‖₂ and cos(G, G′). For the first layer G′ = G.

Layers are the modules that hold parameters of their own, in the order the model registers
them (the forward order in normbench's models); W_i is all of a layer's own parameters
(a conv's weight, a norm's γ and β). The t+1 weights come from the run's optimizer itself
(momentum, weight decay and the current learning rate included; `optimizer_step_preview`),
whose state is then restored. Every evaluation of the loss goes through `DiagContext.closure`,
which puts the norms' buffers and the RNG streams back first: with stateful norms (PowerNorm,
Batch Renormalization) G′ of the first layer is then G bit for bit, as the definition says.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from normbench.base.errors import ConfigError
from normbench.diagnostics.layers import model_layers
from normbench.diagnostics.registry import CadenceConfig, DiagContext, DiagnosticHook, register_diagnostic
from normbench.diagnostics.state import optimizer_step_preview
from normbench.diagnostics.vectors import dot, grads_or_zeros, ranks_mean, sq_dist, sq_norm


def internal_covariate_shift(
    loss_fn: Callable[[], Tensor],
    layers: Sequence[Sequence[Tensor]],
    updated: Sequence[Sequence[Tensor]],
    chosen: Sequence[int],
) -> dict[int, dict[str, float]]:
    """{i: {grad_diff, rel_grad_diff, cos}} for each chosen layer index i (Definition 2.1).

    ``layers[j]`` are layer j's parameters (leaf tensors ``loss_fn`` reads), ``updated[j]`` their
    t+1 values. Parameters are moved in place and restored bit for bit at the end.
    """
    flat = [p for layer in layers for p in layer]
    grads = ranks_mean(grads_or_zeros(torch.autograd.grad(loss_fn(), flat, allow_unused=True), flat))  # DDP: global
    offsets = [0]
    for layer in layers:
        offsets.append(offsets[-1] + len(layer))
    saved = [p.detach().clone() for p in flat]
    out: dict[int, dict[str, float]] = {}
    moved = 0  # layers [0, moved) hold their t+1 values
    try:
        for i in sorted(set(chosen)):
            with torch.no_grad():
                for j in range(moved, i):
                    for p, new in zip(layers[j], updated[j]):
                        p.copy_(new)
            moved = max(moved, i)
            g = [x.detach() for x in grads[offsets[i] : offsets[i + 1]]]
            new = torch.autograd.grad(loss_fn(), list(layers[i]), allow_unused=True)
            g_new = ranks_mean(grads_or_zeros(new, layers[i]))
            diff = sq_dist(g, g_new).sqrt()
            norm_g, norm_new = sq_norm(g).sqrt(), sq_norm(g_new).sqrt()
            vals = torch.stack([diff, diff / norm_g, dot(g, g_new) / (norm_g * norm_new)]).tolist()
            out[i] = dict(zip(("grad_diff", "rel_grad_diff", "cos"), vals))
    finally:
        with torch.no_grad():
            for p, p0 in zip(flat, saved):
                p.copy_(p0)
    return out


@dataclass
class ICSConfig(CadenceConfig):
    layers: list[str] = field(default_factory=list)
    """Module names of the layers to measure (``conv1``, ``stages.1.0.conv2``, ``fc``); empty:
    ``num_layers`` layers with weight matrices or kernels, evenly spaced from the first to the last."""
    num_layers: int = 4

    def check(self, name: str) -> None:
        super().check(name)
        if not self.layers and self.num_layers < 1:
            raise ConfigError(f"diagnostics.{name}.num_layers={self.num_layers} must be >= 1")


def choose_layers(layers: list[tuple[str, list[nn.Parameter]]], names: Sequence[str], count: int) -> list[int]:
    """Indices of the named layers, or ``count`` evenly spaced layers holding a ≥2-d weight."""
    index = {name: i for i, (name, _) in enumerate(layers)}
    if names:
        unknown = [n for n in names if n not in index]
        if unknown:
            raise ConfigError(
                f"diagnostics.ics.layers: no layer {unknown[0]!r} with parameters; valid choices: {', '.join(index)}"
            )
        return [index[n] for n in names]
    weighted = [i for i, (_, ps) in enumerate(layers) if any(p.dim() >= 2 for p in ps)] or list(range(len(layers)))
    if count >= len(weighted):
        return weighted
    if count == 1:
        return [weighted[0]]
    return sorted({weighted[round(k * (len(weighted) - 1) / (count - 1))] for k in range(count)})


@register_diagnostic("ics", ICSConfig)
class ICSHook(DiagnosticHook):
    def setup(self, model: nn.Module) -> None:
        cfg: ICSConfig = self.cfg  # type: ignore[assignment]
        layers = model_layers(model)
        self.chosen = choose_layers(layers, cfg.layers, cfg.num_layers)
        self.names = [name for name, _ in layers]

    def __call__(self, ctx: DiagContext) -> dict[str, float]:
        layers = model_layers(ctx.model)
        params = [p for _, ps in layers for p in ps]
        closure = ctx.closure()
        grads = ranks_mean(grads_or_zeros(torch.autograd.grad(closure(), params, allow_unused=True), params))
        new_flat = optimizer_step_preview(ctx.optimizer, params, grads)  # the global batch's update
        updated, k = [], 0
        for _, ps in layers:
            updated.append(new_flat[k : k + len(ps)])
            k += len(ps)
        result = internal_covariate_shift(closure, [ps for _, ps in layers], updated, self.chosen)
        return {f"{self.names[i]}/{key}": v for i, vals in result.items() for key, v in vals.items()}
