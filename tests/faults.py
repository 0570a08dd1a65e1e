"""What a reliability test is about: the fault or bad input, and what the user gets.

Tests declare it with `fault`; ``normbench-reports reliability`` collects the tests and counts
their cases (a parametrized test counts each parameter) per fault and per outcome, which is how
the figures and the table in ``RELIABILITY.md`` are made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

OUTCOMES = {
    "one-line": "refused or stopped with one line naming the problem, exit code != 0, no traceback",
    "result": "recorded as what happened (status in summary.json and W&B), the run or sweep goes on",
    "bit-exact": "the resumed run's metrics equal an uninterrupted run's, float for float",
    "exact": "the numbers eager mode gives (a compiled step's outputs, gradients and buffers, to 1e-5)",
    "kept": "nothing the user or the run had is removed or overwritten",
}

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Fault:
    what: str
    """The fault or bad input, as a user would name it."""
    gets: str
    """What the project does about it."""
    outcome: str
    """One of `OUTCOMES`."""


def fault(what: str, gets: str, outcome: str) -> Callable[[F], F]:
    """Mark a test (each of its parametrized cases) as a check of ``what``."""
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome={outcome!r}; one of {', '.join(OUTCOMES)}")

    def mark(test: F) -> F:
        test.fault = Fault(what, gets, outcome)  # type: ignore[attr-defined]
        return test

    return mark
