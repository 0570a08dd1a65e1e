"""``activations``: the distribution of each norm layer's input and output (Santurkar et al. 2018, Fig. 1).

One extra forward of the step's batch at θ_t, in train mode as the step (same RNG draws), with
forward hooks on every normbench norm (``none`` included, so a network without normalization
shows the same positions). For each layer, over all elements (real tokens only when the norm
gets a padding mask): ``<layer>/pre_mean``, ``pre_std``, ``post_mean``, ``post_std`` (population
std), the quantiles ``pre_q05`` … ``pre_q95`` / ``post_q05`` … (5, 25, 50, 75, 95 %: the
distribution over training that Santurkar et al. draw in Fig. 1c and Fig. 2, kept in
``metrics.jsonl``) and histograms ``<layer>/pre_hist``, ``post_hist`` (`normbench.sinks.files.Histogram`:
W&B shows them as histograms; ``metrics.jsonl`` leaves them out), counted by a deterministic
kernel (`histogram`), so the diagnostic also runs under ``hardware.deterministic=true`` on CUDA.
Under data parallelism it summarizes the logging rank's shard of the step's batch: a sample of
the same distribution as the global batch's values (quantiles of the union would gather every
activation to one rank).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from normbench.base.errors import ConfigError
from normbench.diagnostics.layers import first_calls
from normbench.diagnostics.registry import CadenceConfig, DiagContext, DiagnosticHook, register_diagnostic
from normbench.sinks.files import Histogram


def real_values(x: Tensor, mask: Tensor | None, layout: str) -> Tensor:
    """The elements of ``x`` at real tokens: all of them unless an (N, T) ``mask`` comes with ``NTC``."""
    if mask is None or layout != "NTC":
        return x
    return x[mask]  # (real tokens, C)


QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
MAX_QUANTILE_SAMPLE = 1 << 20
"""Quantiles are taken over at most this many elements (an evenly strided subsample beyond it)."""


def quantiles(x: Tensor) -> dict[str, float]:
    """``{"q05": …, "q25": …, "q50": …, "q75": …, "q95": …}`` of all elements of ``x`` (linear
    interpolation, as ``torch.quantile``), over an evenly strided subsample of at most
    `MAX_QUANTILE_SAMPLE` elements."""
    flat = x.detach().float().reshape(-1)
    if flat.numel() > MAX_QUANTILE_SAMPLE:
        flat = flat[:: -(-flat.numel() // MAX_QUANTILE_SAMPLE)]
    values = torch.quantile(flat, torch.tensor(QUANTILES, device=flat.device)).tolist()
    return {f"q{round(100 * q):02d}": v for q, v in zip(QUANTILES, values)}


def histogram(x: Tensor, bins: int, lo: float, hi: float) -> Tensor:
    """``torch.histc(x, bins, lo, hi)``, bin for bin, from a deterministic kernel (histc's CUDA
    kernel is not: under ``hardware.deterministic=true`` it raises). As histc: ``bins`` equal
    bins over [lo, hi] of x's dtype, the bin of v is ⌊(v − lo)·bins / (hi − lo)⌋ computed in
    that dtype, v = hi falls in the last bin, values outside [lo, hi] (and NaN) are left out;
    counts in x's (floating) dtype. Integer counts through ``bincount`` (deterministic without weights)."""
    flat = x.detach().reshape(-1)
    if not flat.is_floating_point():
        flat = flat.float()
    lo_t, hi_t = (torch.tensor(v, dtype=flat.dtype, device=flat.device) for v in (lo, hi))
    inside = (flat >= lo_t) & (flat <= hi_t)
    index = ((flat - lo_t) * bins / (hi_t - lo_t)).nan_to_num(0.0).clamp(0, bins - 1).long()
    index = torch.where(inside, index, bins)  # one extra bin for the values left out
    return torch.bincount(index, minlength=bins + 1)[:bins].to(flat.dtype)


def summarize(x: Tensor, bins: int) -> tuple[Tensor, Tensor, Histogram]:
    """(mean, population std, histogram over [min, max] with ``bins`` equal bins) of all elements."""
    flat = x.detach().float().reshape(-1)
    std, mean = torch.std_mean(flat, correction=0)
    lo, hi = (float(v) for v in torch.stack([flat.min(), flat.max()]).tolist())
    if hi == lo:  # all values equal: one bin's worth of width around them
        lo, hi = lo - 0.5, hi + 0.5
    counts = histogram(flat, bins, lo, hi)
    edges = torch.linspace(lo, hi, bins + 1)
    return mean, std, Histogram(counts.tolist(), edges.tolist())


def norm_inputs_outputs(model: nn.Module) -> AbstractContextManager[dict[str, tuple[Tensor, Tensor]]]:
    """While inside: each normbench norm's (input, output) of its first call, at real positions
    (`real_values`), detached, by layer name; the forward hooks are removed on leaving."""

    def capture(mod: nn.Module, x: Tensor, mask: Tensor | None, output: Tensor) -> tuple[Tensor, Tensor]:
        layout = getattr(mod, "layout", "NCHW")
        return real_values(x, mask, layout).detach(), real_values(output, mask, layout).detach()

    return first_calls(model, capture)


@dataclass
class ActivationsConfig(CadenceConfig):
    bins: int = 64

    def check(self, name: str) -> None:
        super().check(name)
        if self.bins < 1:
            raise ConfigError(f"diagnostics.{name}.bins={self.bins} must be >= 1")


@register_diagnostic("activations", ActivationsConfig)
class ActivationsHook(DiagnosticHook):
    def __call__(self, ctx: DiagContext) -> dict[str, Any]:
        bins = self.cfg.bins  # type: ignore[attr-defined]
        with norm_inputs_outputs(ctx.model) as seen, torch.no_grad():
            ctx.closure()()
        out: dict[str, Any] = {}
        for name, (pre, post) in seen.items():
            for side, x in (("pre", pre), ("post", post)):
                mean, std, hist = summarize(x, bins)
                out[f"{name}/{side}_mean"], out[f"{name}/{side}_std"] = float(mean), float(std)
                out.update({f"{name}/{side}_{q}": v for q, v in quantiles(x).items()})
                out[f"{name}/{side}_hist"] = hist
        return out
