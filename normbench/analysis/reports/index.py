"""Rebuild the findings page ``results/README.md``, the benchmark-wide forest ``results/forest.*``,
every results folder's ``forest.*`` and ``claims.md``, and every preset folder's ``README.md``
(`normbench.analysis.reports.folder_readme`) from the committed files, and check that
every verdict there was reached under its preset's current rules.

Each ``results/<preset>/`` (and its ``pilot/``) holds ``claims.csv`` (written by
``normbench-figures``: every claim's per-arm numbers, the difference with its interval, the test,
p-values, verdict, scale and the hash of the rules it was judged under), ``per_run.csv`` and
``RUN.txt`` (written by ``scripts/reproduce_cpu.sh``: commit, rules hash, commands, wall clock).
The page (`normbench.analysis.findings.findings`) and the forests (`normbench.analysis.figures.forest`) are drawn
from those files alone, so no number on them is typed by hand. A folder whose ``claims.csv``
predates the rules (no hash) is listed as awaiting its rerun, its old verdicts left out.

    normbench-reports index            # writes the page, the forests and every claims.md
    normbench-reports index --check    # exit 1 if any of them is stale, a rule changed after
                                       # its runs, a folder's rules hash has no entry in its
                                       # HISTORY.md, its last attempt's entry differs from its
                                       # files, per_run.csv is not RUN.txt's commit, or a folder
                                       # fails its evidence check (seeds of earlier attempts too),
                                       # per_run.csv or plan.txt differs from the digest RUN.txt
                                       # names, or plan.txt's keys are not the rules' own

(``python -m normbench.analysis.reports.index`` is the same.)
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
import textwrap
from pathlib import Path

from normbench.analysis.figures.forest import forest_table, remove_forest, write_forest
from normbench.analysis.findings.findings import (
    add_observed,
    add_q,
    confirmatory_line,
    display_names,
    judged_table,
    not_judged_section,
    paper_lines,
    planned_line,
    scope,
    tally,
)
from normbench.analysis.findings.findings_board import board_section
from normbench.analysis.judging.plan_record import PLAN_FILE, plan_problems
from normbench.analysis.loading.attempts import earlier_seeds
from normbench.analysis.loading.provenance import results_root
from normbench.analysis.loading.table_digest import digest_problem
from normbench.analysis.reports.attempt_record import RUN_HEADING, entry_problems, last_run_entry, same_commit
from normbench.analysis.reports.folder_readme import folder_readme
from normbench.analysis.wording.claim_meta import annotate, claim_meta
from normbench.analysis.wording.claims_text import claims_markdown
from normbench.analysis.wording.present import preset_words
from normbench.rules import SUPERSEDED_DIR, file_hash, rules_hash

RESULTS = results_root()
COMMAND = "normbench-reports index"
"""How a user rebuilds the page, the forests and every claims.md (named in the page and the problems)."""
HISTORY_COMMAND = "normbench-reports history"
"""How a user appends an attempt to a folder's HISTORY.md (`normbench.analysis.reports.history`)."""

TITLE = "# What normbench found, at CPU scale"

METHOD = """## How a claim is judged

Rules fixed before the runs (`normbench/rules/<preset>.yaml`; a rule changed after them fails
`normbench-reports index --check`); Welch intervals (on logarithms for ratios), Holm within a
preset, Benjamini–Hochberg over the page. Rebuild the runs with `bash scripts/reproduce_cpu.sh`, this
page, the forests and every `claims.md` with `normbench-reports index`.
"""

CHECKS = ("passed", "failed")
LEADERBOARD = "leaderboard_cpu"


HISTORY = "HISTORY.md"
HISTORY_HEADING = RUN_HEADING
"""An entry's heading in a folder's HISTORY.md (written by `normbench.analysis.reports.history`)."""
PLANNED_HEADING = r"^## Attempt (\d+) — rules (\S+), planned before its runs$"
"""A planned attempt's heading: new rules declared, with what changed and why, before any run."""


def planned_hashes(folder: Path) -> dict[str, int]:
    """The rules hashes the folder's HISTORY.md declares as planned attempts, with their numbers."""
    path = folder / HISTORY
    text = path.read_text() if path.exists() else ""
    return {h: int(n) for n, h in re.findall(PLANNED_HEADING, text, re.M)}  # an amended plan: its number again


def history_problems(results: Path = RESULTS) -> list[str]:
    """One line per folder whose current ``claims.csv`` rules hash has no entry in its HISTORY.md,
    and per folder whose attempts are not numbered 1, 2, … in order (`numbering_problem`)."""
    problems = []
    for folder in sorted(p for p in results.iterdir() if (p / "claims.csv").exists()):
        judged = judged_hash(read_claims(folder))
        path = folder / HISTORY
        recorded = set(re.findall(HISTORY_HEADING, path.read_text(), re.M)) if path.exists() else set()
        missing = [h for h in (judged or "").split(",") if h and h not in {r[1] for r in recorded}]
        if missing:
            problems.append(f"results/{folder.name}: rules {','.join(missing)} has no entry in {HISTORY}: run "
                            f"{HISTORY_COMMAND} results/{folder.name} --changed '<what and why>'")  # fmt: skip
        if path.exists() and (found := numbering_problem(path.read_text())):
            problems.append(f"results/{folder.name}: {HISTORY}: {found}")
    return problems


def numbering_problem(history: str) -> str | None:
    """What breaks an append-only HISTORY.md's numbering, in words: its attempts (run or planned) go
    1, 2, … in order, each heading the number of the one before or the next (a plan amended, then
    run, keeps its number); a gap is an attempt taken out, a number out of order one edited."""
    numbers = [int(n) for n in re.findall(r"^## Attempt (\d+) ", history, re.M)]
    for before, number in zip([0, *numbers], numbers):
        if number not in (before, before + 1) and not (before == 0 and number == 1):
            return (f"attempt {number} follows attempt {before or 'none'}: an attempt was taken out or renumbered; "
                    "the history is append-only (restore it from git)")  # fmt: skip
    return None


def read_run_txt(folder: Path) -> dict[str, str]:
    """``commit``, ``rules``, ``start``, ``wall`` and ``status`` from ``RUN.txt`` (missing: empty)."""
    path = folder / "RUN.txt"
    if not path.exists():
        return {}
    text = path.read_text()
    out = {}
    for key, pattern in (
        ("commit", r"^commit: (\S+)"),
        ("rules", r"^rules hash: (\S+)"),
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


def rules_state(folder: Path, problems: list[str]) -> str:
    """The folder's rules hash as judged, and, when the preset's rules have changed since, whether a
    planned attempt declared the change (superseded) or not (STALE: a problem)."""
    if not (folder / "claims.csv").exists():
        return "—"
    judged = judged_hash(read_claims(folder))
    now = rules_hash(folder.name)
    if judged is None:
        return "none (before the rules): rerun pending"
    planned = planned_hashes(folder)
    if judged != now and now in planned:
        return f"{judged} (superseded: attempt {planned[now]} planned under {now})"
    if judged != now:
        problems.append(f"results/{folder.name}: claims judged under rules {judged}, the preset's rules are "
                        f"now {now}: a rule changed after the runs; rerun the preset")  # fmt: skip
        return f"{judged} (now {now}: STALE)"
    return judged


def runs_table(results: Path, folders: list[Path], problems: list[str]) -> list[str]:
    """What ran (each folder's ``RUN.txt``): the commits counted, and a row for every folder whose
    rules changed since its runs or whose runs did not all exit 0."""
    runs = {f: read_run_txt(f) for f in folders}
    commits: dict[str, int] = {}
    for run in runs.values():
        commits[run.get("commit") or "?"] = commits.get(run.get("commit") or "?", 0) + 1
    counted = ", ".join(f"`{c}` ({n})" for c, n in sorted(commits.items(), key=lambda kv: -kv[1]))
    lines = ["## Runs", "", f"{len(folders)} folders, each with its `RUN.txt` (commit, rules hash, commands, wall "
             f"clock); run at {counted}."]  # fmt: skip
    states = {f: rules_state(f, problems) for f in folders}
    stale = [f.name for f, s in states.items() if s.endswith("STALE)")]
    if stale:
        text = (f"**STALE: the rules changed after the runs of {len(stale)} folders**, with no planned attempt on "
                f"record in their HISTORY.md (`--check` names the hashes): {', '.join(stale)}.")  # fmt: skip
        lines += textwrap.wrap(text, 300, break_long_words=False, break_on_hyphens=False)
    rows = []
    for folder, run in runs.items():
        rules, status = states[folder], run.get("status", "?")
        superseded_only = "(superseded:" in rules  # said once, under the tally (superseded_note)
        unusual = ("(" in rules and not superseded_only) or rules.startswith("none") or status not in (
            "", "runs 0, figures 0")  # fmt: skip
        if rules.endswith("STALE)") or not unusual:
            continue
        rows.append(f"| [{folder.name}]({folder.name}/README.md) | {run.get('commit', '?')} | {rules} "
                    f"| {run.get('wall', '?')} | {status or '?'} |")  # fmt: skip
    if rows:
        lines += ["", "| preset | commit | rules | wall clock | exit status |", "|---|---|---|---|---|", *rows]
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


def annotated(folders: list[tuple[Path, list[dict[str, str]]]]) -> list[tuple[Path, list[dict]]]:
    """Each folder's claims (setup checks left out), annotated from the rules they were judged under,
    with their page-wide names and Benjamini–Hochberg q."""
    out = [(folder, [r for r in annotate(rows, folder.name) if not r["check"]]) for folder, rows in folders]
    for folder, rows in out:
        add_observed(folder, rows)
    every = [r for _, rows in out for r in rows]
    display_names(every)
    add_q(every)
    return out


def build(results: Path = RESULTS) -> tuple[str, list[str]]:
    """The page, and the problems ``--check`` fails on (a rule changed after its runs)."""
    problems: list[str] = []
    current, legacy = judged_folders(results)
    titles = {f.name: claim_meta(f.name, judged_hash(rows))[0] for f, rows in current}
    old = {f.name for f, rows in current if superseded(f, rows)}
    old = set() if len(old) == len(current) else old  # every folder superseded: said once, not per row
    folders = annotated(current)
    checks = [r for f, rows in current for r in annotate(rows, f.name) if r["check"]]
    papers = [(f, rows) for f, rows in folders if f.name != LEADERBOARD]  # the leaderboard: its own table
    lines = [TITLE, scope(results, folders), "", tally(folders, checks), *superseded_note(current),
             "Each difference is signed toward its claim: **+ (a ratio above 1) is the claim's direction**, the "
             "arms named in the order subtracted (an equivalence or two-sided claim: a − b); accuracies and errors "
             "in percentage points. E: the effect of "
             "interest (an equivalence claim: its margin). ⚑: Benjamini–Hochberg q over every judged claim above "
             "0.05.", "", *judged_table(papers, titles, old), "", confirmatory_line(folders), planned_line(folders),
             "", "## Per paper", "", *paper_lines(folders, titles), "", *not_judged_section(folders)]  # fmt: skip
    board = results / LEADERBOARD
    board_claims = next((rows for f, rows in folders if f.name == LEADERBOARD), [])
    lines += ["", *board_section(board, board_claims)] if (board / "leaderboard.csv").is_file() else []
    lines += ["", "## Forest", "", "Every judged claim's difference with its 95 % interval, signed toward its claim "
              "(the band: an equivalence claim's margin); each folder's `forest.png` shows its own.", "",
              "![forest plot](forest.png)", ""]  # fmt: skip
    shown = sorted({f for f, _ in current} | set(legacy))
    lines += runs_table(results, shown, problems)
    if legacy:
        lines += ["", "## Awaiting a rerun under fixed rules", "",
                  "These folders were judged before the rules were fixed as data; their verdicts are not shown "
                  "here:", *[f"- [{f.name}]({f.name}/README.md)" for f in legacy]]  # fmt: skip
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
    which = ("every verdict below is its preset's last run's, under the superseded rules, and exploratory"
             if len(names) == len(current) else "their verdicts below are their last runs', under the superseded "
             "rules, marked *(superseded)*")  # fmt: skip
    return [f"**{len(names)} of {len(current)} presets await their rerun under new rules** (each folder's "
            f"HISTORY.md: the planned attempt, declared before its runs); {which}."]  # fmt: skip


def claims_folders(results: Path = RESULTS) -> list[Path]:
    """Every folder under ``results`` judged under recorded rules (a preset's, and its ``pilot/``)."""
    found = sorted({p.parent for pattern in ("*/claims.csv", "*/pilot/claims.csv") for p in results.glob(pattern)})
    return [f for f in found if judged_hash(read_claims(f)) is not None]


def preset_of(folder: Path) -> str:
    return folder.parent.name if folder.name == "pilot" else folder.name


def forest_title(preset: str, rows: list[dict[str, str]], pilot: bool = False) -> str:
    title = claim_meta(preset, judged_hash(rows))[0]
    return f"{title} ({preset_words(preset)}{', pilot' if pilot else ''}): each judged claim's difference (or ratio)"


def all_forest_rows(results: Path = RESULTS) -> list[dict]:
    """Every judged folder's claims, named ``preset: claim``, for ``results/forest.*``."""
    current, _ = judged_folders(results)
    rows = [r for folder, rs in current for r in annotate(claims_of(rs), folder.name)]
    titles = {f.name: claim_meta(f.name, judged_hash(rs))[0] for f, rs in current}
    for r in rows:
        r["short"] = f"{titles[r['preset']]}: {r['short']}"
    display_names(rows)  # a name two presets share: with its preset, in words
    return [{**r, "short": r["name"]} for r in rows]


def folder_readmes(results: Path = RESULTS) -> dict[Path, str]:
    """Each preset folder judged under recorded rules: its ``README.md`` as its files draw it
    (`normbench.analysis.reports.folder_readme`), its claims named and q'd as on the findings page."""
    current, _ = judged_folders(results)
    out = {}
    for (folder, rows), (_, claims) in zip(current, annotated(current), strict=True):
        title = claim_meta(folder.name, judged_hash(rows))[0]
        checks = [r for r in annotate(rows, folder.name) if r["check"]]
        out[folder / "README.md"] = folder_readme(folder, claims, checks, title, superseded(folder, rows))
    return out


def write_all(results: Path = RESULTS) -> list[Path]:
    """``results/forest.*`` and, per folder, ``forest.*`` (judged claims only; none: removed),
    ``claims.md`` and ``README.md``, all from the committed files; the paths written."""
    written = write_forest(all_forest_rows(results), results, title="Every judged claim: the difference (or ratio)")
    for folder in claims_folders(results):
        rows = read_claims(folder)
        preset = preset_of(folder)
        mine = annotate(claims_of(rows), preset)
        if forest_table(mine):
            written += write_forest(mine, folder, title=forest_title(preset, rows, folder.name == "pilot"))
        else:
            remove_forest(folder)
        (folder / "claims.md").write_text(claims_markdown(preset, rows, pilot=folder.name == "pilot"))
        written.append(folder / "claims.md")
    for path, text in folder_readmes(results).items():
        path.write_text(text)
        written.append(path)
    return written


def stale_files(results: Path = RESULTS) -> list[str]:
    """Per folder, a ``claims.md`` or ``forest.csv`` that differs from what its ``claims.csv`` draws
    (the forest's plotted numbers and labels; pixels are not compared)."""
    problems = []
    for folder in claims_folders(results):
        rows = read_claims(folder)
        preset = preset_of(folder)
        where = folder.relative_to(results.parent)
        md = folder / "claims.md"
        if not md.is_file() or md.read_text() != claims_markdown(preset, rows, pilot=folder.name == "pilot"):
            problems.append(f"{where}/claims.md is out of date: run {COMMAND}")
        table = forest_table(annotate(claims_of(rows), preset))
        path = folder / "forest.csv"
        if table != (_read_forest(path) if path.is_file() else []) or (not table and path.is_file()):
            problems.append(f"{where}/forest.csv does not match its claims.csv: run {COMMAND}")
    for path, text in folder_readmes(results).items():
        if not path.is_file() or path.read_text() != text:
            problems.append(f"{path.relative_to(results.parent)} is out of date: run {COMMAND}")
    return problems


def _read_forest(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return [{k: _cell(v) for k, v in r.items()} for r in csv.DictReader(f)]


def _cell(v: str) -> object:
    try:
        return float(v)
    except ValueError:
        return v


def evidence_problems(results: Path = RESULTS) -> list[str]:
    """The hook for engineer "evidence"'s `normbench.analysis.findings.verify.verify_folder` (issue 56): its
    problems for every judged folder, each judged with the seeds of the folder's earlier attempts
    (`folder_earlier_seeds`: a confirmatory table that reuses one is a problem); none while the
    module is not there."""
    try:
        from normbench.analysis.findings.verify import verify_folder
    except ImportError:
        return []
    problems = []
    for folder in (f for f in claims_folders(results) if f.name != "pilot"):  # pilots: their rules are not kept
        try:
            found = verify_folder(folder, earlier_seeds=folder_earlier_seeds(folder))
        except (ValueError, OSError) as e:  # a one-line refusal is a problem of the folder
            found = [str(e)]
        problems += [f"{folder.relative_to(results.parent)}: {p}" for p in (found or [])]
    return problems


def _table(path: Path) -> list[dict[str, str]] | None:
    if not path.is_file():
        return None
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def folder_earlier_seeds(folder: Path) -> set[int]:
    """The seeds of every earlier attempt in ``folder`` (HISTORY.md, the pilot), the attempt its
    ``per_run.csv`` holds (its sources, its commit) aside, as ``normbench-figures`` reads them."""
    rows = _table(folder / "per_run.csv") or []
    commit = rows[0].get("commit") or "" if rows else ""
    return earlier_seeds(folder, [r.get("source") or "" for r in rows], commit or None)


def commit_problems(folder: Path, run: dict[str, str], rows: list[dict[str, str]]) -> list[str]:
    """``RUN.txt``'s commit and ``per_run.csv``'s commit and rules hash: none blank, one commit, the
    rules hash ``RUN.txt`` names (the rules the run was made under) the table's."""
    lines = [] if run.get("commit") else ["RUN.txt names no commit"]
    commits = sorted({r.get("commit") or "" for r in rows})
    if "" in commits:
        lines.append("per_run.csv has a row with a blank commit")
    if any(not (r.get("rules_hash") or "").strip() for r in rows):
        lines.append("per_run.csv has a row with a blank rules_hash")
    hashes = sorted({(r.get("rules_hash") or "").strip() for r in rows} - {""})
    if run.get("rules") and (other_rules := [h for h in hashes if h != run["rules"]]):
        lines.append(f"per_run.csv was measured under rules {other_rules[0]}, RUN.txt names rules hash "
                     f"{run['rules']}: one of them is not this run's; regenerate the folder")  # fmt: skip
    if run.get("commit") and (other := [c for c in commits if c and not same_commit(c, run["commit"])]):
        lines.append(f"per_run.csv was measured at commit {other[0]}, RUN.txt names {run['commit']}: the table "
                     "is not this run's; regenerate the folder")  # fmt: skip
    if run.get("commit") and commit_known(run["commit"], folder) is False:
        lines.append(f"RUN.txt names commit {run['commit']}, which is no commit of this repository: the runs' "
                     "provenance cannot be traced; name the commit the runs were made at")  # fmt: skip
    return lines


def digest_problems(results: Path = RESULTS) -> list[str]:
    """Per folder with a ``RUN.txt`` (a preset's and its ``pilot/``): its ``per_run.csv`` against the
    digest ``RUN.txt`` names (`normbench.analysis.loading.table_digest`)."""
    folders = sorted({p.parent for pattern in ("*/RUN.txt", "*/pilot/RUN.txt") for p in results.glob(pattern)})
    return [f"{f.relative_to(results.parent)}: {p}" for f in folders if (p := digest_problem(f)) is not None]


def plan_record_problems(results: Path = RESULTS) -> list[str]:
    """Per preset folder with a ``plan.txt``: its keys against the preset's rules
    (`normbench.analysis.judging.plan_record`)."""
    folders = sorted(p.parent for p in results.glob(f"*/{PLAN_FILE}"))
    return [f"{f.relative_to(results.parent)}: {p}" for f in folders for p in plan_problems(f)]


def kept_rules_problems(kept: Path = SUPERSEDED_DIR) -> list[str]:
    """One line per kept copy of superseded rules (``normbench/rules/superseded/<preset>-<hash>.yaml``)
    whose content does not hash to the hash its name gives: a copy edited after it was kept, which
    would judge the folders measured under that hash by rules that never were."""
    problems = []
    for path in sorted(kept.glob("*.yaml")):
        named = path.stem.rsplit("-", 1)[-1]
        try:
            held = file_hash(path)
        except (ValueError, OSError) as e:  # a YAML error is a ConfigError (a ValueError): one line
            held = f"unreadable ({e})"
        if held != named:
            problems.append(f"normbench/rules/superseded/{path.name}: its rules hash to {held}, not {named} as its "
                            "name says: the kept copy was edited after it was kept; restore it from git")  # fmt: skip
    return problems


def appended_only_problems(results: Path = RESULTS) -> list[str]:
    """One line per folder whose HISTORY.md does not begin with the one the checkout's HEAD holds
    (git, where it can tell): an entry rewritten or taken out before a commit. Append-only: a
    history that only grew passes; a rewrite already committed is in git's log, not here."""
    import subprocess

    problems = []
    for path in sorted(results.glob(f"*/{HISTORY}")):
        try:
            head = subprocess.run(["git", "show", f"HEAD:./{HISTORY}"], cwd=path.parent, capture_output=True,
                                  text=True, timeout=30)  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            return []
        if head.returncode == 0 and not path.read_text().startswith(head.stdout):
            at = next((i for i, (a, b) in enumerate(zip(head.stdout, path.read_text())) if a != b), len(head.stdout))
            line = head.stdout.count("\n", 0, at) + 1
            problems.append(f"results/{path.parent.name}/{HISTORY}: line {line} differs from the committed one: the "
                            "history is append-only (an earlier entry edited or taken out); restore it from git "
                            "and append")  # fmt: skip
    return problems


def commit_known(commit: str, where: Path) -> bool | None:
    """Whether ``commit`` is a commit of the git repository ``where`` lies in; None when git cannot
    tell (no git, not a repository, a shallow clone that lacks older commits)."""
    import subprocess

    def git(*args: str) -> subprocess.CompletedProcess[str] | None:
        try:
            return subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None

    shallow = git("rev-parse", "--is-shallow-repository")
    if shallow is None or shallow.returncode != 0 or shallow.stdout.strip() != "false":
        return None
    found = git("cat-file", "-e", f"{commit}^{{commit}}")
    return None if found is None else found.returncode == 0


def run_txt_problems(run: dict[str, str], entry: dict[str, str], runs: list[dict[str, str]] | None,
                     run_count: int | None) -> list[str]:  # fmt: skip
    """``RUN.txt`` against the last attempt's entry, when that is its run: the start (the heading's)
    and the wall clock (the ``- run:`` line's), and the runs it counts against ``runs.csv``'s rows."""
    lines, where = [], f"attempt {entry['number']} (run at {entry['commit']})"
    if run.get("start") and entry.get("start") and run["start"] != entry["start"]:
        lines.append(f"{where} started {entry['start']}, RUN.txt says {run['start']}")
    wall = re.search(r"^- run: .*wall clock ([^\n]+)$", entry.get("text", ""), re.M)
    if run.get("wall") and wall and wall.group(1).strip() != run["wall"]:
        lines.append(f"{where}: wall clock {wall.group(1).strip()}, RUN.txt says {run['wall']}")
    if run_count is not None and runs is not None and run_count != len(runs):
        lines.append(f"RUN.txt counts {run_count} runs, runs.csv holds {len(runs)}")
    return lines


def record_problems(results: Path = RESULTS) -> list[str]:
    """Per judged folder (not the pilots) with a ``per_run.csv``: `commit_problems`, and the last
    attempt that ran in its HISTORY.md against its files when that attempt is the run ``RUN.txt``
    names (`normbench.analysis.reports.attempt_record.entry_problems`); when it is another run, the
    run ``RUN.txt`` names has no entry: a problem (`normbench.analysis.reports.history` appends it)."""
    problems = []
    for folder in (f for f in claims_folders(results) if f.name != "pilot"):
        rows = _table(folder / "per_run.csv")
        if rows is None:
            continue
        run, where = read_run_txt(folder), folder.relative_to(results.parent)
        found = commit_problems(folder, run, rows)
        history = folder / HISTORY
        entry = last_run_entry(history.read_text()) if history.is_file() else None
        if entry is not None and run.get("commit") and not same_commit(entry["commit"], run["commit"]):
            found.append(f"the run RUN.txt names (commit {run['commit']}) has no attempt in {HISTORY} after attempt "
                         f"{entry['number']} (run at {entry['commit']}): run {HISTORY_COMMAND} "
                         f"results/{folder.name} --changed '<what and why>'")  # fmt: skip
        elif entry is not None:
            runs = _table(folder / "runs.csv")
            count = re.search(r"\((\d+) runs, ", (folder / "RUN.txt").read_text()) if run else None
            found += [f"{HISTORY}: {p}" for p in run_txt_problems(run, entry, runs, int(count[1]) if count else None)]
            claims = read_claims(folder)
            current = judged_hash(claims) == rules_hash(folder.name)  # superseded: judged again since, by later code
            found += [f"{HISTORY}: {p}" for p in entry_problems(entry, run.get("commit") or "", claims, rows,
                                                                  _table(folder / "runs.csv"), current)]  # fmt: skip
        problems += [f"{where}: {p}" for p in found]
    return problems


def main(argv: list[str] | None = None, prog: str = "python -m normbench.analysis.reports.index") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if anything is stale or a rule changed")
    args = parser.parse_args(argv)
    text, problems = build(RESULTS)
    if args.check:
        problems += history_problems(RESULTS) + record_problems(RESULTS) + stale_files(RESULTS)
        problems += evidence_problems(RESULTS) + kept_rules_problems() + appended_only_problems(RESULTS)
        problems += digest_problems(RESULTS) + plan_record_problems(RESULTS)
    target = RESULTS / "README.md"
    for p in problems:
        print(f"results_index: {p}", file=sys.stderr)
    if args.check:
        if not target.is_file() or target.read_text() != text:
            print(f"{target} is out of date: run {COMMAND}", file=sys.stderr)
            return 1
        return 1 if problems else 0
    target.write_text(text)
    print(f"wrote {target}")
    for path in write_all(RESULTS):
        print(f"wrote {path}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
