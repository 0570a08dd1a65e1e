"""Norms with batch statistics: BatchNorm and Batch Renormalization (noisy BatchNorm: `noisy`).

Statistics are per channel over N×H×W positions (``NCHW``) or over the N×T real tokens
(``NTC`` with a mask, as Shen et al. 2020 do for Transformers). Outputs at padding positions
are 0 and carry no gradient. The maths lives in `normbench.norms.batch_functional`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from normbench.base.errors import ConfigError, require, require_in
from normbench.norms import batch_functional as BF
from normbench.norms import functional as NF
from normbench.norms import schedule
from normbench.norms.base import Norm
from normbench.norms.registry import NormConfig, register_norm

EVAL_STATS = ("running", "population", "both")


@dataclass
class BatchNormConfig(NormConfig):
    momentum: float = 0.1
    sync: bool = False
    """All-reduce the statistics across processes when torch.distributed is initialized."""
    eval_stats: str = "running"
    """``running``: the EMA estimates; ``population``: exact statistics of ``population_batches``
    training batches, recomputed before each evaluation (`normbench.norms.population`); ``both``:
    each evaluation twice on the same weights, with the EMA estimates (the usual metrics) and with
    the population ones (the metrics again as ``<key>_population``), and the distance between the
    two estimates per layer (`normbench.norms.population.evaluate_each`)."""
    population_batches: int = 50
    count_padding: bool = False
    """Sequences: take the batch statistics over every position of the padded batch, padding
    included (what ``nn.BatchNorm1d`` does on a padded batch; an ablation, issue 27); off: over
    the real tokens only (Shen et al. 2020). Outputs at padding are 0 either way."""

    warm_start: bool = False
    """Start the running estimates from the first training batch's statistics (momentum 1 on that
    batch) instead of torch's 0 / 1: no cold start for the EMA to forget (with momentum 0.01, 46 %
    of the 0 / 1 start is left after 77 steps). Off by default, so results made without it stand."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require_in("norm.momentum", self.momentum, "[0, 1]")  # torch's: the weight of the new batch's statistics
        require(self.eval_stats in EVAL_STATS, "norm.eval_stats", self.eval_stats, f"one of {', '.join(EVAL_STATS)}")
        require(self.population_batches > 0, "norm.population_batches", self.population_batches, "a positive integer")

    def syncs_statistics(self) -> bool:
        return self.sync


def _all_gather() -> BF.AllGather | None:
    """A differentiable all-gather over the default process group, or None when not distributed.

    torch's functional collective (traced by `torch.compile` into the graph: no graph break, unlike
    ``torch.distributed.nn.functional.all_gather``); its backward sums each slot's gradient over
    the processes (a reduce-scatter), as the single-process computation would."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return None
    from torch.distributed import _functional_collectives as fc

    gather = getattr(fc, "all_gather_single_autograd", None) or fc.all_gather_tensor_autograd  # torch < 2.10
    group = dist.group.WORLD
    gloo = dist.get_backend(group) == "gloo"

    def all_gather(t: Tensor) -> tuple[Tensor, ...]:
        if gloo and t.device.type != "cpu":
            # gloo's all_gather_into_tensor on CUDA tensors crashes (SIGSEGV; pytorch/pytorch#152645, seen on
            # an H200 with torch 2.11, both ranks on cuda:0): gather a host copy, differentiably, and bring it back
            return tuple(gather(t[None].cpu(), 0, group).to(t.device).unbind(0))
        return tuple(gather(t[None], 0, group).unbind(0))

    return all_gather


@register_norm("bn", BatchNormConfig)
class BatchNorm(Norm):
    """BatchNorm (Ioffe & Szegedy 2015): per channel, over the batch axes.

    Training: y = (x − μ_B) / sqrt(σ²_B + eps) · γ + β with the batch mean and the biased batch
    variance over real positions (N×H×W, or the N×T real tokens; eps inside the square root).
    The running estimates are EMAs with ``momentum`` of μ_B and of the unbiased batch variance
    n/(n−1)·σ²_B (as torch does); a masked batch with fewer than 2 real tokens leaves them as
    they were (never NaN). Evaluation: the running estimates, or with ``eval_stats="population"``
    the buffers ``population_mean`` / ``population_var`` that
    `normbench.norms.population.refresh_population_stats` fills before each evaluation (with
    ``"both"``, one evaluation with each).

    Paths, one maths: unmasked inputs run torch's fused ``F.batch_norm`` (cuDNN on GPU; bf16
    inputs stay bf16 with float32 statistics), which also updates the running estimates and whose
    saved μ_B and 1/sqrt(σ²_B + eps) serve ``record_stats`` and population statistics (so
    diagnostics neither recompute them nor change a number); where Batch Renorm's r and d need the
    statistics before the affine, or a mask is given, torch's fused kernel runs on an exactly shifted input
    (`batch_functional.batch_norm_fused`); ``sync``, ``record_live_stats`` and eps = 0 (which the
    fused kernel refuses) run the same maths in plain differentiable ops
    (`batch_functional.batch_norm_composed`). All are twice differentiable and none synchronizes
    the host with the device.

    ``sync=True``: when torch.distributed is initialized, the per-process (count, mean, variance)
    are all-gathered differentiably and merged (Chan et al.), so every process normalizes with
    the statistics of the whole global batch and gets the gradients of the single-process
    computation (CPU/gloo and CUDA, with masks).

    Diagnostics: with ``record_stats = True`` each training forward keeps
    ``last_stats = {"mean": μ_B, "var": σ²_B, "count": n}`` (detached; σ²_B biased, n the real
    positions per channel). With ``record_live_stats = True`` it also keeps ``last_stats_live``,
    the same mean and variance still in the autograd graph (call ``retain_grad()`` on them before
    ``backward`` to read ∂L/∂σ²_B).
    """

    NORMALIZES_OVER = {"NCHW": "N×H×W, per channel", "NTC": "N×T real tokens, per channel"}

    def __init__(
        self,
        num_features: int,
        *,
        momentum: float = 0.1,
        sync: bool = False,
        eval_stats: str = "running",
        population_batches: int = 50,
        count_padding: bool = False,
        warm_start: bool = False,
        **kw,
    ) -> None:
        if eval_stats not in EVAL_STATS:
            raise ConfigError(f"norm.eval_stats={eval_stats!r} is unknown; valid choices: {', '.join(EVAL_STATS)}")
        if population_batches <= 0:
            raise ConfigError(f"norm.population_batches={population_batches} must be positive")
        super().__init__(num_features, **kw)
        self.momentum = momentum
        self.sync = sync
        self.eval_stats = eval_stats
        self.population_batches = population_batches
        self.count_padding = count_padding
        self.warm_start = warm_start
        self.cold = warm_start
        """The next training batch replaces the running estimates (``warm_start``; a Python flag, so no
        host sync: cleared by that batch, and by loading a state, whose estimates are not cold)."""
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))
        self.eval_with_population = eval_stats == "population"
        """What evaluation reads: the population buffers, or the running ones (``both``: switched by
        `normbench.norms.population.evaluate_each` for its second evaluation)."""
        if eval_stats != "running":
            self.register_buffer("population_mean", torch.zeros(num_features))
            self.register_buffer("population_var", torch.ones(num_features))
            self.register_buffer("population_count", torch.tensor(0.0, dtype=torch.float64))
        self.record_stats = False
        self.record_live_stats = False
        self.last_stats: dict[str, Tensor] | None = None
        self.last_stats_live: dict[str, Tensor] | None = None
        self.stat_probes: dict[str, Tensor] | None = None
        """With ``record_live_stats``: zero leaf tensors ``{"mean", "var"}`` (C values, set by the
        diagnostic, not parameters) added to the statistics; after backward their ``.grad`` is
        ∂L/∂μ_B and ∂L/∂σ²_B (`batch_functional.batch_norm_composed`)."""
        self.population_sums: list[Tensor] | None = None
        """Set by `normbench.norms.population`: [Σn, Σn·μ_B, Σn·σ²_B, Σ(n − 1)] over batches."""
        self.population_ready = False
        """The population statistics exist (a Python flag: evaluation reads no tensor to know it,
        so no host sync and no graph break); set by `refresh_population_stats`, or on the first
        evaluation after a ``load_state_dict`` that brought them."""

    def renorm(self) -> BF.Renorm | None:
        """Batch Renormalization's correction for this step (None: plain BatchNorm)."""
        return None

    def ema_momentum(self, momentum: float) -> float | Tensor:
        """The weight of this batch in the running estimates' update (Batch Renorm bias-corrects it)."""
        return momentum

    def post_affine(self, y: Tensor, w: Tensor | None) -> Tensor:
        """What follows the affine in training (noisy BatchNorm adds its noise here)."""
        return y

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        if not self.training:
            return self._normalize_fixed(x, mask)
        if self.count_padding and mask is not None:  # statistics over every position, then 0 at padding
            return NF.apply_mask(self.forward(x), NF.token_weights(mask, x.dtype))
        if mask is None and x.numel() // x.shape[NF.channel_dim(self.layout)] < 2:
            raise ValueError(f"BatchNorm needs more than 1 value per channel in training, got input {tuple(x.shape)}")
        self.num_batches_tracked.add_(1)
        momentum, self.cold = (1.0 if self.cold else self.momentum), False
        group = _all_gather() if self.sync else None
        x2 = x if self.layout == "NCHW" else x.reshape(-1, x.shape[-1])  # (N·T, C) rows: channels last, contiguous
        w = None if mask is None else mask.reshape(-1, 1).to(torch.float32 if x2.dtype in NF.HALF else x2.dtype)
        params = (self.weight, self.bias, self.eps)
        if group is not None or self.record_live_stats or self.eps <= 0:
            probes = None if self.stat_probes is None else (self.stat_probes["mean"], self.stat_probes["var"])
            y, mean, var, n = BF.batch_norm_composed(NF.upcast(x2), "NCHW", w, *params, self.renorm(), group, probes)
            if self.record_live_stats:
                self.last_stats_live = {"mean": mean, "var": var}
        elif w is None and type(self).renorm is BatchNorm.renorm:  # torch's kernel (cuDNN) updates the running
            running = (self.running_mean, self.running_var)  # estimates; observing reads the statistics it saved
            y, mean, invstd = BF.batch_norm_updating(x2, self.weight, self.bias, *running, momentum, self.eps)
            if self.record_stats or self.population_sums is not None:
                n = mean.new_full((), x2.numel() // x2.shape[1])  # a fill on the device: no host copy
                self._record(mean.detach(), BF.var_from_invstd(invstd, self.eps), n)
            return self.post_affine(y.reshape(x.shape), None).to(x.dtype)
        else:  # float32 statistics for bf16 inputs (torch's kernel keeps bf16 ones without an affine)
            y, mean, var, n = BF.batch_norm_fused(NF.upcast(x2), w, *params, self.renorm())
        mean, var, n = mean.detach(), var.detach(), n.detach()
        self._record(mean, var, n)
        weight = self.ema_momentum(momentum)
        BF.ema_update(self.running_mean, mean, weight, n > 0)
        BF.ema_update(self.running_var, BF.unbiased(var, n), weight, n > 1)
        return self.post_affine(y.reshape(x.shape), NF.token_weights(mask, y.dtype)).to(x.dtype)

    @torch.no_grad()
    def _record(self, mean: Tensor, var: Tensor, n: Tensor) -> None:
        if self.record_stats:
            self.last_stats = {"mean": mean, "var": var, "count": n}
        if self.population_sums is not None:
            for acc, v in zip(self.population_sums, (n, n * mean, n * var, n - 1)):
                acc.add_(v.to(acc.dtype))

    def eval_statistics(self) -> tuple[Tensor, Tensor]:
        """(mean, variance) used in evaluation."""
        if self.eval_with_population:
            if not self.population_ready:  # once per module (a loaded state): read the count
                if float(self.population_count) == 0:
                    raise RuntimeError(
                        "norm eval_stats=population but no population statistics were computed; call "
                        "normbench.norms.population.refresh_population_stats before evaluating"
                    )
                self.population_ready = True
            return self.population_mean, self.population_var
        return self.running_mean, self.running_var

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        self.population_ready = False  # the loaded statistics are read again on the next evaluation
        self.cold = False  # loaded running estimates are not a cold start
        super()._load_from_state_dict(*args, **kwargs)

    def _normalize_fixed(self, x: Tensor, mask: Tensor | None) -> Tensor:
        mean, var = self.eval_statistics()
        x2 = x if self.layout == "NCHW" else x.reshape(-1, x.shape[-1])
        y = F.batch_norm(x2, mean, var, self.weight, self.bias, False, 0.0, self.eps).reshape(x.shape)
        return NF.apply_mask(y, NF.token_weights(mask, y.dtype))

    def extra_repr(self) -> str:
        extra = (", sync=True" if self.sync else "") + (", count_padding=True" if self.count_padding else "")
        extra += ", warm_start=True" if self.warm_start else ""
        return f"{super().extra_repr()}, momentum={self.momentum}, eval_stats={self.eval_stats}{extra}"


RAMP_FRACTIONS = {"warmup": 0.05, "r_max": 0.40, "d_max": 0.25}
"""Batch Renorm's default schedule as fractions of the run: Ioffe 2017's 5k warm-up, r_max at 40k
and d_max at 25k steps read as fractions of a 100k-step run."""


@dataclass
class BatchRenormConfig(BatchNormConfig):
    momentum: float = 0.01
    """Update rate of the running averages in the paper's experiments."""
    r_max: float = 3.0
    d_max: float = 5.0
    debias: bool = True
    """Bias-corrected running averages (Adam-style): the t-th batch enters with weight
    momentum/(1 − (1 − momentum)^t), so the estimates are averages of the batches seen, with no
    share left of their 0 / 1 start (momentum 0.01: 85 % of it is left after 16 steps without).
    Off: torch's plain EMA, as before issue 56."""
    warmup_steps: int | None = None
    """Plain BatchNorm (r_max = 1, d_max = 0) for this many training steps (when set,
    ``warmup_fraction`` is not used)."""
    r_max_steps: int | None = None
    """r_max grows linearly from 1 after the warm-up to its final value at this step."""
    d_max_steps: int | None = None
    """d_max grows linearly from 0 after the warm-up to its final value at this step."""
    warmup_fraction: float | None = RAMP_FRACTIONS["warmup"]
    """``warmup_steps`` as a fraction of the run's training steps (planned by the runner)."""
    r_max_fraction: float | None = RAMP_FRACTIONS["r_max"]
    d_max_fraction: float | None = RAMP_FRACTIONS["d_max"]

    def __post_init__(self) -> None:
        super().__post_init__()
        require_in("norm.r_max", self.r_max, "[1, inf)")
        require_in("norm.d_max", self.d_max, "[0, inf)")
        for point in RAMP_FRACTIONS:
            count, fraction = getattr(self, f"{point}_steps"), getattr(self, f"{point}_fraction")
            schedule.checked(count, fraction, f"{point}_steps", f"{point}_fraction")


@register_norm("brn", BatchRenormConfig)
class BatchRenorm(BatchNorm):
    """Batch Renormalization (Ioffe 2017), a small-batch remedy beside GroupNorm.

    Training: y = γ·((x − μ_B)/σ_B · r + d) + β with σ_B = sqrt(σ²_B + eps),
    r = clip(σ_B/σ, 1/r_max, r_max), d = clip((μ_B − μ)/σ, −d_max, d_max), σ = sqrt(running
    variance + eps), μ the running mean, both taken before this step's update; r and d are
    constants for the backward. Evaluation: (x − μ)/σ·γ + β, as BatchNorm. The running
    estimates are EMAs of μ_B and of the unbiased σ²_B, as in ``bn`` (the paper keeps an EMA of
    σ_B; the variance EMA makes ``brn`` with r_max = 1, d_max = 0, ``debias=False`` equal to
    ``bn``, also in evaluation), bias-corrected by default (``debias``, issue 56): the t-th batch
    enters with weight momentum/(1 − (1 − momentum)^t) (t = ``num_batches_tracked``, this batch
    included), which keeps each estimate the (1 − momentum)^k-weighted average of the batches seen,
    with no share of the 0 / 1 start, so that r and d correct towards the batches' own statistics
    when the warm-up ends, however short the warm-up is against the EMA's time constant
    1/momentum (the leaderboard's 16-step warm-up at momentum 0.01 left 85 % of the start).
    Schedule of the paper's experiments: plain BatchNorm for 5000 steps, then r_max grows linearly
    from 1 to 3 at step 40k and d_max from 0 to 5 at step 25k; here each of the three points is a
    step count or a fraction of the run's steps (default 5 %, 40 %, 25 %), planned by
    `plan_schedule` (`normbench.norms.schedule`; until then the warm-up does not end).
    """

    NORMALIZES_OVER = {
        "NCHW": "N×H×W, per channel (r, d: towards the running statistics)",
        "NTC": "N×T real tokens, per channel (r, d: towards the running statistics)",
    }

    def __init__(
        self,
        num_features: int,
        *,
        r_max: float = 3.0,
        d_max: float = 5.0,
        warmup_steps: int | None = None,
        r_max_steps: int | None = None,
        d_max_steps: int | None = None,
        warmup_fraction: float | None = RAMP_FRACTIONS["warmup"],
        r_max_fraction: float | None = RAMP_FRACTIONS["r_max"],
        d_max_fraction: float | None = RAMP_FRACTIONS["d_max"],
        momentum: float = 0.01,
        debias: bool = True,
        **kw,
    ) -> None:
        if r_max < 1 or d_max < 0:
            raise ConfigError(f"norm.r_max={r_max} must be >= 1 and norm.d_max={d_max} >= 0")
        given = {
            "warmup": (warmup_steps, warmup_fraction),
            "r_max": (r_max_steps, r_max_fraction),
            "d_max": (d_max_steps, d_max_fraction),
        }
        # the fractions that plan_schedule turns into steps (None where the step count was given)
        self.fractions = {p: schedule.checked(c, f, f"{p}_steps", f"{p}_fraction") for p, (c, f) in given.items()}
        super().__init__(num_features, momentum=momentum, **kw)
        self.r_max, self.d_max, self.debias = r_max, d_max, debias
        self.warmup_steps, self.r_max_steps, self.d_max_steps = warmup_steps, r_max_steps, d_max_steps

    def plan_schedule(self, total_steps: int) -> None:
        """The warm-up and ramp ends for a run of ``total_steps`` training steps (given counts stay)."""
        for point, fraction in self.fractions.items():
            if fraction is not None:
                setattr(self, f"{point}_steps", schedule.steps_of(fraction, total_steps))

    def planned_steps(self) -> dict[str, int | None]:
        """The planned schedule in steps (None before `plan_schedule`)."""
        return {f"{p}_steps": getattr(self, f"{p}_steps") for p in self.fractions}

    def limits(self, step: Tensor) -> tuple[Tensor, Tensor]:
        """(r_max, d_max) at training step ``step`` (1-based, a tensor: read on the device)."""
        at = {k: schedule.UNPLANNED if v is None else v for k, v in self.planned_steps().items()}
        r_ramp = BF.linear_ramp(step, at["warmup_steps"], at["r_max_steps"])
        d_ramp = BF.linear_ramp(step, at["warmup_steps"], at["d_max_steps"])
        return 1 + (self.r_max - 1) * r_ramp, self.d_max * d_ramp

    def ema_momentum(self, momentum: float) -> float | Tensor:
        """momentum/(1 − (1 − momentum)^t) with ``debias`` (t: this batch's count; a tensor, read on
        the device), else ``momentum``."""
        if not self.debias or momentum >= 1:
            return momentum
        return BF.debiased_momentum(momentum, self.num_batches_tracked)

    def renorm(self) -> BF.Renorm:
        r_max, d_max = self.limits(BF.snapshot(self.num_batches_tracked))
        dtype = self.running_var.dtype
        running = BF.snapshot(self.running_mean), BF.snapshot(self.running_var)  # before this step's update
        return BF.Renorm(*running, r_max.to(dtype), d_max.to(dtype))

    def extra_repr(self) -> str:
        steps = ", ".join(f"{k}={v}" for k, v in self.planned_steps().items())
        debias = "" if self.debias else ", debias=False"
        return f"{super().extra_repr()}, r_max={self.r_max}, d_max={self.d_max}{debias}, {steps}"
