"""The steps the loop computes ahead (`normbench.run.loop.events`) are those asking at every step gives."""

from __future__ import annotations

import itertools

import pytest

from normbench.diagnostics.registry import CadenceConfig, DiagnosticHook
from normbench.run.loop.events import NEVER, PROGRESS_EVERY_STEPS, next_diagnostic, next_event


class Probe(DiagnosticHook):
    name = "probe"


class OwnDue(DiagnosticHook):
    name = "own_due"

    def due(self, step: int) -> bool:
        return step == 3


def first_asking(hook: DiagnosticHook, step: int, horizon: int = 2000) -> int:
    """The first step >= ``step`` where the hook says it is due, asking every step."""
    return next((s for s in range(step, horizon) if hook.due(s)), NEVER)


@pytest.mark.parametrize(
    ("every", "start", "steps"),
    [(0, 0, []), (1, 0, []), (10, 0, []), (7, 25, []), (500, 250, []), (0, 0, [3, 40, 41]), (6, 4, [5, 100])],
)
def test_next_on_cadence_is_the_first_due_step_asked_one_at_a_time(every: int, start: int, steps: list[int]) -> None:
    """`DiagnosticHook.next_on_cadence` against the cadence's definition, step by step (every N from
    start, or a listed step); `on_cadence` is read from it, so it is checked against the same."""
    hook = Probe(CadenceConfig(every_n_steps=every, start_step=start, steps=steps))
    on = [(every > 0 and s >= start and (s - start) % every == 0) or s in steps for s in range(2000)]
    for step in range(0, 120):
        expected = next((s for s in range(step, 2000) if on[s]), NEVER)
        due = hook.next_on_cadence(step)
        assert (NEVER if due is None else due) == expected, step
        assert hook.on_cadence(step) == on[step]


def test_hooks_with_their_own_due_are_asked_and_the_others_scheduled() -> None:
    a = Probe(CadenceConfig(every_n_steps=10, start_step=5))
    b = Probe(CadenceConfig(steps=[7]))
    own = OwnDue(CadenceConfig(every_n_steps=1))
    first, asked = next_diagnostic([a, own, b], 0)
    assert (first, asked) == (5, [own])
    assert next_diagnostic([a, b], 6)[0] == 7
    assert next_diagnostic([a, b], 8)[0] == 15
    assert next_diagnostic([], 0) == (NEVER, [])


@pytest.mark.parametrize(
    ("log_every", "total", "ckpt_every", "progress"),
    list(itertools.product([1, 10, 1000], [37, 200], [0, 25], [False, True])),
)
def test_next_event_is_the_first_step_with_a_log_row_checkpoint_or_display_update(
    log_every: int, total: int, ckpt_every: int, progress: bool
) -> None:
    def something_due(s: int) -> bool:
        log_row = s % log_every == 0 or s == total
        checkpoint = ckpt_every > 0 and s % ckpt_every == 0
        return log_row or checkpoint or (progress and s % PROGRESS_EVERY_STEPS == 0)

    for step in range(0, total):
        expected = next(s for s in range(step + 1, total + 1) if something_due(s))
        assert next_event(step, log_every, total, ckpt_every, progress) == expected, step
