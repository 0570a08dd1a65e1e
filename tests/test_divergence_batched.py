"""The divergence monitor checks its listed losses together (issue 61: no kernels per step):
the same first bad step as checking each loss when it comes, by a loop over Python floats."""

from __future__ import annotations

import math
import random

import pytest
import torch

from normbench.divergence import DivergenceMonitor


def first_bad_by_hand(losses: list[tuple[int, float]], factor: float, reference: float | None) -> int | None:
    ref = losses[0][1] if reference is None else reference
    for step, loss in losses:
        if not math.isfinite(loss) or (factor > 0 and loss > factor * abs(ref)):
            return step
    return None


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("factor", [0.0, 5.0])
def test_batched_checks_find_the_first_bad_step(seed: int, factor: float) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 200)
    values = [rng.uniform(0.5, 3.0) for _ in range(n)]
    for _ in range(rng.randint(0, 3)):  # a few bad losses anywhere, some after the first
        values[rng.randrange(n)] = rng.choice([math.nan, math.inf, -math.inf, 40.0])
    steps = list(range(1, n + 1))
    if seed % 2:  # a resumed segment: steps jump once (the counter restarts elsewhere)
        cut = rng.randrange(n)
        steps = steps[:cut] + [s + 17 for s in steps[cut:]]
    reference = None if seed % 3 else 2.0
    monitor = DivergenceMonitor(factor, reference)
    asked = []
    for s, v in zip(steps, values):
        monitor.observe(torch.tensor(v), s)
        if rng.random() < 0.05:  # the runner asks at its log steps
            asked.append((s, monitor.diverged_step()))
    seen = list(zip(steps, values))
    assert monitor.diverged_step() == first_bad_by_hand(seen, factor, reference)
    for s, answer in asked:
        assert answer == first_bad_by_hand([(t, v) for t, v in seen if t <= s], factor, reference)
    expected_ref = values[0] if reference is None else reference
    assert monitor.reference_loss() == torch.tensor(expected_ref).item() or math.isnan(expected_ref)


def test_observe_runs_no_kernel() -> None:
    """Listing a loss dispatches no torch op (a detach is a view, not a kernel)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

    monitor = DivergenceMonitor(10.0)
    losses = [torch.tensor(float(i + 1)) for i in range(10)]
    with Count() as counted:
        for i, loss in enumerate(losses):
            monitor.observe(loss, i + 1)
    assert [op for op in counted.ops if "detach" not in op] == []
    assert monitor.diverged_step() is None
