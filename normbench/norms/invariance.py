"""The invariance table of Ba et al. 2016 (Layer Normalization, §5.1, Table 1) and Zhang &
Sennrich 2019 (Root Mean Square Layer Normalization, Table 1, which adds RMSNorm and pRMSNorm),
measured on every registered norm.

Set-up (Ba et al. §5.1): the summed inputs a = W x (no bias) of a linear map W (units × inputs)
applied to a batch of cases x; the norm normalizes a. A property *holds* when the norm's output
y (training mode, a fresh module, the same RNG seed before each call so that noisy norms draw
the same noise) is unchanged by the transformation:
max |y' − y| ≤ `TOL` · max(1, max |y|) in float64 with eps = `EPS`.

The transformations (δ = `DELTA`, γ a fixed random vector of the input space, R^inputs):

1. weight matrix re-scaling: W → δ·W.
2. weight matrix re-centering: W → W + 1γᵀ (γ added to every row: all summed inputs of a case
   shift by the same scalar γᵀx).
3. weight vector re-scaling: one row w_i → δ·w_i (unit i = `UNIT`).
4. dataset re-scaling: x → δ·x for every case.
5. dataset re-centering: x → x + γ for every case (a → a + Wγ: each unit shifts by a constant).
6. single training case re-scaling: one case x_n → δ·x_n.

Layouts: ``NTC`` — x is (N, T, inputs), W is applied to each token, a case is one token (so (6)
scales one token); ``NCHW`` — x is (N, inputs, H, W) and W is a 1×1 convolution applied to each
pixel, a case is one image (so (6) scales one image); γ in (2) and (5) is the same at every
token/pixel. Ba et al.'s fully connected layer is the ``NTC`` case with T tokens per sequence.

Also `gradient_ratio`: a norm whose output is invariant to W → δW has ∂L/∂W(δW) = (1/δ)·∂L/∂W(W)
for any loss L of its output (the implicit learning-rate adaptation of both papers), measured
at the initial W and at the W after `TRAIN_STEPS` SGD steps of the same tiny problem.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from normbench.norms import functional as NF
from normbench.norms.registry import LAYOUTS, build_norm, list_norms

DELTA = 3.7
EPS = 1e-12
TOL = 1e-6
UNITS, INPUTS = 8, 6
UNIT = 0
"""The unit (row of W) that weight vector re-scaling scales."""
CASE = 0
"""The case that single training case re-scaling scales (token 0 of sequence 0; image 0)."""
SHAPES = {"NTC": (2, 4), "NCHW": (8, 2, 2)}
"""Batch shape per layout: 2 sequences × 4 tokens = 8 cases; 8 images of 2×2 pixels."""
TRAIN_STEPS, LR = 20, 0.2
SEED, NOISE_SEED, AFFINE_SEED = 0, 1234, 1
EXTRA_KW: dict[str, dict] = {"gn": {"groups": 4}}
"""Keys some norms need at ``UNITS`` channels (gn's default of 8 groups would be InstanceNorm)."""

PROPERTIES = (
    "weight_matrix_rescaling",
    "weight_matrix_recentering",
    "weight_vector_rescaling",
    "dataset_rescaling",
    "dataset_recentering",
    "single_case_rescaling",
)
LABELS = {
    "weight_matrix_rescaling": "weight matrix re-scaling",
    "weight_matrix_recentering": "weight matrix re-centering",
    "weight_vector_rescaling": "weight vector re-scaling",
    "dataset_rescaling": "dataset re-scaling",
    "dataset_recentering": "dataset re-centering",
    "single_case_rescaling": "single training case re-scaling",
}

PAPER: dict[str, tuple[bool, ...]] = {
    "bn": (True, False, True, True, True, False),
    "ln": (True, True, False, True, False, True),
    "rms": (True, False, False, True, False, True),
    "prms": (True, False, False, True, False, True),
}
"""The papers' marks in `PROPERTIES` order: BatchNorm and LayerNorm from Ba et al. 2016 Table 1
(as Zhang & Sennrich 2019 Table 1 repeats them), RMSNorm and pRMSNorm from Zhang & Sennrich
2019 Table 1. ``ln`` (per position, over the units of one case) is the paper's LayerNorm."""

Transform = Callable[[Tensor, Tensor, str, Tensor], tuple[Tensor, Tensor]]


def _scale_matrix(w: Tensor, x: Tensor, layout: str, gamma: Tensor) -> tuple[Tensor, Tensor]:
    return DELTA * w, x


def _recenter_matrix(w: Tensor, x: Tensor, layout: str, gamma: Tensor) -> tuple[Tensor, Tensor]:
    return w + gamma[None, :], x  # W + 1γᵀ


def _scale_vector(w: Tensor, x: Tensor, layout: str, gamma: Tensor) -> tuple[Tensor, Tensor]:
    w = w.clone()
    w[UNIT] *= DELTA
    return w, x


def _scale_dataset(w: Tensor, x: Tensor, layout: str, gamma: Tensor) -> tuple[Tensor, Tensor]:
    return w, DELTA * x


def _recenter_dataset(w: Tensor, x: Tensor, layout: str, gamma: Tensor) -> tuple[Tensor, Tensor]:
    return w, x + gamma.view(NF.channel_shape(x, layout))


def _scale_case(w: Tensor, x: Tensor, layout: str, gamma: Tensor) -> tuple[Tensor, Tensor]:
    x = x.clone()
    if layout == "NTC":
        x[CASE // x.shape[1], CASE % x.shape[1]] *= DELTA  # one token
    else:
        x[CASE] *= DELTA  # one image
    return w, x


TRANSFORMS: dict[str, Transform] = dict(
    zip(PROPERTIES, (_scale_matrix, _recenter_matrix, _scale_vector, _scale_dataset, _recenter_dataset, _scale_case))
)
"""Property → (W, x, layout, γ) ↦ (W', x')."""


def problem(layout: str) -> tuple[Tensor, Tensor, Tensor]:
    """The fixed tiny problem of ``layout``: (W (UNITS × INPUTS), x, γ (INPUTS,)), float64."""
    g = torch.Generator().manual_seed(SEED)
    w = torch.randn(UNITS, INPUTS, generator=g, dtype=torch.float64) / INPUTS**0.5
    gamma = torch.randn(INPUTS, generator=g, dtype=torch.float64)
    if layout == "NTC":
        shape = (*SHAPES["NTC"], INPUTS)
    else:
        n, h, wd = SHAPES["NCHW"]
        shape = (n, INPUTS, h, wd)
    x = torch.randn(shape, generator=g, dtype=torch.float64) * 2 + 0.5
    return w, x, gamma


def summed_inputs(w: Tensor, x: Tensor, layout: str) -> Tensor:
    """a = W x per case: per token (``NTC``) or per pixel, as a 1×1 convolution (``NCHW``)."""
    if layout == "NTC":
        return x @ w.T
    return torch.einsum("oi,nihw->nohw", w, x)


def fresh_norm(name: str, layout: str) -> nn.Module:
    """Norm ``name`` over ``UNITS`` channels as a new module in training mode, float64, eps =
    `EPS`, its affine parameters (where it has them) set to fixed random values."""
    m = build_norm(name, UNITS, layout, eps=EPS, **EXTRA_KW.get(name, {})).double().train()
    g = torch.Generator().manual_seed(AFFINE_SEED)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return m


def output(name: str, layout: str, w: Tensor, x: Tensor) -> Tensor:
    """The norm's training-mode output for the summed inputs W x: a fresh module, and the same
    RNG seed before the call (the global RNG is left as it was)."""
    m = fresh_norm(name, layout)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(NOISE_SEED)
        return m(summed_inputs(w, x, layout))


def rel_diff(y2: Tensor, y: Tensor) -> float:
    """max |y2 − y| / max(1, max |y|)."""
    y2, y = y2.detach(), y.detach()
    return float((y2 - y).abs().max() / max(1.0, float(y.abs().max())))


def supports(name: str, layout: str) -> bool:
    """Whether norm ``name`` builds and runs in ``layout`` (`build_norm` raises for a layout it
    does not know; a norm that refused one would raise when built or called)."""
    w, x, _ = problem(layout)
    try:
        output(name, layout, w, x)
    except (ValueError, NotImplementedError):  # ConfigError is a ValueError
        return False
    return True


def measure_property(name: str, layout: str, prop: str) -> tuple[bool, float]:
    """(holds, max relative difference) of property ``prop`` for norm ``name`` in ``layout``."""
    w, x, gamma = problem(layout)
    y = output(name, layout, w, x)
    w2, x2 = TRANSFORMS[prop](w, x, layout, gamma)
    d = rel_diff(output(name, layout, w2, x2), y)
    return d <= TOL, d


def measure(name: str, layout: str) -> dict[str, tuple[bool, float]]:
    """Every property of `PROPERTIES` for norm ``name`` in ``layout``: (holds, max rel. diff)."""
    return {prop: measure_property(name, layout, prop) for prop in PROPERTIES}


def _readout(y: Tensor, layout: str) -> tuple[Tensor, Tensor]:
    """A fixed random linear read-out R (per unit) and targets t (per position) for ``y``."""
    g = torch.Generator().manual_seed(SEED + 1)
    r = torch.randn(UNITS, generator=g, dtype=y.dtype)
    t_shape = [s for d, s in enumerate(y.shape) if d != NF.channel_dim(layout) % y.dim()]
    return r, torch.randn(t_shape, generator=g, dtype=y.dtype)


def loss_and_grad(name: str, layout: str, w: Tensor, x: Tensor) -> tuple[float, Tensor]:
    """L = ½·mean over positions of (Σ_units R·y − t)² and ∂L/∂W (a fresh module each call)."""
    w = w.detach().clone().requires_grad_(True)
    y = output(name, layout, w, x)
    r, t = _readout(y, layout)
    loss = 0.5 * ((y * r.view(NF.channel_shape(y, layout))).sum(NF.channel_dim(layout)) - t).square().mean()
    (grad,) = torch.autograd.grad(loss, w)
    return float(loss.detach()), grad


def trained_weight(name: str, layout: str, steps: int = TRAIN_STEPS, lr: float = LR) -> tuple[Tensor, list[float]]:
    """W after ``steps`` plain SGD steps on `loss_and_grad` from `problem`'s W, and the losses
    before each step and after the last."""
    w, x, _ = problem(layout)
    losses = []
    for _ in range(steps):
        loss, grad = loss_and_grad(name, layout, w, x)
        losses.append(loss)
        w = w - lr * grad
    losses.append(loss_and_grad(name, layout, w, x)[0])
    return w, losses


def gradient_ratio(name: str, layout: str, steps: int = 0, delta: float = DELTA) -> dict[str, float]:
    """∂L/∂W at δ·W against ∂L/∂W at W, with W the initial weight (``steps=0``) or the weight
    after ``steps`` SGD steps (`trained_weight`). Returns ``ratio`` = ‖g(δW)‖ / ‖g(W)‖ (1/δ for
    a scale-invariant norm), ``expected`` = 1/δ, ``max_rel_diff`` = max |δ·g(δW) − g(W)| /
    max |g(W)| and ``holds`` (1.0 when max_rel_diff ≤ `TOL`, else 0.0)."""
    w, x, _ = problem(layout)
    if steps:
        w, _ = trained_weight(name, layout, steps)
    g1 = loss_and_grad(name, layout, w, x)[1]
    g2 = loss_and_grad(name, layout, delta * w, x)[1]
    diff = float((delta * g2 - g1).abs().max() / g1.abs().max())
    return {
        "ratio": float(g2.norm() / g1.norm()),
        "expected": 1 / delta,
        "max_rel_diff": diff,
        "holds": float(diff <= TOL),
    }


def table_data(names: list[str] | None = None) -> dict[str, dict[str, dict[str, tuple[bool, float]] | None]]:
    """layout → norm → `measure` (None where the norm does not support the layout), for ``names``
    (every registered norm unless given)."""
    names = list_norms() if names is None else names
    return {
        layout: {name: measure(name, layout) if supports(name, layout) else None for name in names}
        for layout in LAYOUTS
    }
