"""The leaderboard's table on the findings page, from its folder's ``leaderboard.csv`` (each norm's
mean with its 95 % interval, per cell) and ``claims.csv`` (each norm judged against the cell's
reference: its verdict and the difference, norm − reference, with its interval).

No norm is bold, and none is called "highest" unless its interval lies wholly above every other
norm's in the cell (`separated_top`): an overlap is no ranking.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from normbench.analysis.leaderboard.leaderboard_labels import dataset_label, model_label
from normbench.analysis.wording.claims_text import short_reason, short_verdict
from normbench.analysis.wording.present import level_text, p_text, signed, to_float
from normbench.analysis.wording.units import Unit, unit_of


def _relabel(model: str, dataset: str) -> tuple[str, str]:
    """A cell written before the labels said what ran (``resnet20 (depth 8)``) in today's words."""
    m = re.fullmatch(r"(\S+) \(depth (\d+)\)", model)
    d = re.fullmatch(r"(\S+) \((\S+)\)", dataset)
    name = model_label(m[1], int(m[2])) if m else model
    return (MODEL_WORDS.get(name, name), dataset_label(d[1], d[2]) if d else dataset)


MODEL_WORDS = {"transformer_tiny": "Transformer (tiny)"}
"""A cell's model as people name it, where ``leaderboard.csv`` keeps the config's name."""


def separated_top(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The norm whose interval lies wholly above every other norm's in the cell; None when none does."""
    ranked = sorted(rows, key=lambda r: -to_float(r.get("mean")))
    if len(ranked) < 2:
        return None
    best = ranked[0]
    clear = all(to_float(best.get("ci_lo")) > to_float(r.get("ci_hi")) for r in ranked[1:])
    return best if clear else None


def _claim_for(claims: Sequence[Mapping[str, Any]], norm: str, reference: str) -> Mapping[str, Any] | None:
    a, b = norm.split(" (")[0], reference.split(" (")[0]
    return next((r for r in claims if (r.get("a"), r.get("b")) == (a, b)), None)


def _versus(claims: Sequence[Mapping[str, Any]], row: Mapping[str, Any], reference: str) -> str:
    """The norm against the reference: the rules' verdict and the signed difference, or ``reference``."""
    if row["norm"] == reference:
        return "reference"
    claim = _claim_for(claims, row["norm"], reference)
    if claim is None:
        return str(row.get("verdict") or "—")
    if claim.get("verdict") == "not judged":
        return f"not judged ({short_reason(claim)})"
    s = signed(claim, claim["unit"])
    q = to_float(claim.get("q"))
    return short_verdict(claim) + (f", {s.text()}" if s else "") + (
        f", q {p_text(q)}{' ⚑' if q > 0.05 else ''}" if q == q else "")  # fmt: skip


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return [r for r in csv.DictReader(f) if r.get("n") not in ("", "0", None)]


def board_section(folder: Path, claims: Sequence[Mapping[str, Any]], heading: str | None = None) -> list[str]:
    """The leaderboard's table (per cell, norms by mean; no bold) and, per cell, whether a norm leads;
    under ``heading`` (default: one that links to the folder, for the findings page)."""
    if not (folder / "leaderboard.csv").is_file():
        return []
    rows = read_rows(folder / "leaderboard.csv")
    lines = [
        heading or f"## Norm leaderboard ([{folder.name}]({folder.name}/README.md))",
        "",
        "| cell | norm | seeds | score [95 % CI] | against the cell's reference (above: the difference) |",
        "|---|---|---|---|---|",
    ]
    notes = []
    for model, dataset in dict.fromkeys((r["model"], r["dataset"]) for r in rows):
        mine = [r for r in rows if (r["model"], r["dataset"]) == (model, dataset)]
        mine.sort(key=lambda r: -to_float(r["mean"]))
        reference = next((r["norm"] for r in mine if r.get("verdict") == "reference"), "")
        unit = unit_of({"name": "final", "key": mine[0].get("metric")})
        cell = " on ".join(_relabel(model, dataset))
        for i, r in enumerate(mine):
            mean, lo, hi = (level_text(r[k], Unit(unit.title, unit.scale)) for k in ("mean", "ci_lo", "ci_hi"))
            score = f"{mean} [{lo}, {hi}]{unit.level}"
            versus = _versus(claims, r, reference)
            lines.append(f"| {'' if i else cell} | {r['norm']} | {r['n']} | {score} | {versus} |")
        top = separated_top(mine)
        notes.append(f"- {cell} ({unit.title}): " + (
            f"{top['norm']} highest, its interval above every other norm's." if top else
            "no norm's interval lies above all the others': no ranking."))  # fmt: skip
    return [*lines, "", *notes]
