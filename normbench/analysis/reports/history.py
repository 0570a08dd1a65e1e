"""Keep every attempt on record: append an entry to ``results/<preset>/HISTORY.md`` (issue 43, item 5).

Each results folder's ``HISTORY.md`` lists, oldest first, every run whose verdicts were committed
there: the rules hash it was judged under, the run's commit and start (from ``RUN.txt``), the
verdict tally and each claim as judged (from ``claims.csv``), each learning bound's range and passes
per setting (from ``per_run.csv``; `normbench.analysis.reports.attempt_numbers`), and what changed
since the attempt before and why: the one line a person writes, which needs no number. A setup
changed after its verdicts were seen shows up as attempt 2, 3, … The file is append-only: this
command adds one entry at its end and never rewrites an earlier one, and
``normbench-reports index --check`` fails for a folder whose current rules hash has no entry.

    normbench-reports history results/bn_dropout_cpu --changed "what changed and why"
    normbench-reports history results/bn_dropout_cpu --planned --changed "what changes and why"

(``python -m normbench.analysis.reports.history`` is the same.)

``--planned`` declares the next attempt before its runs: the preset's current rules hash (changed
since the folder's verdicts), the commit it was declared at and what changed and why. Until the
rerun, ``normbench-reports index`` shows the folder's verdicts as *superseded* and ``--check`` passes; the
rerun's entry then takes the planned attempt's number. A plan amended before its runs (the pilot's
``n`` written into the rules) is appended under the same number with the new hash.
"""

from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from normbench.analysis.findings.verify import verify_folder
from normbench.analysis.reports.attempt_numbers import BOUNDS_LINE, CLAIMS_LINE, claim_lines, learning_lines
from normbench.analysis.reports.attempt_record import runs_summary, tally
from normbench.analysis.reports.index import (
    HISTORY,
    HISTORY_COMMAND,
    HISTORY_HEADING,
    commit_problems,
    judged_hash,
    planned_hashes,
    read_claims,
    read_run_txt,
    rules_hash,
)


def attempts(folder: Path) -> list[tuple[int, str, str, str]]:
    """(number, rules hash, run commit, run start) of every entry of the folder's HISTORY.md."""
    path = folder / HISTORY
    if not path.exists():
        return []
    return [(int(m[0]), m[1], m[2], m[3]) for m in re.findall(HISTORY_HEADING, path.read_text(), re.M)]


def header(folder: Path) -> str:
    return (f"# History of results/{folder.name}\n\nEvery run whose verdicts were committed in this folder, oldest "
            "first, with the rules hash it was judged under (`normbench/rules/`), the run's commit and start "
            "(`RUN.txt`), the verdict tally and each claim's numbers (`claims.csv`), each learning bound's range "
            "(`per_run.csv`) and what changed since the attempt before, and why. "
            f"Append-only: `{HISTORY_COMMAND}` adds an entry at the end and never rewrites "
            "one.\n")  # fmt: skip


def entry(
    number: int,
    rules: str,
    run: dict[str, str],
    verdicts: str,
    changed: str,
    runs: str = "",
    committed: str = "",
    extra: Sequence[str] = (),
) -> str:
    """One attempt in the format ``HISTORY_HEADING`` reads back; ``runs``: `runs_summary`;
    ``extra``: more ``- key: value`` lines before what changed."""
    lines = [f"## Attempt {number} — rules {rules}, run at {run.get('commit') or '?'} ({run.get('start') or '?'})", ""]
    wall = f", wall clock {run['wall']}" if run.get("wall") else ""
    lines.append(f"- run: commit {run.get('commit') or '?'}, started {run.get('start') or '?'} UTC{wall}")
    if runs:
        lines.append(f"- runs (runs.csv): {runs}")
    if committed:
        lines.append(f"- committed: {committed}")
    lines += [f"- verdicts: {verdicts}", *extra, f"- what changed and why: {changed}"]
    return "\n".join(lines) + "\n"


def append_entry(folder: Path, changed: str) -> str:
    """Append the folder's current run (``claims.csv`` + ``RUN.txt``) as the next attempt; returns
    the entry. ValueError (one line) when there is nothing to add or the run is already on record."""
    if not changed.strip() or "\n" in changed.strip():
        raise ValueError(f"--changed={changed!r}; valid: one non-empty line saying what changed and why")
    if not (folder / "claims.csv").exists():
        raise ValueError(f"{folder}: no claims.csv; valid: a results folder judged by normbench-figures")
    rows, run = read_claims(folder), read_run_txt(folder)
    rules = judged_hash(rows)
    if rules is None:
        raise ValueError(f"{folder}: claims.csv has no rules hash (judged before the rules); valid: a rerun's folder")
    if problems := files_problems(folder, run):
        raise ValueError(f"{folder}: {problems[0]}; valid: the files of one run, as scripts/reproduce_cpu.sh and "
                         "normbench-figures wrote them (RUN.txt, per_run.csv, claims.csv)")  # fmt: skip
    done = attempts(folder)
    if any((h, c, s) == (rules, run.get("commit") or "?", run.get("start") or "?") for _, h, c, s in done):
        raise ValueError(f"{folder}: rules {rules}, run at {run.get('commit')} is on record already in {HISTORY}")
    path = folder / HISTORY
    runs = ""
    if (folder / "runs.csv").exists():
        with open(folder / "runs.csv", newline="") as f:
            runs = runs_summary(list(csv.DictReader(f)))
    number = planned_hashes(folder).get(rules) or next_number(folder)
    text = entry(number, rules, run, tally(rows), changed.strip(), runs, extra=numbers(folder, rows, rules))
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "a") as f:  # append only: the earlier entries are never rewritten
        f.write((header(folder) if new else "") + "\n" + text)
    return text


def numbers(folder: Path, rows: list[dict[str, str]], rules: str) -> list[str]:
    """The entry's numbers, from the folder's files (`normbench.analysis.reports.attempt_numbers`):
    each claim as judged, each learning bound per setting; nothing typed by hand."""
    claims = claim_lines(folder.name, rows)
    bounds = learning_lines(folder.name, rules, folder / "per_run.csv")
    return ([CLAIMS_LINE, *claims] if claims else []) + ([BOUNDS_LINE, *bounds] if bounds else [])


def files_problems(folder: Path, run: dict[str, str]) -> list[str]:
    """Why the folder's files are not one run's record, which an entry would put on record: no
    ``RUN.txt`` (or no commit in it), ``per_run.csv`` of another commit or rules hash than
    ``RUN.txt``'s or a commit git does not know (`commit_problems`), a ``claims.csv`` that is not
    what ``per_run.csv`` judges (`verify_folder`); [] when they are."""
    if not (folder / "RUN.txt").is_file():
        return ["no RUN.txt (the run's commit, start and commands)"]
    if (folder / "per_run.csv").is_file():
        with open(folder / "per_run.csv", newline="") as f:
            if problems := commit_problems(folder, run, list(csv.DictReader(f))):
                return problems
    elif not run.get("commit"):
        return ["RUN.txt names no commit"]
    return verify_folder(folder) if (folder / "per_run.csv").is_file() else []


def next_number(folder: Path) -> int:
    """The next attempt's number: one past every run and planned attempt on record."""
    return max([n for n, *_ in attempts(folder)] + list(planned_hashes(folder).values()) + [0]) + 1


def plan_entry(folder: Path, changed: str) -> str:
    """Append the preset's current rules as a planned attempt (declared before its runs); returns
    the entry. ValueError (one line) when the rules are those already judged or already planned."""
    if not changed.strip() or "\n" in changed.strip():
        raise ValueError(f"--changed={changed!r}; valid: one non-empty line saying what changes and why")
    rules = rules_hash(folder.name)
    if rules is None:
        raise ValueError(f"{folder}: no rules for preset {folder.name!r}; valid: a results folder of a judged preset")
    judged = judged_hash(read_claims(folder)) if (folder / "claims.csv").exists() else None
    if rules == judged or rules in planned_hashes(folder) or any(h == rules for _, h, *_ in attempts(folder)):
        raise ValueError(f"{folder}: rules {rules} are on record already in {HISTORY}; valid: changed rules")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=folder.parent).stdout.strip() or "?"  # fmt: skip
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    ran = max([n for n, *_ in attempts(folder)] + [0])
    pending = [n for n in planned_hashes(folder).values() if n > ran]  # a plan not run yet: amended, same number
    number = max(pending) if pending else next_number(folder)
    text = "\n".join([f"## Attempt {number} — rules {rules}, planned before its runs", "",
                      f"- declared: {today}, at commit {commit} (the rules as committed after it), before any run "
                      "under them", f"- what changed and why: {changed.strip()}"]) + "\n"  # fmt: skip
    path = folder / HISTORY
    new = not path.exists() or path.stat().st_size == 0
    with open(path, "a") as f:  # append only
        f.write((header(folder) if new else "") + "\n" + text)
    return text


def main(argv: list[str] | None = None, prog: str = "python -m normbench.analysis.reports.history") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a results folder, e.g. results/bn_dropout_cpu")
    parser.add_argument("--changed", required=True, help="what changed since the attempt before, and why (one line)")
    parser.add_argument("--planned", action="store_true", help="declare the preset's current (changed) rules as the "
                        "next attempt, before its runs")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        text = plan_entry(args.folder, args.changed) if args.planned else append_entry(args.folder, args.changed)
    except ValueError as err:
        print(f"results_history: {err}", file=sys.stderr)
        return 2
    print(f"appended to {args.folder / HISTORY}:\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
