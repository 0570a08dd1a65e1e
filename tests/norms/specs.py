"""The per-norm spec table: one row per registered norm, read by every test parametrized over the
norms (tests/norms/: registry, sequences, invariance, probes, backward).

A new norm is three edits: its class (with its config dataclass) in ``normbench/norms/<family>.py``
(discovered: no import list), ``conf/norm/<name>.yaml``, and its row here (`test_specs` fails on a
registered norm without one). A row holds:

- ``nchw``: the first training-mode output on images (N, C, H, W), from explicit formulas (float64);
- ``ntc``: the first training-mode output at the real tokens of sequences (N, T, C) with a padding
  mask, shape (real tokens, C), from torch's layers where they exist or the formulas;
- ``torch``: torch's own layer on images where torch has one (None: it has none);
- ``invariances``: what the maths says per layout, in `normbench.norms.invariance.PROPERTIES` order
  (tests/norms/test_invariance.py measures it);
- ``statistics``: ``"batch"`` (over the batch; with running estimates), ``"positions"`` (per
  sample, over positions as well as channels) or ``"none"`` (`normbench.norms.probes` must agree);
- ``kw``: build keys for C = 8 channels; ``masked``: outputs at padding positions do not depend
  on the parameters (0 or the input); ``stochastic``: draws noise in training;
  ``exact_backward``: its backward is the gradient of its forward (gradcheck).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

C = 8
"""Channels of the tests that read ``kw``."""
Y, N = True, False
# The invariances, in inv.PROPERTIES order: W → δW, W → W + 1γᵀ, w_i → δw_i, x → δx, x → x + γ,
# x_n → δx_n. NTC: a case is a token; NCHW: W is a 1×1 convolution, a case is an image.
BATCH_STATS = (Y, N, Y, Y, Y, N)  # per unit over the batch: a shift γᵀx varying by case, or one case scaled, leaks
# ℓp BN: centred per unit like BN, the ℓp norm scales with the unit as σ does; but the norm is of the
# uncentred unit (Santurkar et al.), so a shift x → x + γ changes the divisor
LP_BATCH = (Y, N, Y, Y, N, N)
PER_CASE_LN = (Y, Y, N, Y, N, Y)  # Ba et al.'s layer norm: one case's units centred and scaled together
PER_CASE_RMS = (Y, N, N, Y, N, Y)  # Zhang & Sennrich: scaled, not centred
NOTHING = (N, N, N, N, N, N)
LP = {"bn_l1": 1.0, "bn_l2": 2.0, "bn_linf": float("inf")}  # ℓp BatchNorm: its p


def both(marks: tuple[bool, ...]) -> dict[str, tuple[bool, ...]]:
    return {"NTC": marks, "NCHW": marks}


@dataclass(frozen=True)
class Spec:
    nchw: Callable[[Tensor, nn.Module], Tensor]
    ntc: Callable[[Tensor, Tensor, nn.Module], Tensor]
    invariances: dict[str, tuple[bool, ...]]
    torch: Callable[[Tensor, nn.Module], Tensor] | None = None
    statistics: str = "none"
    kw: dict[str, Any] = field(default_factory=dict)
    masked: bool = False
    stochastic: bool = False
    exact_backward: bool = True


# -- the helpers the rows share ------------------------------------------------------------------


def stats(x: Tensor, dims: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    return x.mean(dims, keepdim=True), x.var(dims, keepdim=True, unbiased=False)


def affine(y: Tensor, m: nn.Module, channel_dim: int = 1) -> Tensor:
    """y·γ + β per channel (axis 1 of N, C, H, W; the last axis of (…, C) when ``channel_dim=-1``)."""
    shape = (1, -1, 1, 1) if channel_dim == 1 else (-1,)
    if getattr(m, "weight", None) is not None:
        y = y * m.weight.view(shape)
    if getattr(m, "bias", None) is not None:
        y = y + m.bias.view(shape)
    return y


def standardize(x: Tensor, m: nn.Module, dims: tuple[int, ...]) -> Tensor:
    mu, var = stats(x, dims)
    return affine((x - mu) / torch.sqrt(var + m.eps), m)


def noise(y: Tensor, m: nn.Module, mask: Tensor | None = None) -> Tensor:
    """The noisy norms' last draw (``record_noise``): s·y + m per activation (test_noisy.py)."""
    shift, scale = m.last_noise
    return y * scale + shift if mask is None else y * scale[mask] + shift[mask]


def bn_torch(x: Tensor, m: nn.Module) -> Tensor:
    return F.batch_norm(x, None, None, m.weight, m.bias, True, 0.0, m.eps)


def lp_nchw(p: float) -> Callable[[Tensor, nn.Module], Tensor]:
    """Centred per channel, divided by the uncentred ℓp power mean over N, H, W plus eps."""

    def ref(x: Tensor, m: nn.Module) -> Tensor:
        c, ax = x - x.mean((0, 2, 3), keepdim=True), x.abs()
        dev = (
            ax.amax((0, 2, 3), keepdim=True)
            if p == float("inf")
            else ax.pow(p).mean((0, 2, 3), keepdim=True) ** (1 / p)
        )
        return affine(c / (dev + m.eps), m)

    return ref


def lp_ntc(p: float) -> Callable[[Tensor, Tensor, nn.Module], Tensor]:
    def ref(x: Tensor, mask: Tensor, m: nn.Module) -> Tensor:
        real = x[mask]
        c = real - real.mean(0)
        dev = real.abs().amax(0) if p == float("inf") else real.abs().pow(p).mean(0) ** (1 / p)
        return affine(c / (dev + m.eps), m, -1)

    return ref


def per_sentence(layer: Callable[[Tensor, nn.Module], Tensor]) -> Callable[[Tensor, Tensor, nn.Module], Tensor]:
    """A per-sample norm on sequences: ``layer`` on each sentence's real tokens, (t, C) → (t, C)."""

    def ref(x: Tensor, mask: Tensor, m: nn.Module) -> Tensor:
        return torch.cat([layer(x[i, :t], m) for i, t in enumerate(mask.sum(1).tolist())])

    return ref


def gn_nchw(x: Tensor, m: nn.Module) -> Tensor:
    xg = x.view(x.shape[0], m.groups, -1)
    mu, var = stats(xg, (2,))
    return affine(((xg - mu) / torch.sqrt(var + m.eps)).view_as(x), m)


def pn_nchw(x: Tensor, m: nn.Module) -> Tensor:
    """GroupScaling, then the batch's quadratic mean (step 1 is in the warm-up)."""
    xg = x.view(x.shape[0], m.groups, -1, *x.shape[2:])
    xs = (xg / torch.sqrt(xg.pow(2).mean(2, keepdim=True) + m.eps)).view_as(x)
    return affine(xs / torch.sqrt(xs.pow(2).mean((0, 2, 3), keepdim=True) + m.eps), m)


def pn_ntc(x: Tensor, mask: Tensor, m: nn.Module) -> Tensor:
    real = x[mask]
    g = real.view(-1, m.groups, real.shape[1] // m.groups)
    xs = (g / torch.sqrt(g.pow(2).mean(-1, keepdim=True) + m.eps)).view_as(real)
    return affine(xs / torch.sqrt(xs.pow(2).mean(0) + m.eps), m, -1)


def rms_nchw(x: Tensor, m: nn.Module, k: int | None = None) -> Tensor:
    return affine(x / torch.sqrt(x[:, :k].pow(2).mean(1, keepdim=True) + m.eps), m)


def channels_last(f: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """A (…, C) function applied to (N, C, H, W)."""
    return lambda x: f(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def sentence_layer(f: Callable[[Tensor, nn.Module], Tensor]) -> Callable[[Tensor, nn.Module], Tensor]:
    """A (1, C, t) torch layer applied to one sentence's (t, C) real tokens."""
    return lambda xi, m: f(xi.T[None], m)[0].T


# -- the table -----------------------------------------------------------------------------------

BATCH_NORM = Spec(
    nchw=lambda x, m: standardize(x, m, (0, 2, 3)),
    ntc=lambda x, mask, m: bn_torch(x[mask], m),
    torch=bn_torch,
    invariances=both(BATCH_STATS),
    statistics="batch",
    masked=True,
)
"""BatchNorm's row (per channel over N×H×W / the real tokens), which Batch Renorm's shares."""

SPECS: dict[str, Spec] = {
    "bn": BATCH_NORM,
    "brn": BATCH_NORM,  # a fresh module is in its warm-up: plain BatchNorm
    "bn_noisy": Spec(  # the same noise: BN's invariances carry over
        nchw=lambda x, m: noise(standardize(x, m, (0, 2, 3)), m),
        ntc=lambda x, mask, m: noise(bn_torch(x[mask], m), m, mask),
        torch=lambda x, m: noise(bn_torch(x, m), m),
        invariances=both(BATCH_STATS),
        statistics="batch",
        masked=True,
        stochastic=True,
    ),
    **{
        name: Spec(
            nchw=lp_nchw(p),
            ntc=lp_ntc(p),
            invariances=both(LP_BATCH),
            statistics="batch",
            masked=True,
        )
        for name, p in LP.items()
    },
    "noise_only": Spec(
        nchw=lambda x, m: noise(x, m),
        ntc=lambda x, mask, m: noise(x[mask], m, mask),
        invariances=both(NOTHING),
        masked=True,
        stochastic=True,
    ),
    "none": Spec(
        nchw=lambda x, m: x,
        ntc=lambda x, mask, m: x[mask],
        torch=lambda x, m: x,
        invariances=both(NOTHING),
        masked=True,
    ),
    "pn": Spec(  # GroupScaling (RMS per position) first, then ψ²_B
        nchw=pn_nchw,
        ntc=pn_ntc,
        invariances=both(PER_CASE_RMS),
        statistics="batch",
        kw={"groups": 2},
        masked=True,
        exact_backward=False,  # PowerNorm's approximate backward (test_powernorm.py)
    ),
    # per sample, over groups of 2 channels × positions: one unit scaled or a per-unit shift changes its
    # group's statistics; a per-position shift γᵀx is not removed; one sequence (not token) is a sample
    "gn": Spec(
        nchw=gn_nchw,
        ntc=per_sentence(sentence_layer(lambda xi, m: F.group_norm(xi, m.groups, m.weight, m.bias, m.eps))),
        torch=lambda x, m: F.group_norm(x, m.groups, m.weight, m.bias, m.eps),
        invariances={"NTC": (Y, N, N, Y, N, N), "NCHW": (Y, N, N, Y, N, Y)},
        statistics="positions",
        kw={"groups": 4},
        masked=True,
    ),
    "in": Spec(  # per sample and unit, over positions
        nchw=lambda x, m: standardize(x, m, (2, 3)),
        ntc=per_sentence(sentence_layer(lambda xi, m: F.instance_norm(xi, weight=m.weight, bias=m.bias, eps=m.eps))),
        torch=lambda x, m: F.instance_norm(x, weight=m.weight, bias=m.bias, eps=m.eps),
        invariances={"NTC": (Y, N, Y, Y, Y, N), "NCHW": (Y, N, Y, Y, Y, Y)},
        statistics="positions",
        masked=True,
    ),
    "ln": Spec(  # over the units of each token / pixel
        nchw=lambda x, m: standardize(x, m, (1,)),
        ntc=lambda x, mask, m: F.layer_norm(x[mask], (x.shape[-1],), m.weight, m.bias, m.eps),
        torch=lambda x, m: channels_last(lambda y: F.layer_norm(y, (y.shape[-1],), m.weight, m.bias, m.eps))(x),
        invariances=both(PER_CASE_LN),
    ),
    "ln_sample": Spec(  # over all units × positions
        nchw=lambda x, m: standardize(x, m, (1, 2, 3)),
        ntc=per_sentence(lambda xi, m: affine(F.layer_norm(xi, xi.shape, None, None, m.eps), m, -1)),
        torch=lambda x, m: affine(F.layer_norm(x, x.shape[1:], None, None, m.eps), m),
        invariances={"NTC": (Y, N, N, Y, N, N), "NCHW": (Y, N, N, Y, N, Y)},
        statistics="positions",
        masked=True,
    ),
    "rms": Spec(
        nchw=rms_nchw,
        ntc=lambda x, mask, m: F.rms_norm(x[mask], (x.shape[-1],), m.weight, m.eps),
        torch=lambda x, m: channels_last(lambda y: F.rms_norm(y, (y.shape[-1],), m.weight, m.eps))(x),
        invariances=both(PER_CASE_RMS),
    ),
    "prms": Spec(  # the RMS of the first k channels divides
        nchw=lambda x, m: rms_nchw(x, m, m.k),
        ntc=lambda x, mask, m: x[mask] / torch.sqrt(x[mask][:, : m.k].pow(2).mean(1, keepdim=True) + m.eps) * m.weight,
        invariances=both(PER_CASE_RMS),
    ),
}


def spec(name: str) -> Spec:
    """The row of norm ``name``; a registered norm without one is named in the failure."""
    assert name in SPECS, f"norm {name!r} has no row in tests/norms/specs.py SPECS: add one"
    return SPECS[name]


def kw(name: str) -> dict[str, Any]:
    """The row's build keys (none for a norm without a row: its own test then fails on the row)."""
    return dict(SPECS[name].kw) if name in SPECS else {}
