"""The epoch's running sums of the task's step statistics (`RunningSums`), on the device, in one
kernel a step whatever the number of statistics."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor

from normbench.tasks.base import RowSum


class RunningSums:
    """Running sums of the task's step statistics (``StepOutput.stats``), never synced per step.

    Floating-point statistics (the loss sum) are added at every step, in order: their sums are bit
    for bit those of one add a step. Integer ones (``int64``: counts) are listed and summed when the
    sums are read (`totals`): an integer sum is exact in any order, so the step pays one kernel
    instead of one per statistic. A `RowSum` (correct answers: argmax, compare, sum) is not even
    computed a step: its rows are listed and counted once, concatenated, every `FOLD_EVERY` steps
    and when the sums are read (exact: an integer sum), so it holds at most that many steps of rows.
    `totals` keeps the keys in the order the statistics first came (the order ``ep.sums`` had when
    every statistic was added each step)."""

    FOLD_EVERY = 16
    """Steps of a `RowSum`'s rows kept before they are counted."""

    def __init__(self, start: Mapping[str, Tensor] | None = None) -> None:
        self._sums: dict[str, Tensor] = dict(start or {})
        self._order: list[str] = list(self._sums)
        self._pending: dict[str, list[Tensor]] = {}  # the integer statistics, listed (kept, emptied by `totals`)
        self._rows: dict[str, list[RowSum]] = {}  # the statistics counted later (`RowSum`), listed
        self._added: set[str] = set()  # the floating-point ones, added each step

    def add(self, stats: Mapping[str, Tensor | RowSum]) -> None:
        """One step's statistics (each keeps its kind from step to step: it is read at the first)."""
        pending, rows = self._pending, self._rows
        for k, v in stats.items():
            listed = pending.get(k)
            if listed is not None:
                listed.append(v)  # type: ignore[arg-type]
            elif k in self._added:
                self._sums[k] = self._sums[k] + v
            elif k in rows:
                waiting = rows[k]
                waiting.append(v)  # type: ignore[arg-type]
                if len(waiting) >= self.FOLD_EVERY:
                    self._fold(k)
            else:
                self._first(k, v)

    def _first(self, k: str, v: Tensor | RowSum) -> None:
        """A statistic's first step: listed if an integer or a `RowSum`, else added (cloned if it starts the sum)."""
        total = self._sums.get(k)
        if total is None:
            self._order.append(k)
        if isinstance(v, RowSum):
            self._rows[k] = [v]
            return
        if v.dtype == torch.int64:
            self._pending[k] = [v]
            return
        self._added.add(k)
        self._sums[k] = v.clone() if total is None else total + v

    def _fold(self, k: str) -> None:
        """Count the listed rows of ``k`` at once: its `RowSum` over their concatenation."""
        waiting = self._rows[k]
        if waiting:
            joined = RowSum(waiting[0].count, tuple(torch.cat(parts) for parts in zip(*(r.rows for r in waiting))))
            total = self._sums.get(k)
            self._sums[k] = joined.value() if total is None else total + joined.value()
            waiting.clear()

    def totals(self) -> dict[str, Tensor]:
        """The sums so far, a new dict (later steps never change the tensors it holds)."""
        for k in self._rows:
            self._fold(k)
        for k, listed in self._pending.items():
            if listed:
                step_sum = torch.stack(listed).sum(0)
                total = self._sums.get(k)
                self._sums[k] = step_sum if total is None else total + step_sum
                listed.clear()
        return {k: self._sums[k] for k in self._order}
