"""Divergence as a result: a non-finite loss, or a loss above ``loss_factor`` times the run's
first loss, stops the run with ``status: diverged``; so does an evaluation with a non-finite
metric (`non_finite`: the training loss can stay finite while the running statistics do not).

`DivergenceMonitor.observe` runs every step on the device with no host sync (it only updates a
flag tensor); `DivergenceMonitor.diverged_step` reads the flag (one sync) and is called where the
runner syncs anyway: at logged steps, before checkpoints and at epoch ends. The run therefore
stops at the first such point after the loss went bad, and reports the step at which it did.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from normbench.base.errors import ConfigError


@dataclass
class DivergenceConfig:
    loss_factor: float = 100.0
    """Stop when a step's training loss exceeds this multiple of the first step's loss
    (0: only a non-finite loss stops the run)."""

    def __post_init__(self) -> None:
        if not (self.loss_factor == 0 or self.loss_factor > 1):
            raise ConfigError(
                f"divergence.loss_factor={self.loss_factor} is not allowed; "
                "divergence.loss_factor must be > 1 (or 0: non-finite loss only)"
            )


def non_finite(metrics: Mapping[str, Any]) -> list[str]:
    """The names of the metrics in ``metrics`` whose value is a NaN or an infinity (an evaluation
    of a model whose weights or running statistics went bad: a non-result, never a score)."""
    return [
        k
        for k, v in metrics.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isfinite(float(v))
    ]


def diverged_reason(bad: Mapping[str, float] | None = None, loss_factor: float = 0.0) -> str:
    """Why a run diverged, for its summary and its last line: the evaluation's non-finite metrics
    (``val/loss=nan in the evaluation``), else the training loss (non-finite, or above
    ``loss_factor`` times the first step's)."""
    if bad:
        return ", ".join(f"{k}={v}" for k, v in bad.items()) + " in the evaluation"
    above = f" or above divergence.loss_factor={loss_factor:g} times the first step's" if loss_factor > 0 else ""
    return f"the training loss went non-finite{above}"


class DivergenceMonitor:
    """The first step whose training loss went non-finite (or above ``loss_factor`` times the
    first step's): `observe` only lists the step's loss (no kernel, no host sync). Every
    ``FOLD_EVERY`` steps the listed losses are checked together on the device, in a handful of
    kernels, with no sync (`_fold`); where the runner syncs anyway (`diverged_step`: its log
    steps, checkpoints and epoch ends) they are copied to the host in one transfer and checked
    there, the same comparisons in the same precision (float32): a handful of kernels fewer at
    each log row."""

    FOLD_EVERY = 64
    _NONE = torch.iinfo(torch.long).max
    """``_first_bad`` while no step went bad (a step number above any: the minimum keeps the first)."""

    def __init__(self, loss_factor: float, reference_loss: float | None = None) -> None:
        self.loss_factor = float(loss_factor)
        self.reference: Tensor | None = None
        self._reference_value = reference_loss
        self._limit: Tensor | None = None  # loss_factor * |reference|, once
        self._limit_value: float | None = None  # the same on the host (float32's value exactly)
        self._first_bad: Tensor | None = None  # found by `_fold`, on the device
        self._folded = False  # `_fold` ran since the host last read ``_first_bad``
        self._first_bad_seen = self._NONE  # found on the host, or read from ``_first_bad``
        self._pending: list[Tensor] = []
        self._pending_from = 0

    def observe(self, loss: Tensor, step: int) -> None:
        """Record the loss of the step that makes the step counter ``step`` (no host sync)."""
        pending = self._pending
        if not pending or step != self._pending_from + len(pending):  # a new run of consecutive steps
            if pending:
                self._fold()
            self._pending_from = step
            pending = self._pending
        pending.append(loss.detach())
        if len(pending) >= self.FOLD_EVERY:
            self._fold()

    def _take(self) -> tuple[Tensor | None, int]:
        """The listed losses as one float32 tensor (None: none) and the step of the first; the
        reference and the limit set from the first loss ever listed (or the resumed reference)."""
        losses, first_step, self._pending = self._pending, self._pending_from, []
        if not losses:
            return None, first_step
        values = torch.stack(losses).float()
        if self.reference is None:
            given = self._reference_value
            ref = values[0] if given is None else torch.tensor(given, device=values.device)
            self.reference = ref.clone()
            self._limit = self.loss_factor * self.reference.abs()
            self._first_bad = torch.full((), self._NONE, dtype=torch.long, device=values.device)
        return values, first_step

    def _fold(self) -> None:
        """Check the listed losses (consecutive steps from ``_pending_from``) at once on the
        device, elementwise as one at a time would: the first bad step among them, if none was
        found before."""
        values, first_step = self._take()
        if values is None:
            return
        bad = ~torch.isfinite(values)
        if self.loss_factor > 0:
            bad = bad | (values > self._limit)
        steps = torch.arange(first_step, first_step + len(values), device=values.device)
        self._first_bad = torch.minimum(self._first_bad, torch.where(bad, steps, self._NONE).min())  # type: ignore[arg-type]
        self._folded = True

    def _check_on_host(self) -> None:
        """The listed losses checked on the host (one copy: a sync), as `_fold` checks them."""
        values, first_step = self._take()
        if values is None:
            return
        if self._limit_value is None:
            self._limit_value = float(self._limit)  # type: ignore[arg-type]
        limit, by_factor = self._limit_value, self.loss_factor > 0
        for i, v in enumerate(values.tolist()):  # float32 values, exact as Python floats
            if not math.isfinite(v) or (by_factor and v > limit):
                self._first_bad_seen = min(self._first_bad_seen, first_step + i)
                return

    def diverged_step(self) -> int | None:
        """The first step whose loss went bad, or None (syncs with the device)."""
        if self._folded:  # the device's checks first: their steps come before the listed ones
            self._first_bad_seen = min(self._first_bad_seen, int(self._first_bad))  # type: ignore[arg-type]
            self._folded = False
        self._check_on_host()
        return None if self._first_bad_seen == self._NONE else self._first_bad_seen

    def reference_loss(self) -> float | None:
        """The first step's loss (saved in checkpoints so that a resume keeps the same threshold)."""
        self._fold()
        return float(self.reference) if self.reference is not None else self._reference_value
