"""A paper's qualitative claim, checked against per-seed numbers, and the table of them."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from normbench.analysis.runs import Run
from normbench.analysis.stats import Spread, spread, verdict_less


@dataclass(frozen=True)
class Scale:
    """How a preset's runs compare with the paper's setup: ``adequate`` when the setup matches and
    the run is long and large enough to judge the claim; ``note`` says by how much it is not."""

    adequate: bool
    note: str


FULL_SCALE = Scale(True, "the paper's setup and length")


@dataclass
class Claim:
    """One qualitative finding of a paper, what we measured, and whether it holds here."""

    claim: str
    paper: str
    measured: str
    verdict: str
    figure: str = ""


HIGHER_IS_BETTER = -math.inf
LOWER_IS_BETTER = math.inf
"""The value a diverged run gets in `per_seed`: the worst one of its measure."""


def per_seed(runs: Iterable[Run], value: Callable[[Run], float], diverged_value: float = math.nan) -> Spread:
    """``value(run)`` for each run (one per seed): median and min–max. A run that diverged gets
    ``diverged_value`` — `HIGHER_IS_BETTER` (−inf) or `LOWER_IS_BETTER` (+inf), the worst value
    of the measure — so it counts in its arm instead of dropping out (NaN: left out)."""
    runs = list(runs)
    diverged = [r.status == "diverged" for r in runs]
    values = [diverged_value if d else value(r) for r, d in zip(runs, diverged)]
    return spread(values, diverged=sum(diverged) if not math.isnan(diverged_value) else 0)


def claim_less(
    claim: str,
    paper: str,
    figure: str,
    smaller: tuple[str, Spread],
    larger: tuple[str, Spread],
    scale: Scale,
    note: str = "",
) -> Claim:
    """The claim "``smaller`` < ``larger``", judged by `verdict_less` on per-seed spreads at
    ``scale`` (a failed ordering is "contradicted" only at an adequate scale)."""
    (name_a, a), (name_b, b) = smaller, larger
    measured = f"{name_a}: {a.fmt()} vs {name_b}: {b.fmt()} (n={a.n}, {b.n})"
    if note:
        measured += f"; {note}"
    verdict = verdict_less(a, b, scale.adequate)
    if not scale.adequate and verdict not in ("holds", "mixed", "not measured"):
        measured += f"; scale: {scale.note}"
    return Claim(claim, paper, measured, verdict, figure)


def claims_markdown(claims: Sequence[Claim]) -> str:
    lines = [
        "| claim | paper | measured: median [min, max] over seeds | verdict | figure |",
        "|---|---|---|---|---|",
    ]
    for c in claims:
        cells = [c.claim, c.paper, c.measured, f"**{c.verdict}**", c.figure]
        lines.append("| " + " | ".join(s.replace("|", "/") for s in cells) + " |")
    return "\n".join(lines) + "\n"
