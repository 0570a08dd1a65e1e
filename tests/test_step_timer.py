"""`normbench.run.loop.state.StepTimer`: the training clock (every step) and the throughput's time
(counted steps only), on a clock that the test moves by hand."""

from __future__ import annotations

import pytest
import torch

from normbench.run.loop import state as run_state
from normbench.run.loop.state import StepTimer


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_warm_up_steps_count_in_the_clock_not_in_the_throughput(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(run_state.time, "perf_counter", clock)
    t = StepTimer(torch.device("cpu"))
    t.start(counted=False)  # step 0: the warm-up (compilation)
    clock.now = 5.0
    assert not t.counting and t.lap() == 5.0
    t.start(counted=True)  # step 1: the warm-up ends while the timer runs
    assert t.counting and (t.total, t.elapsed) == (5.0, 0.0)
    clock.now = 7.0
    t.start(counted=True)  # a step while running: nothing changes
    t.stop()  # diagnostics: paused
    assert (t.total, t.elapsed) == (7.0, 2.0)
    clock.now = 100.0  # 93 s of evaluation: neither counts
    t.start()
    clock.now = 101.0
    t.stop()
    assert (t.total, t.elapsed) == (8.0, 3.0) and not t.counting
