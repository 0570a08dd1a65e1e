"""The findings page (``results/README.md``) from the committed results folders: every number on it
is read from a folder's ``claims.csv``, ``per_run.csv`` or ``leaderboard.csv``, none typed.

Sections, in the order a newcomer reads them: the scope (`scope`: hardware, model sizes, steps,
seeds, the BLEU reached), one table of the judged claims, decided first (`judged_table`: paper ·
claim · the paper's number · ours · the difference signed toward the claim [95 % CI] · verdict ·
the effect of interest E · detectable planned / achieved · Holm p · Benjamini–Hochberg q over every
judged claim, q > 0.05 marked), a line per paper (`paper_lines`), the claims not judged, collapsed
and grouped by why (`not_judged_section`), and the leaderboard (`normbench.analysis.findings.findings_board`).
Numbers follow `normbench.analysis.wording.present`.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from normbench.analysis.wording.claims_text import (
    REASONS,
    achieved_detectable,
    effect_value,
    not_judged_reason,
    short_verdict,
)
from normbench.analysis.wording.present import (
    arms_text,
    detectable_text,
    effect_text,
    is_ratio,
    num,
    p_text,
    preset_words,
    signed,
    to_float,
)
from normbench.analysis.wording.units import Unit

try:  # engineer "verdicts" adds it to stats (issue 56.6); until then, the same procedure here
    from normbench.analysis.judging.stats import benjamini_hochberg
except ImportError:  # pragma: no cover - depends on the stats module's version

    def benjamini_hochberg(ps: Sequence[float]) -> list[float]:
        """Benjamini–Hochberg adjusted p-values (q), in the input's order."""
        m = len(ps)
        order = sorted(range(m), key=lambda i: ps[i])
        q, running = [1.0] * m, 1.0
        for rank in range(m, 0, -1):
            i = order[rank - 1]
            running = min(running, ps[i] * m / rank)
            q[i] = min(running, 1.0)
        return q


CHECKS = ("passed", "failed")
DECIDED = ("supported", "opposite", "equivalent", "different")
JUDGED = (*DECIDED, "inconclusive")
Q_LEVEL = 0.05

Folder = tuple[Path, list[dict[str, Any]]]
"""A results folder and its claims' rows, annotated (`normbench.analysis.wording.claim_meta.annotate`)."""


def family_p(row: Mapping[str, Any]) -> float:
    """The p-value the claim's Holm family adjusted: an equivalence claim's smaller of TOST's and the
    difference's, else ``p``."""
    if str(row.get("margin") or "") != "" and row.get("relation") == "equivalent":
        return min(to_float(row.get("p_eq")), to_float(row.get("p_diff")))
    return to_float(row.get("p"))


def add_q(rows: Sequence[dict[str, Any]]) -> None:
    """``q``: the Benjamini–Hochberg q of every judged claim of ``rows`` (all presets together)."""
    judged = [r for r in rows if r.get("verdict") in JUDGED and math.isfinite(family_p(r))]
    for row, q in zip(judged, benjamini_hochberg([family_p(r) for r in judged]), strict=True):
        row["q"] = q


def display_names(rows: Sequence[dict[str, Any]]) -> None:
    """``name``: the claim's short name, with its preset where two claims would read the same."""
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["short"]] = counts.get(r["short"], 0) + 1
    for r in rows:
        r["name"] = r["short"] + (f" ({preset_words(r['preset'])})" if counts[r["short"]] > 1 else "")


def is_confirmatory(row: Mapping[str, Any]) -> bool:
    return str(row.get("confirmatory") or "").lower() == "true"


def _cell(text: Any) -> str:
    return " ".join(str(text).split()).replace("|", "/")


def bare(unit: Unit) -> Unit:
    """``unit`` without its suffix: the table's E and detectable columns are in the difference's unit."""
    return Unit(unit.title, unit.scale, "", "", unit.axis)


def detectable_cell(row: Mapping[str, Any]) -> str:
    """``planned / achieved`` (achieved at the family's Holm α where recorded, else at α), in the
    difference's unit (a ratio: ×)."""
    planned = detectable_text(row.get("detectable_planned"), row, bare(row["unit"]))
    achieved = detectable_text(achieved_detectable(row), row, bare(row["unit"]))
    return f"{planned} / {achieved}"


def paper_number(row: Mapping[str, Any]) -> str:
    """The paper's number: the effect of interest where the rules cite the paper for it, else empty."""
    if not row.get("effect_source"):
        return ""
    return effect_text(to_float(row.get("effect_rule")), row, row["unit"])


def judged_line(row: Mapping[str, Any], paper: str, superseded: bool) -> str:
    unit = row["unit"]
    s = signed(row, unit)
    q = to_float(row.get("q"))
    q_text = p_text(q) + (" ⚑" if q > Q_LEVEL else "")
    verdict = short_verdict(row)
    verdict = f"**{row['verdict']}**{verdict[len(row['verdict']) :]}" if row["verdict"] in DECIDED else verdict
    verdict += " *(superseded)*" if superseded else ""
    cells = [paper, row["name"], paper_number(row), arms_text(row, unit, named=False),
             s.text() if s else "—", verdict, effect_text(effect_value(row), row, bare(unit)), detectable_cell(row),
             p_text(row.get("p_holm")), q_text]  # fmt: skip
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


TABLE_HEAD = (
    "| paper | claim | paper's number | ours (as subtracted) | signed difference [95 % CI] | verdict | E (its unit) | "
    "detectable planned / achieved | Holm p | BH q |"
)


def judged_table(folders: Sequence[Folder], titles: Mapping[str, str], superseded: set[str]) -> list[str]:
    """The judged claims, decided ones first, each group in the papers' order."""
    rows = [r for _, rs in folders for r in rs if r.get("verdict") in JUDGED]
    order = {t: i for i, t in enumerate(dict.fromkeys(titles[r["preset"]] for r in rows))}
    rows.sort(key=lambda r: (r["verdict"] not in DECIDED, order[titles[r["preset"]]]))
    lines = [TABLE_HEAD, "|" + "---|" * 10]
    previous = None
    for r in rows:  # the paper named on its first row of each group
        paper = titles[r["preset"]]
        lines.append(judged_line(r, "" if paper == previous else paper, r["preset"] in superseded))
        previous = paper
    return lines


def tally(folders: Sequence[Folder], checks: Sequence[Mapping[str, Any]]) -> str:
    """How many claims got each verdict (the not judged split by why), and the setup checks."""
    rows = [r for _, rs in folders for r in rs]
    judged = [r for r in rows if r.get("verdict") in JUDGED]
    counts = " · ".join(f"{v} **{sum(r['verdict'] == v for r in judged)}**" for v in JUDGED)
    skipped = [r for r in rows if r.get("verdict") not in JUDGED]
    why = ", ".join(f"{REASONS[k]} {n}" for k in REASONS if (n := sum(not_judged_reason(r) == k for r in skipped)))
    passed, failed = (sum(r.get("verdict") == v for r in checks) for v in ("passed", "failed"))
    idle = len(checks) - passed - failed
    return (f"**{len(rows)} claims of {len(folders)} presets: {len(judged)} judged** ({counts}); "
            f"**{len(skipped)} not judged** ({why or 'none'}). Setup checks (not claims): {passed} passed, "
            f"{failed} failed" + (f", {idle} not run at this scale." if idle else "."))  # fmt: skip


def confirmatory_line(folders: Sequence[Folder]) -> str:
    """Which verdicts are confirmatory (``claims.csv``'s ``confirmatory``; missing: exploratory)."""
    judged = [r for _, rs in folders for r in rs if r.get("verdict") in JUDGED]
    yes = sum(is_confirmatory(r) for r in judged)
    if yes == 0:
        return (f"All {len(judged)} judged verdicts come from exploratory attempts (no `claims.csv` marks an "
                "attempt confirmatory): they describe these runs; the confirmatory reruns, on fresh seeds at "
                "the planned n, come later.")  # fmt: skip
    return f"Confirmatory: {yes} of the {len(judged)} judged verdicts; the other {len(judged) - yes} are exploratory."


def planned_line(folders: Sequence[Folder]) -> str:
    """Planned against achieved detectable difference, over the judged claims that give both."""
    both = [(to_float(r.get("detectable_planned")), to_float(r.get("detectable_adj")))
            for _, rs in folders for r in rs if r.get("verdict") in JUDGED]  # fmt: skip
    both = [(p, a) for p, a in both if math.isfinite(p) and math.isfinite(a) and p > 0]
    if not both:
        return ("Detectable difference: no `claims.csv` records a planned one yet; the table gives the achieved "
                "one (80 % power; at the family's Holm α where recorded, else at α).")  # fmt: skip
    within = sum(a <= 1.25 * p for p, a in both)
    return (f"Detectable difference, achieved against planned: within 1.25× of the plan for {within} of the "
            f"{len(both)} judged claims that record both.")  # fmt: skip


def paper_lines(folders: Sequence[Folder], titles: Mapping[str, str]) -> list[str]:
    """One line per paper: its presets, what its judged claims found, how many were not judged."""
    papers: dict[str, list[Folder]] = {}
    for folder, rows in folders:
        papers.setdefault(titles[folder.name], []).append((folder, rows))
    lines = []
    for title, mine in papers.items():
        rows = [r for _, rs in mine for r in rs]
        links = ", ".join(f"[{f.name}]({f.name}/README.md)" for f, _ in mine)
        found = [f"{v} {n}" for v in JUDGED if (n := sum(r.get("verdict") == v for r in rows))]
        skipped = sum(r.get("verdict") not in JUDGED for r in rows)
        line = f"- **{title}** ({links}): {', '.join(found) or 'nothing judged'}; {skipped} not judged."
        lines.append(line if len(line) <= 390 else line[:389] + "…")
    return lines


def _mean(values: Sequence[float], ratio: bool) -> float:
    finite = [v for v in values if math.isfinite(v)]
    if not finite or len(finite) < len(values) or (ratio and min(finite) <= 0):
        return math.nan
    return math.exp(sum(math.log(v) for v in finite) / len(finite)) if ratio else sum(finite) / len(finite)


def add_observed(folder: Path, rows: Sequence[dict[str, Any]]) -> None:
    """``a_obs`` / ``b_obs`` on each claim without a verdict: its arms' means (a ratio claim's:
    geometric) over the runs of the folder's ``per_run.csv``, where that table and the rules still
    read them (`normbench.analysis.judging.claims.claim_values`); nothing where they do not."""
    path = folder / "per_run.csv"
    skipped = [r for r in rows if r.get("verdict") not in JUDGED]
    if not skipped or not path.is_file():
        return
    from normbench.analysis.judging.claims import claim_values
    from normbench.analysis.judging.per_run import read_per_run
    from normbench.base.errors import ConfigError

    try:
        values = claim_values(folder.name, read_per_run(path, folder.name))
    except (ConfigError, KeyError, ValueError, TypeError):
        return
    for r in skipped:
        if r.get("id") in values:
            a, b = values[r["id"]]
            r["a_obs"], r["b_obs"] = _mean(a, is_ratio(r)), _mean(b, is_ratio(r))


def observed_gap(row: Mapping[str, Any], text: bool = True) -> Any:
    """A not-judged claim's observed gap (signed toward the claim) where it reaches E: its text
    `` (observed a − b: +1.3 pts)`` (``text=False``: the `Signed`, or None)."""
    a, b = (to_float(row.get(f"{s}_centre") or row.get(f"{s}_obs")) for s in "ab")
    effect = abs(effect_value(row))
    if not (math.isfinite(a) and math.isfinite(b) and math.isfinite(effect) and effect > 0):
        return "" if text else None
    ratio = is_ratio(row)
    if ratio and (a <= 0 or b <= 0):
        return "" if text else None
    s = signed({**row, "estimate": a / b if ratio else a - b, "lo": "", "hi": ""}, row["unit"])
    if s is None:
        return "" if text else None
    large = (
        (max(s.estimate, 1 / s.estimate) >= max(effect, 1 / effect))
        if ratio
        else (abs(s.estimate) >= effect * row["unit"].scale)
    )
    if not large:
        return "" if text else None
    return f" (observed {s.arms}: {s.value(s.estimate, lead=True)})" if text else s


def _gap_range(rows: Sequence[Mapping[str, Any]]) -> str:
    """The span of the rows' large observed gaps (`observed_gap`), in one unit: `` (observed −22 to −9.8 pts)``."""
    gaps = [g for r in rows if (g := observed_gap(r, text=False))]
    if not gaps or len({(s.ratio, s.unit.diff) for s in gaps}) > 1:
        return ""
    lo, hi = min(s.estimate for s in gaps), max(s.estimate for s in gaps)
    s = gaps[0]
    span = s.value(lo, lead=True) + (f" to {s.value(hi, lead=True)}" if s.value(lo) != s.value(hi) else "")
    return f" (observed, {len(gaps)} of them: {span})"


def _names(rows: Sequence[Mapping[str, Any]]) -> str:
    """The claims' names with their large observed gaps, or, past 8, counted by the part before ':'
    (a leaderboard cell) with the span of those gaps."""
    if len(rows) <= 8:
        return ", ".join(r["name"] + observed_gap(r) for r in rows)
    cells: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        cells.setdefault(r["name"].split(":")[0], []).append(r)
    return ", ".join(f"{c} ×{len(mine)}{_gap_range(mine)}" for c, mine in cells.items())


def not_judged_section(folders: Sequence[Folder], in_folder: bool = False) -> list[str]:
    """The claims without a verdict, collapsed, in groups by why, each counted, per preset (``in_folder``:
    for the preset's own README, its ``claims.md`` linked from there)."""
    rows = [r for _, rs in folders for r in rs if r.get("verdict") not in JUDGED]
    if not rows:
        return []
    lines = ["<details>", f"<summary>The {len(rows)} claims not judged, by why (click)</summary>", ""]
    for key, label in REASONS.items():
        mine = [r for r in rows if not_judged_reason(r) == key]
        if not mine:
            continue
        lines += [f"**{label[0].upper() + label[1:]}: {len(mine)}**", ""]
        for preset in dict.fromkeys(r["preset"] for r in mine):
            link = "claims.md" if in_folder else f"{preset}/claims.md"
            lines.append(f"- [{preset}]({link}): {_names([r for r in mine if r['preset'] == preset])}")
        lines.append("")
    return [*lines, "</details>"]


def column_values(path: Path, column: str) -> list[float]:
    if not path.is_file():
        return []
    with open(path, newline="") as f:
        return [v for r in csv.DictReader(f) if math.isfinite(v := to_float(r.get(column)))]


def span(values: Sequence[float], unit: str = "", scale: float = 1.0) -> str:
    lo, hi = min(values) * scale, max(values) * scale
    return f"{num(lo, 2)}{unit}" if num(lo, 2) == num(hi, 2) else f"{num(lo, 2)}–{num(hi, 2)}{unit}"


def scope(results: Path, folders: Sequence[Folder]) -> str:
    """The scope paragraph, every number from the folders' ``per_run.csv`` and ``claims.csv``."""
    runs = [results / f.name / "per_run.csv" for f, _ in folders]
    n_runs = sum(len(column_values(p, "seed")) for p in runs)
    threads = sorted({int(v) for p in runs for v in column_values(p, "final:num_threads")})
    image = [p for p in runs if column_values(p, "final:val/acc")]
    text = [p for p in runs if column_values(p, "final:test/bleu")]
    params_i = [v for p in image for v in column_values(p, "final:num_params")]
    params_t = [v for p in text for v in column_values(p, "final:num_params")]
    steps_i = [v for p in image for v in column_values(p, "final:step")]
    steps_t = [v for p in text for v in column_values(p, "final:step")]
    bleu = [v for p in text for v in column_values(p, "final:test/bleu")]
    acc = [v for p in image for v in column_values(p, "final:val/acc")]
    n = [int(v) for _, rs in folders for r in rs if r.get("verdict") in JUDGED
         for v in (to_float(r.get("a_n")), to_float(r.get("b_n"))) if math.isfinite(v)]  # fmt: skip
    where = f"{n_runs} runs of {len(folders)} presets on CPU"
    if threads:
        count = "–".join(str(t) for t in sorted({threads[0], threads[-1]}))
        where += f" ({count} thread{'s' if threads[-1] > 1 else ''} per run)"
    parts = [f"**Scope.** {where}"]
    if params_i:
        parts.append(f"image models (ResNet, VGG) of {span(params_i)} parameters on the CIFAR-10 subset, "
                     f"{span(steps_i)} steps, final validation accuracy {span(acc, ' %', 100)}")  # fmt: skip
    if params_t:
        parts.append(f"Transformers of {span(params_t)} parameters on the Multi30k de-en subset (in place of "
                     f"IWSLT14), {span(steps_t)} steps, reaching only BLEU {span(bleu)} on its test set")  # fmt: skip
    if n:
        parts.append(f"{min(n)}–{max(n)} seeds per judged arm")
    lines = [f"{a}; {b}" for a, b in zip(parts[0::2], parts[1::2], strict=False)]
    lines += [parts[-1]] if len(parts) % 2 else []  # the parts two to a line: the table starts sooner
    return (";\n".join(lines) + ".\n*At this scale* means these models, steps and seeds: far smaller than the papers', "
            "so a verdict here describes these runs; a claim whose arms these presets do not run is "
            "left to the full preset (\"not run at this scale\").")  # fmt: skip
