"""When something besides the training step is due, as step numbers fixed ahead (issue 61).

A training step of a small model takes a few milliseconds of host time; asking every hook, the
logger, the checkpointer and the display at every step whether they are due cost more than the
runner's whole budget (50 µs a step over a hand-written loop). Instead the loop keeps two integers
per epoch (`normbench.run.loop.state.Epoch`): ``next_diag``, the next step at which a diagnostic
on a step cadence is due (`next_diagnostic`), and ``next_event``, the next step counter at which a
log row, a mid-epoch checkpoint or a progress update is due (`next_event`); a step before them
only compares two integers. Both are exact: the hooks due at a step, the log rows and the
checkpoints are those asking at every step gives (`DiagnosticHook.on_cadence`,
`Checkpointer.due`); hooks with a ``due`` of their own are asked at every step (``asked``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from normbench.diagnostics import DiagContext
from normbench.diagnostics.registry import DiagnosticHook, step_calls
from normbench.run.loop.state import Epoch, Run, call_diagnostics, log

NEVER = 1 << 62
"""A step no run reaches: nothing is due."""
PROGRESS_EVERY_STEPS = 16
"""The progress display is given the steps trained at least this often (and at each log row): it
draws at most every 0.1 s (the bar) or every ``logger.progress_every_s`` (the lines), never per step."""


def on_fixed_cadence(hook: Any) -> bool:
    """Whether ``hook`` is due exactly on its cadence (`DiagnosticHook.due` and ``on_cadence``
    not overridden): its due steps can be computed ahead."""
    kind = type(hook)
    return (
        getattr(kind, "due", None) is DiagnosticHook.due
        and getattr(kind, "on_cadence", None) is DiagnosticHook.on_cadence
        and getattr(kind, "next_on_cadence", None) is DiagnosticHook.next_on_cadence
    )


def next_diagnostic(hooks: Iterable[Any], step: int) -> tuple[int, list[Any]]:
    """The first step >= ``step`` at which a hook on a fixed cadence is due (`NEVER`: none), and
    the hooks that decide for themselves (asked at every step)."""
    first, asked = NEVER, []
    for hook in hooks:
        if on_fixed_cadence(hook):
            due = hook.next_on_cadence(step)
            first = first if due is None else min(first, due)
        else:
            asked.append(hook)
    return first, asked


def any_due(hooks: list[Any], step: int) -> bool:
    """Whether one of ``hooks`` says it is due at ``step``."""
    return any(hook.due(step) for hook in hooks)


def next_multiple(every: int, after: int) -> int:
    """The first multiple of ``every`` above ``after`` (`NEVER` for ``every`` <= 0)."""
    return (after // every + 1) * every if every > 0 else NEVER


def next_event(step: int, log_every: int, total_steps: int, checkpoint_every: int, progress: bool) -> int:
    """The first step counter above ``step`` at which the runner logs (every ``log_every`` steps
    and at the run's last), may write a mid-epoch checkpoint (every ``checkpoint_every``; 0: never)
    or, where ``progress`` is shown, gives the display its steps (`PROGRESS_EVERY_STEPS`). A
    signal's checkpoint is not in it: the loop checks ``Checkpointer.stop_signal`` at every step."""
    due = min(next_multiple(log_every, step), next_multiple(checkpoint_every, step))
    if progress:
        due = min(due, next_multiple(PROGRESS_EVERY_STEPS, step))
    return min(due, total_steps) if step < total_steps else due


def next_run_event(run: Run, ep: Epoch, step: int) -> int:
    """The step counter above ``step`` at which `after_step` has something to do (`next_event`)."""
    checkpointer = run.checkpointer
    every = checkpointer.every_n_steps if checkpointer.enabled else 0
    plan = run.plan
    return next_event(step, plan.log_every_n_steps, plan.total_steps, every, ep.bar is not None)


def run_due_diagnostics(run: Run, ep: Epoch, batch: Any) -> None:
    """The hooks due at this step, on θ_t and the step's batch, outside the step timer; then the
    step the next one is due."""
    step = run.step
    due = [h for h in run.hooks if h.due(step)]
    if due:
        run.timer.stop()
        t0 = time.perf_counter()
        lr = run.scheduler.get_last_lr()[0]
        ctx = DiagContext(run.model, batch, run.loss, run.optimizer, step, ep.index, lr, task=run.task)
        log(run, call_diagnostics(due, ctx, run.hooks))
        ep.before, ep.after = step_calls(run.hooks)  # a hook that failed is switched off
        run.progress.diag_seconds += time.perf_counter() - t0
    ep.next_diag, ep.asked = next_diagnostic(run.hooks, step + 1)
