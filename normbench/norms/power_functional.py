"""The maths of PowerNorm (Shen et al. 2020, "PowerNorm: Rethinking Batch Normalization in
Transformers") and of the steps of its ablation chain, as pure functions of tensors in torch ops.

The input is viewed as (A, G, C/G, L): G GroupScaling groups, batch statistics over axes 0 and 3
(``NCHW`` → (N, G, C/G, H·W); ``NTC`` → (N·T, G, C/G, 1)), real positions marked by 0/1 row
weights ``w4`` of shape (A, 1, 1, 1) (``None``: every position is real). Outputs are 0 at padding
and no gradient reaches it. The chain, BN → PN-V → PN:

- BN: ``batch_functional`` (mean subtraction, the batch variance, exact backward);
- PN-V (`power_norm_batch`): no mean subtraction; the batch's quadratic mean ψ²_B divides;
  exact backward through ψ²_B;
- PN (`power_norm_train`): the running quadratic mean divides in the forward pass (after a
  warm-up on ψ²_B), with the approximate backward of their Alg. 2.

``group_scaling`` (their released code's GroupScaling before the division; the paper's
algorithms do not show it) is a separate switch on both PN-V and PN.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor


def exact_precision(method: Callable) -> Callable:
    """For an autograd Function's forward/backward: run with autocast off, so that its reductions
    keep the dtype of the tensors given (autocast would run matrix products in half precision)."""

    @functools.wraps(method)
    def run(ctx, first: Tensor, *args):
        with torch.autocast(first.device.type, enabled=False):
            return method(ctx, first, *args)

    return run


def _scaled(x4: Tensor, w4: Tensor | None, group_scaling: bool, eps: float) -> tuple[Tensor, Tensor | None]:
    """(x̃, s): x̃ = x·s with s = 1/sqrt(mean over the group of x² + eps) per position and group
    (GroupScaling), times the row weights; s = the row weights (or None) without GroupScaling."""
    inv = x4.square().mean(2, keepdim=True).add(eps).rsqrt() if group_scaling else None  # (A, G, 1, L)
    if w4 is not None:
        inv = w4 if inv is None else inv * w4  # 0 at padding
    return (x4 if inv is None else x4 * inv), inv


def _count(x4: Tensor, w4: Tensor | None) -> Tensor:
    """The number of real positions (a 0-dim tensor; no host synchronisation)."""
    a, length = x4.shape[0], x4.shape[3]
    return x4.new_tensor(float(a * length)) if w4 is None else w4.sum() * length


def _affine(z: Tensor, weight: Tensor | None, bias: Tensor | None, w4: Tensor | None) -> Tensor:
    groups, cg = z.shape[1], z.shape[2]
    y = z if weight is None else z * weight.view(groups, cg, 1)
    if bias is not None:
        b = bias.view(groups, cg, 1)
        y = y + (b if w4 is None else w4 * b)
    return y


def power_norm_batch(
    x4: Tensor, w4: Tensor | None, weight: Tensor | None, bias: Tensor | None, eps: float, group_scaling: bool
) -> tuple[Tensor, Tensor]:
    """PN-V, the first step from BN to PN (Shen et al. 2020, §4.1: "relaxing zero-mean
    normalization"): x̃ (GroupScaling or x itself, 0 at padding); ψ²_B = mean over the real
    positions of x̃², per channel; y = γ·x̃/sqrt(ψ²_B + eps) + β — BatchNorm's training forward
    without the mean and with the quadratic mean for the variance. The backward is autograd's:
    exact, through ψ²_B. Returns (y, ψ²_B detached), ψ²_B per channel."""
    xt, _ = _scaled(x4, w4, group_scaling, eps)
    psi2 = xt.square().sum((0, 3)) / _count(x4, w4).clamp_min(1)  # (G, C/G)
    y = _affine(xt * (psi2 + eps).rsqrt()[:, :, None], weight, bias, w4)
    return y, psi2.detach().view(-1)


class _PowerNormFunction(torch.autograd.Function):
    """PowerNorm's training step, GroupScaling included (when on), with its approximate backward
    (Shen et al. 2020, Alg. 2 as in the authors' released code). See `power_norm_train`.
    x̃ = x·s is recomputed from x in the backward rather than kept."""

    @staticmethod
    @exact_precision
    def forward(ctx, x4, w4, weight, bias, psi2_running, use_running, ema_gz, eps, alpha_bkw, group_scaling):  # type: ignore[override]
        groups, cg = x4.shape[1], x4.shape[2]
        xt, inv = _scaled(x4, w4, group_scaling, eps)
        n = _count(x4, w4)
        psi2_batch = xt.square().sum((0, 3)) / n.clamp_min(1)  # mean of x̃² over real positions, (G, C/G)
        # ψ² = running (past the warm-up) or batch. Under torch.compile, AOT autograd would recompute
        # `scale` in the backward from the running-ψ² buffer *after* this step's in-place update
        # (wrong gradients; torch 2.14, pytorch/pytorch#197039). A detached value is saved by the
        # default partitioner and a reduction is never recomputed by the min-cut one, so the choice
        # is written as a (bit-exact) weighted sum. tests/norms/test_compile.py checks it.
        choice = torch.stack([use_running, ~use_running]).to(psi2_batch.dtype).view(2, 1, 1)
        psi2 = (torch.stack([psi2_running.view(groups, cg), psi2_batch]) * choice).sum(0)
        scale = (psi2 + eps).rsqrt().detach()
        y = _affine(xt * scale[:, :, None], weight, bias, w4)
        ctx.save_for_backward(x4, inv, w4, weight, scale, psi2_batch, n)
        ctx.ema_gz = ema_gz  # a buffer the backward updates in place: read when the backward runs, as the authors do
        ctx.eps, ctx.alpha_bkw, ctx.group_scaling = eps, alpha_bkw, group_scaling
        ctx.mark_non_differentiable(psi2_batch)
        return y, psi2_batch.view(-1)

    @staticmethod
    @exact_precision
    def backward(ctx, dy, _dpsi2):  # type: ignore[override]
        x4, inv, w4, weight, scale, psi2_batch, n = ctx.saved_tensors
        groups, cg = scale.shape
        gamma = torch.ones_like(scale) if weight is None else weight.view(groups, cg)
        dbias = None
        if ctx.needs_input_grad[3]:
            dbias = (dy if w4 is None else dy * w4).sum((0, 3)).view(-1)
        # ĝ = γ·dy − (1 − α_bkw)·ema_gz·z with z = x̃·scale; dx̃ = ĝ/sqrt(ψ²_B + eps) = dy·p − x̃·q
        ema = ctx.ema_gz.view(groups, cg)
        damp = 1 - ctx.alpha_bkw
        inv_batch = (psi2_batch + ctx.eps).rsqrt()
        p = gamma * inv_batch
        q = damp * ema * scale * inv_batch
        xt = x4 if inv is None else x4 * inv
        sum_dy_xt = (dy * xt).sum((0, 3))  # Σ dy·x̃ over real positions (x̃ = 0 at padding)
        dweight = (sum_dy_xt * scale).view(-1) if weight is not None and ctx.needs_input_grad[2] else None
        dxt = dy * p[:, :, None] - xt * q[:, :, None]
        # ema_gz += Σ ĝ·z / n with Σ dy·z = scale·Σ dy·x̃ and Σ z² = n·ψ²_B·scale² (with the old ema)
        with torch.no_grad():  # a running estimate, not part of any graph (a double backward records none)
            ema.add_((gamma * sum_dy_xt * scale - damp * ema * n * psi2_batch * scale.square()) / n.clamp_min(1))
        if ctx.group_scaling:
            # dx = s·(dx̃ − x̃·mean_group(dx̃·x̃)) — the exact backward of x̃ = x·s, s = 1/rms_group(x)
            dot = (dxt * xt).sum(2, keepdim=True)  # (A, G, 1, L)
            dx = inv * (dxt - xt * (dot / cg))
        else:
            dx = dxt if inv is None else dxt * inv  # x̃ = x (times the row weights)
        return dx, None, dweight, dbias, None, None, None, None, None, None


def power_norm_train(
    x4: Tensor,
    w4: Tensor | None,
    weight: Tensor | None,
    bias: Tensor | None,
    psi2_running: Tensor,
    use_running: Tensor,
    ema_gz: Tensor,
    eps: float,
    alpha_bkw: float,
    group_scaling: bool = True,
) -> tuple[Tensor, Tensor]:
    """PowerNorm's training step on x viewed as (A, G, C/G, L). Returns (y, ψ²_B), ψ²_B per channel.

    Forward: x̃ = x / sqrt(mean over the group of x² + eps) (GroupScaling; x̃ = x without it), 0
    at padding; ψ²_B = mean over real positions of x̃²; z = x̃ / sqrt(ψ² + eps) with ψ² =
    ``psi2_running`` where ``use_running`` (a bool tensor: past the warm-up) and ψ²_B otherwise;
    y = γ·z + β (0 at padding). Backward (approximate, not the derivative of the forward):
    ĝ = γ·dy − (1 − α_bkw)·ema_gz·z; ema_gz += mean over real positions of ĝ·z (in place, ĝ with
    the old ema_gz); dx̃ = ĝ / sqrt(ψ²_B + eps); then the exact backward of GroupScaling. No
    gradient reaches padding. One autograd node.
    """
    return _PowerNormFunction.apply(
        x4, w4, weight, bias, psi2_running, use_running, ema_gz, eps, alpha_bkw, group_scaling
    )  # fmt: skip


def acl(x: Tensor, layout: str) -> Tensor:
    """View ``x`` as (A, C, L) with batch statistics over axes 0 and 2: ``NCHW`` → (N, C, H·W),
    ``NTC`` → (N·T, C, 1)."""
    if layout == "NCHW":
        return x.reshape(x.shape[0], x.shape[1], -1)
    return x.reshape(-1, x.shape[-1], 1)
