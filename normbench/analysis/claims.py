"""A paper's qualitative claim, checked against per-seed numbers, and the table of them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from normbench.analysis.runs import Run
from normbench.analysis.stats import Spread, spread, verdict_less


@dataclass
class Claim:
    """One qualitative finding of a paper, what we measured, and whether it holds here."""

    claim: str
    paper: str
    measured: str
    verdict: str
    figure: str = ""


def per_seed(runs: Iterable[Run], value: Callable[[Run], float]) -> Spread:
    """``value(run)`` for each run (one per seed): median and min–max."""
    return spread(value(r) for r in runs)


def claim_less(
    claim: str,
    paper: str,
    figure: str,
    smaller: tuple[str, Spread],
    larger: tuple[str, Spread],
    note: str = "",
) -> Claim:
    """The claim "``smaller`` < ``larger``", judged by `verdict_less` on per-seed spreads."""
    (name_a, a), (name_b, b) = smaller, larger
    measured = f"{name_a}: {a.fmt()} vs {name_b}: {b.fmt()} (n={a.n}, {b.n})"
    if note:
        measured += f"; {note}"
    return Claim(claim, paper, measured, verdict_less(a, b), figure)


def claims_markdown(claims: Sequence[Claim]) -> str:
    lines = [
        "| claim | paper | measured: median [min, max] over seeds | verdict | figure |",
        "|---|---|---|---|---|",
    ]
    for c in claims:
        cells = [c.claim, c.paper, c.measured, f"**{c.verdict}**", c.figure]
        lines.append("| " + " | ".join(s.replace("|", "/") for s in cells) + " |")
    return "\n".join(lines) + "\n"
