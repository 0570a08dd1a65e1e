"""``claims.csv`` and ``claims.md``: the judged claims (`normbench.analysis.judging.claims.Claim`) as a flat
table, every number beside the one-line ``measured`` text. `CSV_FIELDS` grows at its end only
(issue 56 appended: ``effect``, ``detectable_adj``, ``detectable_planned``, ``qualifier``,
``reason``, ``p_min_effect``, ``confirmatory``; see `normbench.analysis.judging.verdicts`).
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from normbench.analysis.judging.claims import Claim

CSV_FIELDS = (
    "id", "short", "figure", "claim", "paper", "a", "a_centre", "a_lo", "a_hi", "a_n", "a_diverged", "b", "b_centre",
    "b_lo", "b_hi", "b_n", "b_diverged", "relation", "margin", "test", "ratio", "estimate", "lo", "hi", "p", "p_holm",
    "effect_size", "detectable", "p_eq", "p_diff", "verdict", "scale", "measured", "rules_hash",
    "effect", "detectable_adj", "detectable_planned", "qualifier", "reason", "p_min_effect", "confirmatory",
)  # fmt: skip


def csv_row(c: Claim) -> dict[str, Any]:
    """The flat row of ``claims.csv``: every number beside the one-line ``measured`` text."""
    row: dict[str, Any] = dict.fromkeys(CSV_FIELDS, "")
    row.update(id=c.id, short=c.short, figure=c.figure, claim=c.claim, paper=c.paper, a=c.a_label, b=c.b_label,
               relation=c.relation, margin="" if c.margin is None else c.margin, test=c.test, verdict=c.verdict,
               scale=c.scale, measured=c.measured, rules_hash=c.rules_hash, qualifier=c.qualifier, reason=c.reason,
               effect="" if c.effect is None else c.effect, detectable_adj=c.detectable_adj,
               detectable_planned="" if c.detectable_planned is None else c.detectable_planned,
               p_min_effect=c.p_min_effect, confirmatory=c.confirmatory)  # fmt: skip
    for side, s in (("a", c.a), ("b", c.b)):
        if s is not None:
            row.update({f"{side}_centre": s.centre, f"{side}_lo": s.lo, f"{side}_hi": s.hi, f"{side}_n": s.n,
                        f"{side}_diverged": s.diverged})  # fmt: skip
    if c.comparison is not None:
        k = c.comparison
        row.update(ratio=k.ratio, estimate=k.estimate, lo=k.lo, hi=k.hi, p=k.p, p_holm=c.p_holm,
                   effect_size=k.effect_size, detectable=k.detectable, p_eq=k.p_eq, p_diff=k.p_diff)  # fmt: skip
    return row


def claims_markdown(claims: Sequence[Claim]) -> str:
    lines = [
        "| claim | paper | measured (arm: mean [95 % interval]; difference or ratio [95 % interval]; test) "
        "| verdict | scale | figure |",
        "|---|---|---|---|---|---|",
    ]
    for c in claims:
        cells = [c.claim, c.paper, c.measured, f"**{c.verdict}**", c.scale, c.figure]
        lines.append("| " + " | ".join(s.replace("|", "/").replace("\n", " ") for s in cells) + " |")
    return "\n".join(lines) + "\n"


def _csv_cell(v: Any) -> Any:
    """Floats (numpy's too) with ``repr``, so that they read back exactly."""
    return repr(float(v)) if isinstance(v, (float, np.floating)) else v


def write_claims(claims: Sequence[Claim], out_dir: str | Path) -> list[Path]:
    """``claims.csv`` (`CSV_FIELDS`, one row per claim in the given order) and ``claims.md`` into
    ``out_dir``; returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "claims.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for c in claims:
            writer.writerow({k: _csv_cell(v) for k, v in csv_row(c).items()})
    (out / "claims.md").write_text(claims_markdown(claims))
    return [out / "claims.csv", out / "claims.md"]
