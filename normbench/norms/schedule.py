"""Step schedules of norms that change with the training step (PowerNorm's warm-up, Batch Renorm's
ramps), given as a step count or as a fraction of the run's training steps.

A norm with such a schedule has ``plan_schedule(total_steps)``, which the runner calls on every
module that has it once the run's length is known (also after a resume: the planned counts are
worked out again from the same length, the step counters are buffers in the checkpoint). A count,
when set, is used as given and the fraction is not; a fraction is ``round(fraction · total_steps)``.
Until it is planned, a fraction-given schedule stays at its start (the warm-up has not ended): a
norm built outside the runner behaves as in the first steps of a run.
"""

from __future__ import annotations

import math

from normbench.base.errors import ConfigError

UNPLANNED = 2**62
"""The step at which a fraction-given schedule point lies before `plan_schedule`: never reached."""


def checked(count: int | None, fraction: float | None, count_key: str, fraction_key: str) -> float | None:
    """The fraction that plans this schedule point (None when ``count`` is set, which wins); a
    one-line `ConfigError` for a negative count, a fraction outside [0, 1], or neither given."""
    if count is not None and count < 0:
        raise ConfigError(f"norm.{count_key}={count} must be >= 0 (a number of training steps)")
    if fraction is not None and not 0 <= fraction <= 1:
        raise ConfigError(f"norm.{fraction_key}={fraction} must be in [0, 1] (a fraction of the run's training steps)")
    if count is None and fraction is None:
        raise ConfigError(
            f"norm.{count_key} and norm.{fraction_key} are both null; set one (steps, or a fraction of the run)"
        )
    return None if count is not None else fraction


def steps_of(fraction: float, total_steps: int) -> int:
    """``fraction`` of ``total_steps``, rounded half up to a whole step."""
    if total_steps <= 0:
        raise ValueError(f"total_steps must be positive, got {total_steps}")
    return math.floor(fraction * total_steps + 0.5)
