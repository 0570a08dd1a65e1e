"""``saturation``: how many units sit in a saturating activation's flat tails, and how large the
gradients of each layer's weights are (BN's "keeps activations out of saturation" claim, the
classic motivation of Ioffe & Szegedy 2015, §1; issue 27's saturation preset).

One extra forward and backward of the step's batch at θ_t, in train mode as the step (same RNG
draws and norm state: `DiagContext.closure`), with forward hooks on every normbench norm (``none``
included): a norm's output is the pre-activation of the activation that follows it in normbench's
conv nets. Logged per layer:

- ``<norm layer>/saturated``: the fraction of its output elements with |z| > ``threshold`` (real
  tokens only under a padding mask). tanh′(2) = 0.07 and σ′(4) = 0.018: a unit beyond the
  threshold passes almost no gradient;
- ``<module>/grad_norm``: ‖∂L/∂θ‖₂ over each of the model's own layers' parameters (weights and
  biases of every conv and linear: every module with parameters that is not a norm), from
  ``torch.autograd.grad`` (the step's ``.grad`` is not touched). Vanishing gradients show as the
  first layers' norms falling by orders of magnitude;
- ``<norm layer>/affine_grad_norm``: the same over a norm's own γ and β (BN has them, ``none`` not).

So the k-th ``grad_norm`` key is the model's k-th conv/linear layer and the k-th ``saturated`` key
its k-th norm position (the input of its k-th nonlinearity) in every arm: a norm's parameters never
shift the layer count (before issue 56 they were logged as ``grad_norm`` too, so layer k of a BN
network was not layer k of a standard one). The W&B layout adds ``first_layer/…`` and
``layer_mean/…`` headlines of each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from normbench.base.errors import ConfigError
from normbench.diagnostics.activations import norm_inputs_outputs
from normbench.diagnostics.layers import model_layers, norm_layers
from normbench.diagnostics.registry import CadenceConfig, DiagContext, DiagnosticHook, register_diagnostic


def saturated_fraction(z: Tensor, threshold: float) -> Tensor:
    """The fraction of the elements of ``z`` with |z| > ``threshold`` (NaN counts as saturated)."""
    z = z.detach()
    return (~(z.abs() <= threshold)).double().mean()  # exact counts (float32 rounds past 2**24 elements)


@dataclass
class SaturationConfig(CadenceConfig):
    threshold: float = 2.0
    """|pre-activation| beyond which a unit counts as saturated (2 for tanh, 4 for sigmoid)."""

    def check(self, name: str) -> None:
        super().check(name)
        if not (math.isfinite(self.threshold) and self.threshold > 0):
            raise ConfigError(f"diagnostics.{name}.threshold={self.threshold} must be a positive number")


@register_diagnostic("saturation", SaturationConfig)
class SaturationHook(DiagnosticHook):
    def __call__(self, ctx: DiagContext) -> dict[str, Any]:
        threshold = float(self.cfg.threshold)  # type: ignore[attr-defined]
        layers = model_layers(ctx.model)
        params = [p for _, own in layers for p in own]
        with norm_inputs_outputs(ctx.model) as seen:
            loss = ctx.closure()()
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        out: dict[str, Any] = {
            f"{name}/saturated": float(saturated_fraction(post, threshold)) for name, (_, post) in seen.items()
        }
        norms = {name for name, _ in norm_layers(ctx.model)}
        i = 0
        for name, own in layers:
            g = [x for x in grads[i : i + len(own)] if x is not None]
            i += len(own)
            if g:
                key = "affine_grad_norm" if name in norms else "grad_norm"
                out[f"{name}/{key}"] = float(torch.linalg.vector_norm(torch.stack([x.norm() for x in g])))
        ctx.reset()
        return out
