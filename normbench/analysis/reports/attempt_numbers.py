"""The numbers of a HISTORY.md entry, written from the folder's files (issue 56, item 8: no number
typed by hand).

`claim_lines`: each claim as ``claims.md`` states it (`normbench.analysis.wording.claims_text`):
the verdict, the difference signed toward the claim with its 95 % interval, the effect of interest
and what the design could detect. `learning_lines`: each learning bound of the rules the folder was
judged under, per setting of ``per_run.csv`` that measured it: the runs' range and how many pass.
``normbench-reports history`` puts both into the entry, so the line a person writes ("what changed
and why") needs no number.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from normbench.analysis.judging.evidence import selector_columns
from normbench.analysis.judging.per_run import CHECK
from normbench.analysis.judging.rules_schema import CheckRule
from normbench.analysis.wording.claim_meta import annotate, rules_as_judged
from normbench.analysis.wording.claims_text import achieved_detectable, difference_cell, effect_value, verdict_text
from normbench.analysis.wording.present import arm_name, detectable_text, effect_text, num, to_float

CLAIMS_LINE = "- claims (claims.csv):"
BOUNDS_LINE = "- learning bounds (per_run.csv):"


def claim_lines(preset: str, rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One ``  - <claim>: <verdict>; <signed difference> (E …, detectable …)`` line per claim of
    ``claims.csv`` (setup checks are in the tally)."""
    lines = []
    for row in (r for r in annotate(rows, preset) if not r["check"]):
        unit = row["unit"]
        effect = effect_text(effect_value(row), row, unit)
        detect = detectable_text(achieved_detectable(row), row, unit)
        diff = difference_cell(row)
        numbers = "" if diff == "—" else f"; {diff} (E {effect}, detectable {detect})"
        lines.append(f"  - {row['short']}: {verdict_text(row)}{numbers}")
    return lines


def learning_lines(preset: str, judged_hash: str | None, table: Path) -> list[str]:
    """One line per learning bound the table measured: per setting, the runs' range and how many
    of them pass the bound."""
    rules = rules_as_judged(preset, judged_hash)
    if rules is None or not table.is_file():
        return []
    with open(table, newline="") as f:
        reader = csv.DictReader(f)
        rows, selectors = list(reader), selector_columns(reader.fieldnames or [])
    lines = []
    for bound in rules.learning:
        measured = [r for r in rows if not math.isnan(to_float(r.get(CHECK + bound.id)))]
        if measured:
            lines.append(f"  - {bound.id} ({bound.bound}): " + "; ".join(_settings(bound, measured, selectors)))
    return lines


def _settings(bound: CheckRule, rows: Sequence[Mapping[str, Any]], selectors: Sequence[str]) -> list[str]:
    """Per setting (the selector columns whose values differ among ``rows``): the finite values'
    range, how many pass, and how many are not finite (a diverged run's worst value)."""
    varying = [c for c in selectors if len({r.get(c) for r in rows}) > 1]
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(_setting(r, varying), []).append(to_float(r[CHECK + bound.id]))
    out = []
    for name, values in sorted(groups.items()):
        finite = [v for v in values if math.isfinite(v)]
        spread = f"{num(min(finite))}-{num(max(finite))}" if finite else "no finite value"
        diverged = len(values) - len(finite)
        out.append(f"{name} {spread} ({sum(bound.passes(v) for v in values)} of {len(values)} pass"
                   + (f"; {diverged} not finite: diverged" if diverged else "") + ")")  # fmt: skip
    return out


def _setting(row: Mapping[str, Any], varying: Sequence[str]) -> str:
    """A setting in words: a norm by its paper's name, any other key as ``<last part> <value>``."""
    words = [arm_name(str(row[c])) if c.endswith(".name") else f"{c.rsplit('.', 1)[-1]} {row[c]}"
             for c in varying if row.get(c) not in (None, "")]  # fmt: skip
    return ", ".join(words) or "every run"
