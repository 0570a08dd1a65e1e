"""An attempt's record in a results folder's ``HISTORY.md``, written and checked (issue 59, item 7).

`normbench.analysis.reports.history` writes each attempt's entry from the folder's committed files:
the heading (rules hash, run commit, start), ``- run: commit …``, ``- runs (runs.csv): N runs, seeds
a-b`` (`runs_summary`) and ``- verdicts: claims: supported 2; setup checks: passed 1`` (`tally`).
`entry_problems` reads the LAST attempt that ran (``run at``) back and, when it is the run whose
files the folder holds (its commit is ``RUN.txt``'s), compares each of those lines with the files:
a hand-edited tally or seed list, or files replaced under an old entry, is one problem line each.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from normbench.analysis.loading.attempts import parse_seeds

CHECK_VERDICTS = ("passed", "failed")
CLAIM_ORDER = ("supported", "opposite", "equivalent", "different", "inconclusive", "not judged")

RUN_HEADING = r"^## Attempt (\d+) — rules (\S+), run at (\S+) \(([^)]*)\)$"
"""An entry's heading in a folder's HISTORY.md (a run's, not a planned attempt's)."""
RUN_LINE = re.compile(r"^- run: commit (\S+?),", re.M)
RUNS_LINE = re.compile(r"^- runs \(runs\.csv\): (\d+) runs, seeds ([0-9, -]+?)(?:, \d+ [a-z].*)?$", re.M)
VERDICTS_LINE = re.compile(r"^- verdicts: (.+)$", re.M)


def tally(rows: list[dict[str, str]]) -> str:
    """``claims: supported 2, opposite 1; checks: failed 1`` from ``claims.csv``'s verdict column
    (the shared vocabulary first, in its order; any other word after it)."""
    claims = Counter(r["verdict"] for r in rows if r["verdict"] not in CHECK_VERDICTS)
    checks = Counter(r["verdict"] for r in rows if r["verdict"] in CHECK_VERDICTS)
    order = [v for v in CLAIM_ORDER if v in claims] + sorted(v for v in claims if v not in CLAIM_ORDER)
    text = "claims: " + (", ".join(f"{v} {claims[v]}" for v in order) or "none")
    if checks:
        text += "; setup checks: " + ", ".join(f"{v} {checks[v]}" for v in CHECK_VERDICTS if v in checks)
    return text


def seed_spans(seeds: Sequence[int]) -> str:
    """``0-4, 7, 100-102`` from the seeds (sorted, each once); ``?`` for none."""
    spans: list[list[int]] = []  # [first, last] of each run of consecutive seeds
    for seed in sorted(set(seeds)):
        if spans and seed == spans[-1][1] + 1:
            spans[-1][1] = seed
        else:
            spans.append([seed, seed])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans) or "?"


def runs_summary(rows: list[dict[str, str]]) -> str:
    """``20 runs, seeds 0-4`` (``, 6 diverged`` for every status but finished) from ``runs.csv``."""
    text = seed_spans([int(r["seed"]) for r in rows if (r.get("seed") or "").isdigit()])
    status = Counter(r.get("status") or "?" for r in rows)
    other = "".join(f", {n} {k}" for k, n in sorted(status.items()) if k != "finished")
    return f"{len(rows)} runs, seeds {text}{other}"


def same_commit(a: str, b: str) -> bool:
    """Two commits that name the same one: neither blank, one a prefix of the other."""
    a, b = a.strip(), b.strip()
    return bool(a and b) and (a.startswith(b) or b.startswith(a))


def last_run_entry(history: str) -> dict[str, str] | None:
    """The last attempt of a HISTORY.md text that ran (``run at``): its ``number``, ``rules``,
    ``commit``, ``start`` and the ``text`` of its block; None when no attempt ran."""
    blocks = [b for b in re.split(r"^(?=## )", history, flags=re.M) if re.match(RUN_HEADING, b.split("\n", 1)[0])]
    if not blocks:
        return None
    number, rules, commit, start = re.match(RUN_HEADING, blocks[-1].split("\n", 1)[0]).groups()  # type: ignore[union-attr]
    return {"number": number, "rules": rules, "commit": commit, "start": start, "text": blocks[-1]}


def entry_problems(
    entry: dict[str, str],
    run_commit: str,
    claims: list[dict[str, str]],
    per_run: list[dict[str, str]] | None,
    runs: list[dict[str, str]] | None,
    verdicts: bool = True,
) -> list[str]:
    """One line per difference between the last attempt's entry (`last_run_entry`) and the files it
    records: the rules hash (``claims.csv``), the run commit (``RUN.txt``), the seeds (``per_run.csv``;
    the count and statuses: ``runs.csv``, else ``per_run.csv``) and the verdict tally (``claims.csv``).
    ``[]`` when the entry is not the run the folder holds (its commit is not ``RUN.txt``'s).
    ``verdicts=False``: the tally is not compared (a folder whose rules were superseded: its claims
    were judged again by later code from the same runs, and its entry keeps the first judging's)."""
    if not same_commit(entry["commit"], run_commit):
        return []
    where = f"attempt {entry['number']} (run at {entry['commit']})"
    text, lines = entry["text"], []
    judged = ",".join(sorted({r.get("rules_hash") or "" for r in claims} - {""}))
    if entry["rules"] != judged:
        lines.append(f"{where} names rules {entry['rules']}, claims.csv was judged under {judged or 'none'}")
    ran = RUN_LINE.search(text)
    if not ran or not same_commit(ran.group(1), run_commit):
        lines.append(
            f"{where}: its '- run: commit' line names {ran.group(1) if ran else 'nothing'}, RUN.txt {run_commit}"
        )
    said = VERDICTS_LINE.search(text)
    if verdicts and (not said or said.group(1).strip() != tally(claims)):
        lines.append(f"{where}: verdicts {said.group(1).strip() if said else 'missing'!r}, claims.csv holds "
                     f"{tally(claims)!r}")  # fmt: skip
    return lines + _runs_problems(where, text, per_run, runs)


def _runs_problems(
    where: str, text: str, per_run: list[dict[str, str]] | None, runs: list[dict[str, str]] | None
) -> list[str]:
    """The entry's ``- runs (runs.csv)`` line against ``runs.csv`` (exactly as `runs_summary` writes
    it) and its seeds against ``per_run.csv``'s; no line and no tables: nothing to compare."""
    found = RUNS_LINE.search(text)
    if found is None:
        return [] if runs is None else [f"{where} has no '- runs (runs.csv): N runs, seeds …' line"]
    line, lines = found.group(0).split(": ", 1)[1], []
    if runs is not None and line != runs_summary(runs):
        lines.append(f"{where}: runs {line!r}, runs.csv holds {runs_summary(runs)!r}")
    if per_run is not None:  # with runs.csv, a run without metrics is in it and not in per_run.csv
        held = {int(r["seed"]) for r in per_run if (r.get("seed") or "").isdigit()}
        try:
            said = parse_seeds(found.group(2))
        except ValueError:  # a hand-edited list ("0-4, "): no seed read from it, so it differs
            said = set()
        if (held - said) if runs is not None else (held != said):
            lines.append(f"{where}: seeds {found.group(2).strip()!r}, per_run.csv holds seeds {seed_spans(held)!r}")
        if runs is None and int(found.group(1)) != len(per_run):
            lines.append(f"{where}: {found.group(1)} runs, per_run.csv holds {len(per_run)}")
    return lines

