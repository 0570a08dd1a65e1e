"""The epoch's running sums of the task's step statistics (`RunningSums`), on the device, in one
kernel a step whatever the number of statistics."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor


class RunningSums:
    """Running sums of the task's step statistics (``StepOutput.stats``), never synced per step.

    Floating-point statistics (the loss sum) are added at every step, in order: their sums are bit
    for bit those of one add a step. Integer ones (``int64``: correct answers, counts) are listed
    and summed when the sums are read (`totals`): an integer sum is exact in any order, so the
    step pays one kernel instead of one per statistic. `totals` keeps the keys in the order the
    statistics first came (the order ``ep.sums`` had when every statistic was added each step)."""

    def __init__(self, start: Mapping[str, Tensor] | None = None) -> None:
        self._sums: dict[str, Tensor] = dict(start or {})
        self._order: list[str] = list(self._sums)
        self._pending: dict[str, list[Tensor]] = {}  # the integer statistics, listed (kept, emptied by `totals`)
        self._added: set[str] = set()  # the floating-point ones, added each step

    def add(self, stats: Mapping[str, Tensor]) -> None:
        """One step's statistics (each keeps its dtype from step to step: it is read at the first)."""
        pending = self._pending
        for k, v in stats.items():
            listed = pending.get(k)
            if listed is not None:
                listed.append(v)
            elif k in self._added:
                self._sums[k] = self._sums[k] + v
            else:
                self._first(k, v)

    def _first(self, k: str, v: Tensor) -> None:
        """A statistic's first step: listed if an integer, else added (cloned if it starts the sum)."""
        total = self._sums.get(k)
        if total is None:
            self._order.append(k)
        if v.dtype == torch.int64:
            self._pending[k] = [v]
            return
        self._added.add(k)
        self._sums[k] = v.clone() if total is None else total + v

    def totals(self) -> dict[str, Tensor]:
        """The sums so far, a new dict (later steps never change the tensors it holds)."""
        for k, listed in self._pending.items():
            if listed:
                step_sum = torch.stack(listed).sum(0)
                total = self._sums.get(k)
                self._sums[k] = step_sum if total is None else total + step_sum
                listed.clear()
        return {k: self._sums[k] for k in self._order}
