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

from normbench.rules import rules_hash  # noqa: E402

HEADER = """# Reproductions at CPU scale

**The benchmark: [the norm leaderboard at CPU scale](leaderboard_cpu/README.md)** (ResNet8 on 5,000
images of the CIFAR-10 subset, transformer_tiny on the de-en subset; 5 seeds, 95 % t-intervals).

What the papers' figures look like when their presets run at CPU scale on real data: the CIFAR-10
subset (`../shared/data/cifar10-subset`, 10,000 / 2,000 images) and, in place of IWSLT14, the
Multi30k de-en subset (`../shared/data/de-en-subset`) with `transformer_tiny`. Each folder has the
figure(s) (PNG, PDF), the CSV of every plotted number (median over seeds, min, max, n),
`claims.md` / `claims.csv`, `runs.csv`, `RUN.txt` (commit, rules hash, commands, wall clock) and a
README that maps the paper's setting onto ours. Rebuild with `bash scripts/reproduce_cpu.sh` and
this page with `python scripts/results_index.py`.

## How a claim is judged

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
turns a verdict into another.
"""


HISTORY = "HISTORY.md"
HISTORY_HEADING = r"^## Attempt (\d+) — rules (\S+), run at (\S+) \(([^)]*)\)$"
"""An entry's heading in a folder's HISTORY.md (written by ``scripts/results_history.py``)."""


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


def _num(text: str, digits: int = 4) -> str:
    try:
        v = float(text)
    except ValueError:
        return text or "n/a"
    return "n/a" if math.isnan(v) else ("diverged" if math.isinf(v) else f"{v:.{digits}g}")


def arm_cell(row: dict[str, str], side: str) -> str:
    if not row.get(f"{side}_n"):
        return f"{row.get(side, '')}: n/a"
    div = row.get(f"{side}_diverged") or "0"
    extra = f", {div} diverged" if div not in ("", "0") else ""
    return (f"{row[side]}: {_num(row[f'{side}_centre'])} [{_num(row[f'{side}_lo'])}, {_num(row[f'{side}_hi'])}] "
            f"(n={row[f'{side}_n']}{extra})")  # fmt: skip


def difference_cell(row: dict[str, str]) -> str:
    if not row.get("estimate"):
        return row.get("measured", "")
    what = "ratio" if row.get("ratio") == "True" else "difference"
    margin = f"; margin ±{_num(row['margin'])}" if row.get("margin") else ""
    return f"{what} {_num(row['estimate'])} [{_num(row['lo'])}, {_num(row['hi'])}]{margin}"


def test_cell(row: dict[str, str]) -> str:
    if not row.get("p"):
        return row.get("test", "")
    return f"{row['test']}: p={_num(row['p'], 2)}, Holm p={_num(row['p_holm'], 2)}"


def build(results: Path = RESULTS) -> tuple[str, list[str]]:
    """The page, and the problems ``--check`` fails on (a rule changed after its runs)."""
    problems: list[str] = []
    presets = sorted(p for p in results.iterdir() if (p / "claims.csv").exists())
    lines = [HEADER, "## Runs", "", "| preset | commit | rules | start (UTC) | wall clock | exit status |"]
    lines.append("|---|---|---|---|---|---|")
    current, legacy = [], []
    for folder in presets:
        rows, run = read_claims(folder), read_run_txt(folder)
        judged = judged_hash(rows)
        if judged is None:
            legacy.append(folder)
            rules = "none (before the rules): rerun pending"
        else:
            now = rules_hash(folder.name)
            rules = judged if judged == now else f"{judged} (now {now}: STALE)"
            if judged != now:
                problems.append(f"results/{folder.name}: claims judged under rules {judged}, the preset's rules are "
                                f"now {now}: a rule changed after the runs; rerun the preset")  # fmt: skip
            current.append((folder, rows))
        lines.append(f"| [{folder.name}]({folder.name}/README.md) | {run.get('commit', '?')} | {rules} "
                     f"| {run.get('start', '?')} | {run.get('wall', '?')} | {run.get('status', '?')} |")  # fmt: skip
    lines += ["", "## Claims", ""]
    lines.append("| claim | paper | arm a: mean [95 % CI] | arm b: mean [95 % CI] | a vs b [95 % CI] | test "
                 "| verdict | scale | figure |")  # fmt: skip
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for folder, rows in current:
        for row in rows:
            figure = f"[{row['figure']}]({folder.name}/{row['figure']}.png)"
            cells = [row["claim"], row["paper"], arm_cell(row, "a"), arm_cell(row, "b"), difference_cell(row),
                     test_cell(row), f"**{row['verdict']}**", row["scale"], figure]  # fmt: skip
            lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    if legacy:
        lines += ["", "## Awaiting a rerun under fixed rules", ""]
        lines.append("These folders were judged before the rules were fixed as data (2 seeds, min–max ranges, the old "
                     "vocabulary); their verdicts are not shown here. Their figures and `claims.md` stay as they were "
                     "until the rerun:")  # fmt: skip
        lines += [f"- [{f.name}]({f.name}/README.md)" for f in legacy]
    lines += ["", "Speed of the norms themselves (eager and compiled, CPU): [bench/](bench/README.md).", ""]
    return "\n".join(lines), problems


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
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
