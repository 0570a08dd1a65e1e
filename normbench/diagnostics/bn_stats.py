"""``bn_stats``: how far the batch statistics stray from the running ones (Shen et al. 2020, Fig. 2).

Shen, Yao, Gholami, Mahoney, Keutzer 2020 ("PowerNorm: Rethinking Batch Normalization in
Transformers"): for every norm layer that keeps running statistics, at every training step
(``every_n_steps: 1``, as the paper and the presets that judge it; the default diagnostics take every
10th: the norms keep their statistics on those steps only, and the epoch's mean is over them), the
distance of the step's batch statistics from the running ones, μ_B the mean of the step's batch
over real tokens only, μ and σ² the running estimates as the batch finds them (before the step
updates them). Two distances of each statistic (`normbench.diagnostics.bn_stats_maths` puts their
formulas side by side):

- ``<stat>_dist``, ours, scale-free (issue 56; before it, this key held the paper's): the root
  mean square over channels of (μ_B − μ)/sqrt(σ² + eps) and of (s²_B − σ²)/(σ² + eps) (a relative
  error), eps the layer's: the same for two models identical per channel whatever their width,
  and for a rescaled input;
- ``<stat>_dist_paper``, the paper's: (1/d)·‖μ_B − μ‖₂ and (1/d)·‖s²_B − σ²‖₂ over the d
  channels; in the input's units and shrinking like 1/√d with the width: not comparable between
  models.

Like is compared with like: the running variance is an EMA of the *unbiased* batch variance (as
torch's BatchNorm keeps it), so the batch side is the unbiased s²_B = n/(n − 1)·σ²_B, with σ²_B
the biased variance the norm normalizes with and n the number of values per channel the
statistics were taken over (N·H·W, or the real tokens of a masked sequence batch):
``last_stats["count"]`` where the norm records it, else counted from the layer's input (and its
mask). A step that left a running estimate as it was (the variance's at n < 2, the mean's at
n = 0) is left out of that statistic's epoch mean. For PowerNorm the same for ψ²_B against the
running ψ² (an EMA of ψ²_B itself: no correction; ours in units of ψ² + eps). With
``grad_norms``, also (1/d)·‖∂L/∂σ²_B‖₂ of the biased σ²_B the norm uses (and for each other live
statistic) — their Figure 3 — and the part of ∂L/∂x over the layer's input that flows through each
statistic: ``<stat>_input_grad``, its ‖·‖₂ over the direct path's ‖(γ/sqrt(σ²_B + eps))·∂L/∂y‖₂
(ours, issue 56: the same whatever the batch holds and the loss averages over), and
``<stat>_input_grad_paper``, the plain ‖·‖₂ (the paper's, which scales with what the loss
averages over; before issue 56 the key ``…_input_grad``); and how much each varies from
step to step within the epoch (the coefficient of variation s/m of the recorded steps' values, s
with n − 1).

Cheap: nothing is recomputed. The norms record their batch statistics inside the training
forward (``record_stats = True`` makes them keep ``last_stats``, detached; ``record_live_stats =
True`` also ``last_stats_live`` in the graph, for the gradients; the output gradient's squares come
through an identity `GradSquares` on the norm's output); the running buffers are copied before the
step; the distances are accumulated on the device and read once per epoch. Logged at the end of
each epoch, as the mean over the epoch's recorded steps: ``<layer>/<stat>_dist`` and
``<layer>/<stat>_dist_paper`` for each layer and ``first_layer/…`` for the first norm layer (what the
paper plots, against the percentage of training epochs); with ``grad_norms``, ``<layer>/<stat>_grad``,
``<layer>/<stat>_input_grad``, ``<layer>/<stat>_input_grad_paper`` and each one's ``…_cv`` (also as
``first_layer/…`` for the first norm layer).
Under data parallelism each rank's norm normalizes with its own shard's statistics (unless
``norm.sync``), so a distance is taken per rank and the epoch's mean is over every rank's
recorded steps (one ``all_reduce`` at the epoch's end, on every rank).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from normbench.base.errors import ConfigError
from normbench.diagnostics.bn_stats_maths import (
    REFERENCE,
    UNBIASED,
    GradSquares,
    compute,
    direct_input_grad,
    grad_moments,
    input_count,
    input_grad_through,
    stat_distance,
    unbiased,
)
from normbench.diagnostics.registry import CadenceConfig, DiagContext, DiagnosticHook, register_diagnostic
from normbench.diagnostics.vectors import ranks_mean, ranks_sum

RUNNING_BUFFERS = {"mean": "running_mean", "var": "running_var", "psi2": "running_psi2"}
"""Batch statistic recorded in ``last_stats`` → the buffer holding its running estimate."""

__all__ = ["compute", "grad_moments", "input_count", "stat_distance", "unbiased", "BNStatsHook", "BNStatsConfig"]


@dataclass
class BNStatsConfig(CadenceConfig):
    """``every_n_steps``: the steps recorded (1 = every step); the log is per epoch."""

    grad_norms: bool = False
    """Also (1/d)·‖∂L/∂stat‖₂ of the batch statistics and the input gradient through each (absolute
    and relative to the direct path's); needs norms with ``record_live_stats`` (BatchNorm's
    differentiable-ops path: slower steps)."""


@register_diagnostic("bn_stats", BNStatsConfig)
class BNStatsHook(DiagnosticHook):
    def __init__(self, cfg: BNStatsConfig) -> None:
        super().__init__(cfg)
        self.layers: list[tuple[str, nn.Module]] = []
        self.pairs: list[tuple[int, str]] = []  # (layer index, statistic) measured
        self._resolved = False
        self._prev: Tensor | None = None
        self._scale: Tensor | None = None  # each pair's per-channel unit of the relative distance
        self._prev_index = self._segment = self._channels = torch.zeros(0)
        self._sum: Tensor | None = None  # the paper's distances, then ours (2 × pairs)
        self._count: Tensor | None = None  # recorded steps per pair (a layer's batch with n < 2 is left out)
        self._input_counts: dict[int, Tensor] = {}  # values per channel, for norms that do not record them
        self._recording = False
        self._next_due: float = 0  # no step before it is recorded (`before_step` asks the cadence from there)
        self._norms_on = False  # the norms' record_stats, as last set
        self._counted: list[int] = []  # layers whose values per channel are counted from their input
        self._may_count: set[int] = set()  # layers with an unbiased statistic: counted unless they record n
        self._pair_layout: _PairLayout | None = None  # what recorded steps need of the pairs (`_layout`)
        self._count_handles: list[Any] = []
        self._grad_sums: dict[str, Tensor] = {}
        self._grad_sq_sums: dict[str, Tensor] = {}
        self._grad_counts: dict[str, int] = {}
        self._out_probes: dict[int, Tensor] = {}  # per layer: its .grad is Σ (∂L/∂y)² per channel

    def setup(self, model: nn.Module) -> None:
        self.layers = [(name or "model", m) for name, m in model.named_modules() if hasattr(m, "record_stats")]
        for _, module in self.layers:
            module.record_stats = True
        self._norms_on = True
        self.pairs = [
            (i, stat)
            for i, (_, module) in enumerate(self.layers)
            for stat, buffer in RUNNING_BUFFERS.items()
            if isinstance(getattr(module, buffer, None), Tensor)
        ]
        self._may_count = {i for i, stat in self.pairs if stat in UNBIASED}
        self._counted = sorted(self._may_count)  # hooked on recorded steps until a layer is seen to record n
        if self.cfg.grad_norms:  # type: ignore[attr-defined]
            for name, module in self.layers:
                if not hasattr(module, "record_live_stats"):
                    raise ConfigError(
                        f"diagnostics.bn_stats.grad_norms=true needs norms that can keep their batch statistics in "
                        f"the graph (record_live_stats); {name!r} ({type(module).__name__}) cannot"
                    )
                module.record_live_stats = True
                zeros = getattr(module, "running_mean", None)
                zeros = torch.zeros(module.num_features) if not isinstance(zeros, Tensor) else torch.zeros_like(zeros)
                module.stat_probes = {s: zeros.clone().requires_grad_(True) for s in ("mean", "var")}
            for i, (_, module) in enumerate(self.layers):
                self._out_probes[i] = module.stat_probes["mean"].detach().clone().requires_grad_(True)
                module.register_forward_hook(self._wrap_output(i), with_kwargs=True)

    def due(self, step: int) -> bool:
        return False  # nothing to do before the step but copy the running statistics

    def __call__(self, ctx: DiagContext) -> dict[str, Any]:
        return {}

    def before_step(self, step: int) -> None:
        if self.cfg.grad_norms:  # type: ignore[attr-defined]
            self._read_stat_grads(False)  # what other backward passes (the probes' diagnostics) left there
        self._recording = False
        if self.pairs and step >= self._next_due:  # a step before the next due one asks nothing
            due = self.next_on_cadence(step)
            self._next_due, self._recording = (math.inf if due is None else due), due == step
        self._norms_record(self._recording)
        if self._recording or self._count_handles:
            self._hook_counts(self._recording)
        if self._recording:  # one concatenated copy: a single kernel, whatever the number of layers
            self._prev = torch.cat([self._running(i, s).detach().reshape(-1) for i, s in self.pairs])
            self._scale = self._layout().scale()

    def _norms_record(self, on: bool) -> None:
        """Let the norms keep their batch statistics (``record_stats``) on recorded steps only: a step
        the cadence skips pays no copy of them (a few tensor ops per layer)."""
        if on != self._norms_on:
            for _, module in self.layers:
                module.record_stats = on
            self._norms_on = on

    def _hook_counts(self, on: bool) -> None:
        """The forward hooks that count each layer's values per channel, present on recorded steps
        only: a module with a hook takes torch's slower call path on every call."""
        for handle in self._count_handles:
            handle.remove()
        self._count_handles = [
            self.layers[i][1].register_forward_hook(self._count_input(i), with_kwargs=True) for i in self._counted
        ] if on else []  # fmt: skip

    def _layout(self) -> _PairLayout:
        """What the recorded steps need to know of the pairs now measured, made once per set of pairs
        on the device (fills, no upload of host lists: no host sync): each pair's reference running
        buffer (`bn_stats_maths.REFERENCE`: the running variance for the mean and the variance, ψ²
        for ψ²; ones where the layer keeps none) with its layer's eps and whether the unit is its
        square root, the channels of the statistics whose running estimate is unbiased, and the
        values per channel each pair's running estimate needs to have been updated."""
        pairs = tuple(self.pairs)
        if self._pair_layout is not None and self._pair_layout.pairs == pairs:
            return self._pair_layout
        device = self._running(*pairs[0]).device
        sources, eps, root, unbiased_ = [], [], [], []
        for i, stat in pairs:
            module, size = self.layers[i][1], self._running(i, stat).numel()
            ref, power = REFERENCE.get(stat, (stat, 1.0))
            buffer = getattr(module, RUNNING_BUFFERS.get(ref, ""), None)
            layer_eps = float(getattr(module, "eps", 0.0))
            if not isinstance(buffer, Tensor):  # no unit: 1 + 0, no root
                buffer, layer_eps, power = torch.ones(size, device=device), 0.0, 1.0
            if power not in (0.5, 1.0) or buffer.numel() != size:
                raise ValueError(f"bn_stats: no unit for {stat!r} of layer {self.layers[i][0]!r}")
            sources.append(buffer)
            eps.append(torch.full((size,), layer_eps, dtype=torch.float64, device=device))
            root.append(torch.full((size,), power == 0.5, device=device))
            unbiased_.append(torch.full((size,), stat in UNBIASED, device=device))
        needed = [torch.full((1,), 1.0 if s in UNBIASED else 0.0, dtype=torch.float64, device=device) for _, s in pairs]
        unknown = torch.full((), float("inf"), dtype=torch.float64, device=device)
        self._pair_layout = _PairLayout(pairs, sources, torch.cat(eps), torch.cat(root), torch.cat(unbiased_),
                                        torch.cat(needed), unknown)  # fmt: skip
        return self._pair_layout

    def _running(self, i: int, stat: str) -> Tensor:
        return getattr(self.layers[i][1], RUNNING_BUFFERS[stat])

    def _batch(self, i: int, stat: str) -> Tensor | None:
        recorded = self.layers[i][1].last_stats
        return None if recorded is None else recorded.get(stat)

    def _values_per_channel(self, i: int) -> Tensor | None:
        """Values per channel of layer i's batch statistics: the norm's own, else its input's."""
        count = self._recorded_count(i)
        return count if count is not None else self._input_counts.get(i)

    def _recorded_count(self, i: int) -> Tensor | None:
        """The values per channel layer i recorded itself this step (None: it records none, or was
        not reached). A layer that records them is not hooked to count its input on later steps
        (`_hook_counts`: a hooked module takes torch's slower call path); one seen without them is
        hooked again from the next recorded step."""
        recorded = self.layers[i][1].last_stats
        return None if recorded is None else recorded.get("count")

    def _count_input(self, i: int):
        def forward_hook(module: nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
            recorded = getattr(module, "last_stats", None)
            if not self._recording or not module.training or recorded is None or recorded.get("count") is not None:
                return
            mask = args[1] if len(args) > 1 else kwargs.get("mask")
            self._input_counts[i] = input_count(args[0], mask, self._running(i, "var").numel())

        return forward_hook

    def _wrap_output(self, i: int):
        """A forward hook that passes layer i's training output through `GradSquares` on recorded
        steps: after backward, ``_out_probes[i].grad`` holds Σ (∂L/∂y)² per channel (real positions)."""

        def forward_hook(module: nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> Any:
            if not self._recording or not module.training or not isinstance(output, Tensor):
                return None
            mask = args[1] if len(args) > 1 else kwargs.get("mask")
            seq = getattr(module, "layout", "NCHW") == "NTC"
            w = mask.unsqueeze(-1).to(output.dtype) if seq and mask is not None else None
            probe = self._out_probes[i]
            if probe.device != output.device:
                probe = self._out_probes[i] = probe.detach().to(output.device).requires_grad_(True)
            return GradSquares.apply(output, probe, w, -1 if seq else 1)

        return forward_hook

    def _resolve(self) -> None:
        """Keep the statistics the norms actually record; index each one's channels in the flat copy."""
        sizes = [self._running(i, s).numel() for i, s in self.pairs]
        keep = [j for j, (i, s) in enumerate(self.pairs) if self._batch(i, s) is not None]
        starts = [sum(sizes[:j]) for j in range(len(sizes))]
        device = self._prev.device  # type: ignore[union-attr]
        self._prev_index = torch.cat(
            [torch.arange(starts[j], starts[j] + sizes[j], device=device) for j in keep]
            or [torch.zeros(0, dtype=torch.long, device=device)]
        )
        self.pairs = [self.pairs[j] for j in keep]
        kept = [sizes[j] for j in keep]
        # fills on the device, no upload of host lists: the first recorded step makes no host sync either
        self._segment = torch.cat(
            [torch.full((k,), j, device=device) for j, k in enumerate(kept)] or [torch.zeros(0, device=device)]
        ).long()
        self._channels = torch.cat(
            [torch.full((1,), k, dtype=torch.float64, device=device) for k in kept]
            or [torch.zeros(0, dtype=torch.float64, device=device)]
        )
        self._resolved = True

    def after_step(self, step: int) -> None:
        if self.cfg.grad_norms:  # type: ignore[attr-defined]
            self._read_stat_grads(self._recording)
        if not self._recording or self._prev is None:
            return
        self._recording = False
        self._hook_counts(False)
        if not self._resolved:
            self._resolve()
        if not self.pairs:
            return
        stats = [self._batch(i, s) for i, s in self.pairs]
        counts = {i: self._values_per_channel(i) for i, s in self.pairs if s in UNBIASED or s == "mean"}
        self._counted = sorted(i for i in self._may_count if self._recorded_count(i) is None)
        if any(b is None for b in stats) or any(n is None for n in counts.values()):
            return  # a layer the step's forward did not reach: the step is not recorded
        device = self._prev.device
        layout = self._layout()
        n, valid = self._counts_and_updated(layout, counts, device)
        batch = torch.cat([b.reshape(-1) for b in stats]).to(device).double()  # type: ignore[union-attr]
        # n/(n − 1)·σ²_B on the channels of the statistics in UNBIASED (`bn_stats_maths.unbiased`, per pair)
        batch = torch.where(layout.unbiased, unbiased(batch, n[self._segment]), batch)
        every = len(self._prev_index) == len(self._prev)
        prev = self._prev if every else self._prev[self._prev_index]
        scale = self._scale if every else self._scale[self._prev_index]  # type: ignore[index]
        diff = batch - prev.double()
        rel = diff / scale.to(device)  # type: ignore[union-attr]
        sq = torch.zeros(2, len(self.pairs), dtype=torch.float64, device=device)
        sq[0].index_add_(0, self._segment, diff * diff)
        sq[1].index_add_(0, self._segment, rel * rel)
        # the paper's (1/d)·‖·‖₂, then ours sqrt((1/d)·Σ (·/unit)²), per pair
        dists = torch.cat([sq[0].sqrt() / self._channels, (sq[1] / self._channels).sqrt()])
        dists = torch.where(valid.repeat(2), dists, 0.0)  # no running update to compare with
        if self._sum is None or self._count is None:
            self._sum, self._count = dists, valid.double()
        else:
            self._sum = self._sum.to(device).add_(dists)
            self._count = self._count.to(device).add_(valid.double())
        for _, module in self.layers:
            module.last_stats = None  # stale statistics are never read twice
        self._input_counts = {}
        self._prev = self._scale = None

    def _counts_and_updated(
        self, layout: _PairLayout, counts: dict[int, Tensor | None], device: torch.device
    ) -> tuple[Tensor, Tensor]:
        """Per pair: n, its layer's values per channel (float64; +inf where unknown), and whether the
        step updated the running estimate: the variance needs n ≥ 2 values per channel (an unbiased
        variance), the mean one; unknown n: assumed updated."""
        n = torch.stack([layout.unknown if counts.get(i) is None else counts[i] for i, _ in self.pairs])  # type: ignore[misc]
        n = n.to(device, torch.float64)
        return n, n > layout.needed

    def _read_stat_grads(self, recorded: bool) -> None:
        """Add each layer's (1/d)·‖∂L/∂stat‖₂ from its probes, and ‖∂L/∂x‖₂ through the statistic,
        to the epoch's sums (a recorded step); clear the probes for the next step (on the device:
        no host sync)."""
        for i, (name, module) in enumerate(self.layers):
            probes = getattr(module, "stat_probes", None) or {}
            direct = self._direct_grad(i) if recorded else None
            for stat, probe in probes.items():
                if recorded and probe.grad is not None:
                    grad = probe.grad.detach().double()
                    self._add_grad(f"{name}/{stat}_grad", torch.linalg.vector_norm(grad) / probe.numel())
                    through = self._input_grad(i, stat, grad)
                    if through is not None:
                        self._add_grad(f"{name}/{stat}_input_grad_paper", through)
                    if through is not None and direct is not None:  # 0/0 (no gradient at all) reads 0
                        self._add_grad(f"{name}/{stat}_input_grad", through / direct.clamp_min(1e-300))
                probe.grad = None
            if i in self._out_probes:
                self._out_probes[i].grad = None

    def _direct_grad(self, i: int) -> Tensor | None:
        """‖(γ/sqrt(σ²_B + eps))·∂L/∂y‖₂ of layer i this step (`bn_stats_maths.direct_input_grad`)."""
        probe, var = self._out_probes.get(i), self._batch(i, "var")
        if probe is None or probe.grad is None or var is None:
            return None
        module = self.layers[i][1]
        return direct_input_grad(probe.grad, var, getattr(module, "weight", None), float(module.eps))

    def _add_grad(self, key: str, value: Tensor) -> None:
        for sums, v in ((self._grad_sums, value), (self._grad_sq_sums, value * value)):
            total = sums.get(key)
            sums[key] = v if total is None else total.to(v.device) + v
        self._grad_counts[key] = self._grad_counts.get(key, 0) + 1

    def _input_grad(self, i: int, stat: str, grad: Tensor) -> Tensor | None:
        """‖∂L/∂x‖₂ over the layer's input of the part that flows through the batch statistic
        (Shen et al. 2020, Fig. 3 as we read it: the gradient through σ_B; `input_grad_through`)."""
        n = self._values_per_channel(i)
        return None if n is None else input_grad_through(stat, grad, self._batch(i, "var"), n)

    def epoch_end(self) -> dict[str, float]:
        out: dict[str, float] = {}
        if self._sum is not None and self._count is not None:  # under data parallelism: every rank's steps
            per_rank = torch.stack([self._sum, self._count.to(self._sum).repeat(2)])
            sums, steps = ranks_sum([per_rank])[0].tolist()
            first = self.pairs[0][0] if self.pairs else None
            kinds = [("dist_paper", j, pair) for j, pair in enumerate(self.pairs)]
            kinds += [("dist", len(self.pairs) + j, pair) for j, pair in enumerate(self.pairs)]
            for kind, j, (i, stat) in kinds:
                if steps[j] == 0 or sums[j] != sums[j]:  # no step recorded; NaN: an old checkpoint's
                    continue
                names = [self.layers[i][0], "first_layer"] if i == first else [self.layers[i][0]]
                out.update({f"{name}/{stat}_{kind}": sums[j] / steps[j] for name in names})
        keys = sorted(self._grad_sums)
        if keys:  # the ranks' sums, averaged (every rank records the same steps)
            sums = torch.stack([torch.stack([self._grad_sums[k] for k in keys]), self._grad_sq_sums_of(keys)])
            totals, squares = ranks_mean([sums])[0].tolist()
            first = self.layers[0][0] if self.layers else None
            for key, total, square in zip(keys, totals, squares):
                values = grad_moments(total, square, self._grad_counts[key])
                layer, stat = key.rsplit("/", 1)
                names = [key, f"first_layer/{stat}"] if layer == first else [key]
                kept = [(suffix, v) for suffix, v in zip(("", "_cv"), values) if v == v]  # no NaN cv (n < 2)
                out.update({f"{name}{suffix}": v for name in names for suffix, v in kept})
        self._sum, self._count = None, None
        self._grad_sums, self._grad_sq_sums, self._grad_counts = {}, {}, {}
        return out

    def _grad_sq_sums_of(self, keys: list[str]) -> Tensor:
        """The sums of squares (NaN for a checkpoint written before they were kept: no cv logged)."""
        first = self._grad_sums[keys[0]]
        return torch.stack([self._grad_sq_sums.get(k, torch.full_like(first, float("nan"))) for k in keys])

    def state_dict(self) -> dict[str, Any]:
        """The epoch's accumulators so far (on the CPU), for checkpoints."""
        return {
            "sum": None if self._sum is None else self._sum.detach().cpu(),
            "count": None if self._count is None else self._count.detach().cpu(),
            "grad_sums": {k: v.detach().cpu() for k, v in self._grad_sums.items()},
            "grad_sq_sums": {k: v.detach().cpu() for k, v in self._grad_sq_sums.items()},
            "grad_counts": dict(self._grad_counts),
            "pairs": [list(p) for p in self.pairs],
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._sum, pairs = state["sum"], len(state["pairs"])
        if self._sum is not None and len(self._sum) == pairs:  # written before the relative distances
            self._sum = torch.cat([self._sum, torch.full_like(self._sum, float("nan"))])
        count = None if state["count"] is None else torch.as_tensor(state["count"], dtype=torch.float64)
        if count is not None:
            count = count.expand(pairs).clone()  # a count of steps shared by all pairs
        self._count = count
        self._grad_sums = dict(state["grad_sums"])
        self._grad_sq_sums = dict(state.get("grad_sq_sums", {}))
        self._grad_counts = dict(state["grad_counts"])
        self.pairs = [(int(i), str(s)) for i, s in state["pairs"]]
        self._resolved = False  # re-index the flat copy at the next recorded step
        self._next_due = 0


@dataclass
class _PairLayout:
    """`BNStatsHook._layout`: per pair its reference buffer (or ones) and the values per channel
    its update needs (``needed``); per channel the layer's eps, whether the unit is a square root
    (the mean's: sqrt(σ² + eps)) and whether the statistic's running estimate is unbiased."""

    pairs: tuple[tuple[int, str], ...]
    sources: list[Tensor]
    eps: Tensor
    root: Tensor
    unbiased: Tensor
    needed: Tensor
    unknown: Tensor
    """+inf: the values per channel of a layer that records none (its estimate counts as updated)."""

    def scale(self) -> Tensor:
        """(buffer + eps) or sqrt(buffer + eps) per channel, float64, as the buffers stand now."""
        unit = torch.cat([b.detach().reshape(-1) for b in self.sources]).double() + self.eps
        return torch.where(self.root, unit.sqrt(), unit)
