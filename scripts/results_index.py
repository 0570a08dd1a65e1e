"""Rebuild ``results/README.md`` from what the reproduction runs left in ``results/``, and check
that every verdict there was reached under its preset's current rules.

Each ``results/<preset>/`` holds ``claims.csv`` (written by ``normbench-figures``: every claim's
per-arm numbers, the difference with its interval, the test, p-values, verdict, scale and the
hash of the rules it was judged under) and ``RUN.txt`` (written by ``scripts/reproduce_cpu.sh``:
commit, rules hash, commands, wall clock). This script lists the presets and gathers every claim
into one table, so the index never disagrees with the folders. A folder whose ``claims.csv``
predates the rules (no hash) is listed as awaiting its rerun, its old verdicts left out.

    python scripts/results_index.py            # writes results/README.md
    python scripts/results_index.py --check    # exit 1 if README.md is stale, a rule changed after its runs,
                                               # or a folder's rules hash has no entry in its HISTORY.md
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "results"
sys.path.insert(0, str(RESULTS.parent))

from normbench.analysis.forest import annotate, interval_text, is_ratio, rules_meta, write_forest  # noqa: E402
from normbench.analysis.leaderboard_labels import dataset_label, model_label  # noqa: E402
from normbench.analysis.stats import (  # noqa: E402
    DIFFERENT,
    EQUIVALENT,
    INCONCLUSIVE,
    NOT_JUDGED,
    OPPOSITE,
    SUPPORTED,
)
from normbench.rules import rules_hash  # noqa: E402

INTRO = """# What normbench found, at CPU scale

Papers' claims about normalization layers, rerun on a 2-core CPU on real data (the CIFAR-10 subset
and, in place of IWSLT14, the Multi30k de-en subset) and judged by rules fixed before the runs:
each claim's difference between two arms with its 95 % interval, Holm-adjusted per preset
([how a claim is judged](#how-a-claim-is-judged)). Every folder's README maps the paper's setting
onto ours; its `claims.md` gives each claim in the paper's words with every number measured.
"""

METHOD = """## How a claim is judged

Each preset's claims are data, fixed before its runs: `normbench/rules/<preset>.yaml` names the
measure, the two arms, the relation (a direction, or equality within a declared margin), the test
and the seeds needed (5 per arm). Its hash is recorded by every run and beside every verdict;
`python scripts/results_index.py --check` (run by the tests) fails when a folder was judged under
rules that have changed since: a changed rule means a rerun. The statistics
(`normbench/analysis/stats.py`): per arm the mean and its 95 % t-interval (the geometric mean for a
ratio test; the median and range for a rank test); between arms the difference (or ratio) with
its 95 % interval — Welch's t-interval, on logarithms for ratios, or the Hodges–Lehmann shift with
its exact Mann–Whitney interval where a run diverged (it counts with the worst value); the
preset's claims as one family, Holm-adjusted. Verdicts:

- directional claims: **supported** (Holm-adjusted p < 0.05 and the difference on the claimed
  side), **opposite** (the same on the other side), **inconclusive** (neither);
- equivalence claims (within ±margin, two one-sided tests): **equivalent**, **different** (the
  difference outside the margin), **inconclusive**;
- **not judged**: fewer seeds than the rules ask, or an arm the preset does not run.

The scale (the paper's, reduced and by how much, or other hardware) is its own column: it never
turns a verdict into another. The data: the CIFAR-10 subset (`../shared/data/cifar10-subset`,
10,000 / 2,000 images) and, in place of IWSLT14, the Multi30k de-en subset
(`../shared/data/de-en-subset`) with `transformer_tiny`. Each folder has the figure(s) (PNG, PDF),
the CSV of every plotted number (median over seeds, min, max, n), `forest.png` (its claims'
intervals), `claims.md` / `claims.csv`, `runs.csv`, `RUN.txt` (commit, rules hash, commands, wall
clock) and a README. Rebuild with `bash scripts/reproduce_cpu.sh` and this page with
`python scripts/results_index.py`.
"""

TALLY_ORDER = (SUPPORTED, OPPOSITE, EQUIVALENT, DIFFERENT, INCONCLUSIVE, NOT_JUDGED)
DECIDED = (SUPPORTED, OPPOSITE, EQUIVALENT, DIFFERENT)
CHECKS = ("passed", "failed")
LEADERBOARD = "leaderboard_cpu"
MAX_CELL = 120


HISTORY = "HISTORY.md"
HISTORY_HEADING = r"^## Attempt (\d+) — rules (\S+), run at (\S+) \(([^)]*)\)$"
"""An entry's heading in a folder's HISTORY.md (written by ``scripts/results_history.py``)."""
PLANNED_HEADING = r"^## Attempt (\d+) — rules (\S+), planned before its runs$"
"""A planned attempt's heading: new rules declared, with what changed and why, before any run."""


def planned_hashes(folder: Path) -> dict[str, int]:
    """The rules hashes the folder's HISTORY.md declares as planned attempts, with their numbers."""
    path = folder / HISTORY
    text = path.read_text() if path.exists() else ""
    return {h: int(n) for n, h in re.findall(PLANNED_HEADING, text, re.M)}  # an amended plan: its number again


def history_problems(results: Path = RESULTS) -> list[str]:
    """One line per folder whose current ``claims.csv`` rules hash has no entry in its HISTORY.md."""
    problems = []
    for folder in sorted(p for p in results.iterdir() if (p / "claims.csv").exists()):
        judged = judged_hash(read_claims(folder))
        path = folder / HISTORY
        recorded = set(re.findall(HISTORY_HEADING, path.read_text(), re.M)) if path.exists() else set()
        missing = [h for h in (judged or "").split(",") if h and h not in {r[1] for r in recorded}]
        if missing:
            problems.append(f"results/{folder.name}: rules {','.join(missing)} has no entry in {HISTORY}: run python "
                            f"scripts/results_history.py results/{folder.name} --changed '<what and why>'")  # fmt: skip
    return problems


def read_run_txt(folder: Path) -> dict[str, str]:
    """``commit``, ``start``, ``wall`` and ``status`` from ``RUN.txt`` (missing: empty)."""
    path = folder / "RUN.txt"
    if not path.exists():
        return {}
    text = path.read_text()
    out = {}
    for key, pattern in (
        ("commit", r"^commit: (\S+)"),
        ("start", r"^start \(UTC\): ([^;]+);"),
        ("wall", r"wall clock: ([^(\n]+)"),
        ("status", r"^exit status: (.+)$"),
    ):
        m = re.search(pattern, text, re.M)
        out[key] = m.group(1).strip() if m else ""
    return out


def read_claims(folder: Path) -> list[dict[str, str]]:
    with open(folder / "claims.csv", newline="") as f:
        return list(csv.DictReader(f))


def judged_hash(rows: list[dict[str, str]]) -> str | None:
    """The rules hash the folder's claims were judged under (None: before the rules existed)."""
    hashes = {r.get("rules_hash") or "" for r in rows}
    return None if hashes in (set(), {""}) else ",".join(sorted(hashes))


def claims_of(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The claims among a folder's rows (setup checks, verdict passed / failed, left out)."""
    return [r for r in rows if r.get("verdict") not in CHECKS]


def tally(folders: list[tuple[Path, list[dict[str, str]]]]) -> str:
    """The first line of findings: how many claims got each verdict, and the setup checks."""
    rows = [r for _, rs in folders for r in rs]
    claims = claims_of(rows)
    counts = " · ".join(f"{v} **{sum(r['verdict'] == v for r in claims)}**" for v in TALLY_ORDER)
    checks = ", ".join(f"{sum(r['verdict'] == c for r in rows)} {c}" for c in CHECKS)
    return (f"**Verdicts of the {len(claims)} claims of {len(folders)} presets:** {counts} "
            f"(setup checks: {checks}).")  # fmt: skip


def value_text(row: dict[str, str]) -> str:
    """The difference (or ratio) with its 95 % interval, 3 significant digits."""
    return interval_text(row.get("estimate"), row.get("lo"), row.get("hi"), is_ratio(row))


def reason(row: dict[str, str]) -> str:
    """Why a claim was not judged, in a few words."""
    text = " ".join(row.get("measured", "").split())
    if text.startswith("not run in"):
        return "not run at this scale; the full preset judges it"
    needs = re.fullmatch(r"not judged at this scale \(needs (n ≈ \d+), or the full preset\)", text)
    if needs:
        return f"{needs[1]} needed at this scale, or the full preset"
    return text if len(text) <= 80 else text[:79] + "…"


def finding(preset: str, rows: list[dict[str, str]]) -> str:
    """What a preset found, in one clause: each decided claim with its numbers; the inconclusive ones
    (with numbers when at most 4, by name when at most 6, else counted); the not-judged ones with
    the reason."""
    claims = annotate(claims_of(rows), preset)
    parts = [f"{r['short']}: {r['verdict']}, {value_text(r)}" for r in claims if r["verdict"] in DECIDED]
    unsure = [r for r in claims if r["verdict"] == INCONCLUSIVE]
    if len(unsure) <= 4:
        parts += [f"{r['short']}: inconclusive, {value_text(r)}" for r in unsure]
    elif len(unsure) <= 6:
        parts.append(f"inconclusive ({len(unsure)}): " + ", ".join(r["short"] for r in unsure))
    else:
        parts.append(f"{len(unsure)} inconclusive (see the table)")
    skipped = [r for r in claims if r["verdict"] == NOT_JUDGED]
    for why in dict.fromkeys(reason(r) for r in skipped):
        mine = [r["short"] for r in skipped if reason(r) == why]
        names = ", ".join(mine) if len(mine) <= 6 else f"{len(mine)} claims (see the table)"
        parts.append(f"not judged ({why}): {names}")
    return "; ".join(parts)


def paper_lines(folders: list[tuple[Path, list[dict[str, str]]]]) -> list[str]:
    """One line per paper (the rules' ``paper_title``; default the preset's name), its presets linked;
    the leaderboard has its own line (`leaderboard_line`)."""
    papers: dict[str, list[tuple[Path, list[dict[str, str]]]]] = {}
    for folder, rows in (f for f in folders if f[0].name != LEADERBOARD):
        papers.setdefault(rules_meta(folder.name)[0], []).append((folder, rows))
    lines = []
    for title, mine in sorted(papers.items()):
        links = ", ".join(f"[{f.name}]({f.name}/README.md)" for f, _ in mine)
        found = " — ".join(
            ("*(superseded)* " if superseded(f, rows) else "") + finding(f.name, rows) for f, rows in mine
        )
        lines.append(f"- **{title}** ({links}): {found}")
    return lines


def _relabel(model: str, dataset: str) -> tuple[str, str]:
    """A leaderboard cell written before the labels said what ran (``resnet20 (depth 8)``,
    ``iwslt14 (de-en-subset)``) in today's words (``ResNet8``, ``Multi30k de-en (subset)``)."""
    m = re.fullmatch(r"(\S+) \(depth (\d+)\)", model)
    d = re.fullmatch(r"(\S+) \((\S+)\)", dataset)
    return (model_label(m[1], int(m[2])) if m else model, dataset_label(d[1], d[2]) if d else dataset)


def _difference(claims: list[dict[str, str]], norm: str, reference: str, verdict: str) -> str:
    """The judged claim's difference [95 % CI] of ``norm`` against ``reference`` (their base names:
    ``pn (enc) / ln (dec)`` is ``pn``), from the folder's ``claims.csv``; empty when none matches."""
    a, b = norm.split(" (")[0], reference.split(" (")[0]
    row = next((r for r in claims if (r.get("a"), r.get("b"), r.get("verdict")) == (a, b, verdict)), None)
    return f", {value_text(row)}" if row and row.get("estimate") else ""


def leaderboard_line(folder: Path) -> str | None:
    """The leaderboard's finding, per cell: the norm with the highest mean score and its interval, each
    norm judged against the cell's reference with its verdict and difference [95 % CI] (the rules',
    from ``claims.csv``), and how many the rules leave to the full preset."""
    if not (folder / "leaderboard.csv").exists():
        return None
    with open(folder / "leaderboard.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["n"] not in ("", "0")]
    claims = read_claims(folder) if (folder / "claims.csv").exists() else []
    table = (folder / "leaderboard.md").read_text() if (folder / "leaderboard.md").exists() else ""
    cells = []
    for model, dataset in dict.fromkeys((r["model"], r["dataset"]) for r in rows):
        mine = [r for r in rows if (r["model"], r["dataset"]) == (model, dataset)]
        mine.sort(key=lambda r: -float(r["mean"]))
        best, reference = mine[0], next((r["norm"] for r in mine if r["verdict"] == "reference"), "?")
        steps = re.search(rf"^\| {re.escape(model)} on {re.escape(dataset)} \|.*?([\d,]+ steps)", table, re.M)
        name = " on ".join(_relabel(model, dataset)) + (f", {steps[1]}" if steps else "")
        parts = [f"**{best['norm']}** highest, {best['metric']} {_num(best['mean'])} [{_num(best['ci_lo'])}, "
                 f"{_num(best['ci_hi'])}]"]  # fmt: skip
        parts += [f"next {mine[1]['norm']} {_num(mine[1]['mean'])}"] if len(mine) > 1 else []
        parts += [f"{r['norm']} vs {reference}: {r['verdict']}{_difference(claims, r['norm'], reference, r['verdict'])}"
                  for r in mine if r["verdict"] in (DIFFERENT, INCONCLUSIVE)]  # fmt: skip
        unjudged = sum(r["verdict"] == NOT_JUDGED for r in mine)
        parts += [f"not judged at this scale vs {reference}: {unjudged} of {len(mine) - 1}"] if unjudged else []
        cells.append(f"{name} ({len(mine)} norms × {best['n']} seeds): " + "; ".join(parts))
    return f"- **Norm leaderboard** ([{folder.name}]({folder.name}/README.md)): " + " — ".join(cells)


def _num(text: str, digits: int = 3) -> str:
    try:
        v = float(text)
    except ValueError:
        return text or "n/a"
    return "n/a" if math.isnan(v) else f"{v:.{digits}g}"


def claim_cells(preset: str, row: dict[str, str]) -> list[str]:
    """A claim's table row: preset, short claim (linked to ``claims.md``), verdict, difference [95 % CI],
    unit, n per arm, scale (its kind: the setup is in the folder's README)."""
    ratio = is_ratio(row)
    value = value_text(row) if row.get("estimate") else "—"
    unit = "ratio a / b" if ratio else (row.get("unit") or "")
    n = f"{row.get('a_n') or 0} / {row.get('b_n') or 0}"
    scale = (row.get("scale") or "").split(":")[0]
    return [preset, f"[{row['short']}]({preset}/claims.md)", f"**{row['verdict']}**", value, unit, n, scale]


def runs_table(results: Path, folders: list[Path], problems: list[str]) -> list[str]:
    lines = ["## Runs", "", "| preset | commit | rules | start (UTC) | wall clock | exit status |"]
    lines.append("|---|---|---|---|---|---|")
    for folder in folders:
        run = read_run_txt(folder)
        rules = "—"
        if (folder / "claims.csv").exists():
            judged = judged_hash(read_claims(folder))
            now = rules_hash(folder.name)
            rules = "none (before the rules): rerun pending" if judged is None else judged
            planned = planned_hashes(folder)
            if judged is not None and judged != now and now in planned:
                rules = f"{judged} (superseded: attempt {planned[now]} planned under {now})"
            elif judged is not None and judged != now:
                rules = f"{judged} (now {now}: STALE)"
                problems.append(f"results/{folder.name}: claims judged under rules {judged}, the preset's rules are "
                                f"now {now}: a rule changed after the runs; rerun the preset")  # fmt: skip
        lines.append(f"| [{folder.name}]({folder.name}/README.md) | {run.get('commit', '?')} | {rules} "
                     f"| {run.get('start', '?')} | {run.get('wall', '?')} | {run.get('status', '?')} |")  # fmt: skip
    return lines


def judged_folders(results: Path) -> tuple[list[tuple[Path, list[dict[str, str]]]], list[Path]]:
    """(folders judged under recorded rules with their claims' rows, folders judged before the rules)."""
    current, legacy = [], []
    for folder in sorted(p for p in results.iterdir() if (p / "claims.csv").exists()):
        rows = read_claims(folder)
        if judged_hash(rows) is None:
            legacy.append(folder)
        else:
            current.append((folder, rows))
    return current, legacy


def build(results: Path = RESULTS) -> tuple[str, list[str]]:
    """The page, and the problems ``--check`` fails on (a rule changed after its runs)."""
    problems: list[str] = []
    current, legacy = judged_folders(results)
    board = leaderboard_line(results / LEADERBOARD)
    lines = [INTRO, tally(current), *superseded_note(current), "", "## Findings per paper", "", *paper_lines(current)]
    lines += [board] if board else []
    lines += ["", "Every claim's difference with its 95 % interval, coloured by verdict (the band: an equivalence "
              "claim's margin); each folder's `forest.png` shows its own:"]  # fmt: skip
    lines += ["", "![forest plot](forest.png)", ""]
    lines += ["## Claims", "", "| preset | claim | verdict | a vs b [95 % CI] | unit | n (a / b) | scale |"]
    lines.append("|---|---|---|---|---|---|---|")
    for folder, rows in current:
        old = superseded(folder, rows)
        for row in annotate(claims_of(rows), folder.name):
            cells = claim_cells(folder.name, row)
            cells[2] += " *(superseded)*" if old else ""
            lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    shown = sorted({f for f, _ in current} | set(legacy) | ({results / LEADERBOARD} if board else set()))
    lines += ["", *runs_table(results, shown, problems)]
    if legacy:
        lines += ["", "## Awaiting a rerun under fixed rules", ""]
        lines.append("These folders were judged before the rules were fixed as data (2 seeds, min–max ranges, the old "
                     "vocabulary); their verdicts are not shown here. Their figures and `claims.md` stay as they were "
                     "until the rerun:")  # fmt: skip
        lines += [f"- [{f.name}]({f.name}/README.md)" for f in legacy]
    lines += ["", METHOD, "Speed of the norms themselves (eager and compiled, CPU): [bench/](bench/README.md).", ""]
    return "\n".join(lines), problems


def superseded(folder: Path, rows: list[dict[str, str]]) -> bool:
    """The folder's verdicts were judged under rules its preset has since replaced by a planned attempt."""
    judged, now = judged_hash(rows), rules_hash(folder.name)
    return judged is not None and judged != now and now in planned_hashes(folder)


def superseded_note(current: list[tuple[Path, list[dict[str, str]]]]) -> list[str]:
    """A line under the tally when some presets await their rerun under new rules (HISTORY.md's
    planned attempt says what changed and why): their verdicts here are the last run's."""
    names = [f.name for f, rows in current if superseded(f, rows)]
    if not names:
        return []
    return [
        "",
        f"**{len(names)} of {len(current)} presets await their rerun under new rules** (each folder's "
        "HISTORY.md: the planned attempt, what changed and why, declared before its runs). Their verdicts "
        "below are their last runs', under the superseded rules, and are marked *(superseded)*.",
    ]


def write_all_forest(results: Path = RESULTS) -> list[Path]:
    """``results/forest.png`` (``.pdf``, ``.csv``): every judged folder's claims, named ``preset: claim``."""
    current, _ = judged_folders(results)
    rows = [r for folder, rs in current for r in annotate(claims_of(rs), folder.name, prefix=f"{folder.name}: ")]
    return write_forest(rows, results, title="Every claim: the difference (or ratio) between its arms, 95 % interval")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md is stale or a rule changed")
    args = parser.parse_args(argv)
    text, problems = build(RESULTS)
    if args.check:
        problems += history_problems(RESULTS)
    target = RESULTS / "README.md"
    for p in problems:
        print(f"results_index: {p}", file=sys.stderr)
    if args.check:
        if target.read_text() != text:
            print(f"{target} is out of date: run python scripts/results_index.py", file=sys.stderr)
            return 1
        return 1 if problems else 0
    target.write_text(text)
    print(f"wrote {target}")
    for path in write_all_forest():
        print(f"wrote {path}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
