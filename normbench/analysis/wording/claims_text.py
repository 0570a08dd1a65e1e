"""``claims.md``: a folder's ``claims.csv`` as people read it, with the conventions of
`normbench.analysis.wording.present`: every difference signed toward its claim (+ is the claim's direction,
the arms named in the order subtracted), in the measure's natural unit, 2–3 significant digits, no
e-notation; the setup checks summarised (the range over their runs, in the same units).

`not_judged_reason` sorts a claim that got no verdict into the findings page's groups: not run at
this scale, an arm that did not learn, a failed check, too few seeds, seeds reused (the ``reason``
column of ``claims.csv``; for a file written before that column, read from its ``measured`` note).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from normbench.analysis.wording.claim_meta import annotate, check_units, claim_meta
from normbench.analysis.wording.present import (
    arms_text,
    detectable_text,
    effect_text,
    num,
    p_text,
    signed,
    to_float,
)
from normbench.analysis.wording.units import Unit

NOT_JUDGED = "not judged"
REASONS = {
    "not_run": "not run at this scale",
    "full_scale_only": "left to the full preset by the rules (underpowered here)",
    "did_not_learn": "an arm did not learn",
    "check_failed": "a setup check failed",
    "too_few_seeds": "too few seeds",
    "seeds_reused": "seeds reused from an earlier attempt",
    "other": "other reasons",
}
"""The not-judged groups, keyed as ``claims.csv``'s ``reason`` column names them."""


def not_judged_reason(row: Mapping[str, Any]) -> str:
    """A `REASONS` key for a claim without a verdict (``reason``, else read from ``measured``)."""
    given = str(row.get("reason") or "")
    if given in REASONS:
        return given
    note = " ".join(str(row.get("measured") or "").split())
    for pattern, key in ((r"^not run in", "not_run"), (r"not judged at this scale", "full_scale_only"),
                         (r"did not learn", "did_not_learn"),
                         (r"setup check failed", "check_failed"), (r"^n = \d+ and \d+", "too_few_seeds"),
                         (r"seeds? .*(reused|overlap)", "seeds_reused")):  # fmt: skip
        if re.search(pattern, note):
            return key
    return "other"


def needs_n(row: Mapping[str, Any]) -> str:
    """``n ≈ 72`` when the note says how many seeds the claim would need; else empty."""
    m = re.search(r"needs (n ≈ \d+)", str(row.get("measured") or ""))
    return m[1] if m else ""


def short_reason(row: Mapping[str, Any]) -> str:
    """Why a claim got no verdict, in a few words: ``needs n ≈ 64``, ``not run here``, ``check failed``."""
    key = not_judged_reason(row)
    if key == "full_scale_only" and needs_n(row):
        return f"needs {needs_n(row)}"
    return {"not_run": "not run here", "full_scale_only": "left to the full preset"}.get(key, REASONS[key])


SHORT_QUALIFIERS = {
    "smaller than the effect of interest": "< E",
    "could not detect the effect of interest": "E not detectable",
    "could not show equivalence at this n": "n too small for equivalence",
}
"""The verdicts' qualifiers (``claims.csv``'s ``qualifier``) as the findings page's tables write them."""


def short_verdict(row: Mapping[str, Any]) -> str:
    """The verdict with its qualifier shortened (`SHORT_QUALIFIERS`): ``inconclusive, E not detectable``."""
    qualifier = " ".join(str(row.get("qualifier") or "").split())
    return str(row.get("verdict")) + (f", {SHORT_QUALIFIERS.get(qualifier, qualifier)}" if qualifier else "")


def verdict_text(row: Mapping[str, Any]) -> str:
    """The verdict with its qualifier (``supported, smaller than the effect of interest``); a claim
    not judged: why."""
    verdict = str(row.get("verdict") or "")
    if verdict == NOT_JUDGED:
        why = " ".join(str(row.get("qualifier") or "").split()) or REASONS[not_judged_reason(row)]
        extra = needs_n(row)
        return f"not judged: {why}" + (f"; needs {extra}" if extra else "")
    qualifier = str(row.get("qualifier") or "").strip()
    return f"{verdict}, {qualifier}" if qualifier else verdict


def effect_value(row: Mapping[str, Any]) -> float:
    """The effect of interest E (stored units): ``claims.csv``'s ``effect``, else the rules'."""
    v = to_float(row.get("effect"))
    return v if not math.isnan(v) else to_float(row.get("effect_rule"))


def achieved_detectable(row: Mapping[str, Any]) -> Any:
    """The difference the design could detect: at the family's Holm α where recorded
    (``detectable_adj``), else at α (``detectable``); stored units."""
    return row.get("detectable_adj") or row.get("detectable")


def difference_cell(row: Mapping[str, Any]) -> str:
    s = signed(row, row["unit"])
    return s.text() if s else "—"


TEST_NAMES = {"welch": "Welch t", "welch_log": "Welch t on logs", "paired": "paired t", "rank": "Mann–Whitney"}


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "/")


def claim_line(row: Mapping[str, Any]) -> str:
    """One claim's table row in ``claims.md``."""
    unit: Unit = row["unit"]
    detect = detectable_text(achieved_detectable(row), row, unit)
    cells = [row["short"], row.get("claim", ""), row.get("paper", ""), arms_text(row, unit), difference_cell(row),
             f"{TEST_NAMES.get(str(row.get('test')), row.get('test') or '—')}; p {p_text(row.get('p'))}; "
             f"Holm p {p_text(row.get('p_holm'))}",
             f"{effect_text(effect_value(row), row, unit)} · {detect}", f"**{verdict_text(row)}**"]  # fmt: skip
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


CHECK_NOTE = re.compile(r"seed=\d+ (-?[\d.]+(?:e[-+]?\d+)?|-?inf|nan)")
CHECK_BOUND = re.compile(r"passes when every run's is (below|above) (-?[\d.]+(?:e[-+]?\d+)?)")


def check_line(row: Mapping[str, Any], unit: Unit) -> str:
    """A setup check in one row: its text, the result, its runs' range and bound in natural units."""
    note = str(row.get("measured") or "")
    values = [to_float(v) for v in CHECK_NOTE.findall(note)]
    bound = CHECK_BOUND.search(note)
    if values:
        lo, hi = min(values), max(values)
        spread = num(lo * unit.scale) + (f"–{num(hi * unit.scale)}" if lo != hi else "") + unit.level
        measured = f"{unit.title}: {spread} over {len(values)} runs"
        if bound:
            measured += f" (passes when every run's is {bound[1]} {num(to_float(bound[2]) * unit.scale)}{unit.level})"
    else:
        measured = re.sub(r"\d+\.\d+e[-+]?\d+", lambda m: num(float(m[0])), note) or "no runs"
    return "| " + " | ".join(_cell(c) for c in (row.get("id", ""), row.get("claim", ""), measured,
                                                 f"**{row.get('verdict')}**")) + " |"  # fmt: skip


CONVENTION = (
    "Every difference is signed toward its claim: + (a ratio above 1) is the claim's direction, the arms "
    "named in the order subtracted (a claim that a is lower reads b − a). Accuracies and errors in percentage "
    "points, BLEU in BLEU, losses in nats; 95 % intervals; Holm p within the preset. E: the effect of interest "
    "(an equivalence claim: its margin); detectable: the difference the seeds could detect with 80 % power."
)


def runs_counted(claims: Sequence[Mapping[str, Any]]) -> str:
    """Which runs the claims count (issue 60: never pooled silently): a run that ended neither
    finished nor diverged is left out, named in a warning when the claims are judged; a diverged run
    counts in its arm at the measure's worst value; the claims here that hold one, from claims.csv."""
    def count(r: Mapping[str, Any], side: str) -> int:
        text = str(r.get(f"{side}_diverged") or "0")
        return int(float(text)) if text.replace(".", "", 1).isdigit() else 0

    held = [f"{r.get('short') or r.get('id')} ({count(r, 'a')} + {count(r, 'b')})" for r in claims
            if count(r, "a") + count(r, "b")]  # fmt: skip
    where = "; diverged runs in: " + ", ".join(held) if held else "; no judged arm here holds a diverged run"
    return ("Runs counted: a run that ended neither finished nor diverged (interrupted, failed, killed) is left out, "
            "named in a warning when the claims are judged; a diverged run counts in its arm at the measure's worst "
            f"value (a rank test then){where}.")


def claims_markdown(preset: str, rows: Sequence[Mapping[str, Any]], pilot: bool = False) -> str:
    """The text of ``claims.md`` from ``claims.csv``'s rows (``pilot``: a pilot's, which sizes a plan
    and judges nothing)."""
    hashes = {str(r.get("rules_hash") or "") for r in rows} - {""}
    judged_hash = next(iter(hashes)) if len(hashes) == 1 else None
    title, _ = claim_meta(preset, judged_hash)
    every = annotate(rows, preset)
    claims = [r for r in every if not r["check"]]
    what = "pilot runs: they size the confirmatory run and judge nothing" if pilot else "claims"
    lines = [f"# {title} ({preset}): {what}", "", CONVENTION, "",
             "| claim | in the paper's words | the paper | ours | signed difference [95 % CI] | test, p | "
             "E · detectable | verdict |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    lines += [claim_line(r) for r in claims]
    lines += ["", runs_counted(claims)]
    checks = [r for r in every if r["check"]]
    if checks:
        units = check_units(preset, judged_hash)
        lines += ["", "Setup checks (conditions on the setup, fixed before the runs; not claims):", "",
                  "| check | condition | measured | result |", "|---|---|---|---|"]  # fmt: skip
        lines += [check_line(r, units.get(str(r.get("id")), Unit("value"))) for r in checks]
    return "\n".join(lines) + "\n"


def write_claims_markdown(preset: str, rows: Sequence[Mapping[str, Any]], out: Path, pilot: bool | None = None) -> Path:
    """``<out>/claims.md`` (`claims_markdown`; ``pilot`` default: the folder is named ``pilot``); its path."""
    path = Path(out) / "claims.md"
    path.write_text(claims_markdown(preset, rows, pilot=Path(out).name == "pilot" if pilot is None else pilot))
    return path
