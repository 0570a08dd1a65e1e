"""Committed results checked against the code (issue 59, item 1): a results folder's
``claims.csv`` must be what the current code judges from its ``per_run.csv``, under the rules the
table's ``rules_hash`` names (current or superseded: `normbench.analysis.judging.claims.judge_rows`).

`verify_folder` re-reads ``per_run.csv`` (vouched for: `normbench.analysis.judging.evidence`), re-judges it,
writes the rebuilt ``claims.csv`` / ``claims.md`` to a scratch folder with the writer
``normbench-figures`` uses, and compares them with the committed ones: every column of every row,
numbers to a relative 1e-9 (NaN equals NaN), text exactly, and ``claims.md`` line by line. It
returns one line per difference (none: the folder is what its evidence says). A hand-edited
verdict, estimate or interval is a difference; so is a ``claims.csv`` written by older code (the
folder must be regenerated). ``normbench-reports index --check`` runs it on every results folder.
"""

from __future__ import annotations

import csv
import inspect
import math
import tempfile
from collections.abc import Iterable
from pathlib import Path

from normbench.analysis.judging.claims import judge_rows, rules_of_rows, write_claims
from normbench.analysis.judging.per_run import read_per_run, vouch_whole
from normbench.analysis.judging.verdicts import check_fresh_seeds
from normbench.analysis.wording.claims_text import write_claims_markdown
from normbench.base.errors import ConfigError

REL_TOL = 1e-9
PILOT = "pilot"


def _read_table(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def same_cell(committed: str, rebuilt: str, rel_tol: float = REL_TOL) -> bool:
    """Whether two ``claims.csv`` cells agree: numbers to ``rel_tol`` (NaN equals NaN, infinities
    by sign), anything else exactly."""
    if committed == rebuilt:
        return True
    a, b = _number(committed), _number(rebuilt)
    if a is None or b is None:
        return False
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rel_tol, abs_tol=0.0)


def compare_claims(committed: Path, rebuilt: Path) -> list[str]:
    """One line per difference between two ``claims.csv`` files (columns, rows by ``id``, cells)."""
    columns, rows = _read_table(committed)
    new_columns, new_rows = _read_table(rebuilt)
    where = str(committed)
    lines = [f"{where}: column {c!r} is missing (the current code writes it): regenerate the folder"
             for c in new_columns if c not in columns]  # fmt: skip
    lines += [f"{where}: column {c!r} is not one the current code writes" for c in columns if c not in new_columns]
    ids, new_ids = [r.get("id", "") for r in rows], [r.get("id", "") for r in new_rows]
    if ids != new_ids:
        lines.append(f"{where}: claims {ids} but the rebuilt table has {new_ids}")
    new_by_id = {r.get("id", ""): r for r in new_rows}
    shared = [c for c in new_columns if c in columns and c != "id"]
    for row in rows:
        other = new_by_id.get(row.get("id", ""))
        if other is None:
            continue
        for column in shared:
            if not same_cell(row[column], other[column]):
                lines.append(f"{where}: {row['id']}: {column} is {row[column]!r}, rebuilt from per_run.csv "
                             f"{other[column]!r}")  # fmt: skip
    return lines


def _compare_markdown(committed: Path, rebuilt: Path) -> list[str]:
    if not committed.is_file():
        return [f"{committed} is missing"]
    old, new = committed.read_text().splitlines(), rebuilt.read_text().splitlines()
    if old == new:
        return []
    at = next((i for i, (x, y) in enumerate(zip(old, new, strict=False)) if x != y), min(len(old), len(new)))
    return [f"{committed}: differs from the one rebuilt from per_run.csv from line {at + 1} on"]


def _judge(preset: str, folder: Path, pilot: bool, earlier_seeds: Iterable[int]) -> tuple[list, list[str]]:
    """The claims judged from the folder's ``per_run.csv``, and a line when its confirmatory seeds
    (those of a rules' block, as `check_fresh_seeds` counts them) reuse an earlier attempt's. Only
    those count as reused: seeds outside every block are an exploratory attempt's, reused knowingly,
    and ``normbench-figures`` judged them so."""
    rows = read_per_run(folder / "per_run.csv", preset)
    rules = rules_of_rows(preset, rows) if not pilot else None
    if rules is not None:  # a confirmatory table is the whole attempt: no run left out
        vouch_whole(rows, rules, preset, str(folder / "per_run.csv"))
    blocks = list(rules.seeds.values()) if rules is not None else []
    earlier = {s for s in earlier_seeds if any(s in b for b in blocks)}
    lines = []
    if earlier and rules is not None:
        try:
            check_fresh_seeds(rules, earlier, rows)
        except ConfigError as e:
            lines.append(f"{folder / 'per_run.csv'}: {e}")
    if "earlier_seeds" in inspect.signature(judge_rows).parameters:
        return judge_rows(preset, rows, pilot, earlier_seeds=earlier), lines
    return judge_rows(preset, rows, pilot), lines


def verify_folder(
    folder: Path,
    preset: str | None = None,
    pilot: bool | None = None,
    earlier_seeds: Iterable[int] = (),
    pilots: bool = False,
) -> list[str]:
    """One line per difference between ``folder``'s committed ``claims.csv`` / ``claims.md`` and
    those the current code judges from its ``per_run.csv`` (module docstring); ``[]``: it matches.
    ``preset``: default the folder's name (``results/<preset>``; a ``pilot`` folder: its parent's
    name, judged as a pilot). ``pilots``: check the folder's ``pilot/`` subfolder too, where it
    holds both files (off by default: a pilot's claims size a plan and judge nothing, and its rules
    are often not kept). ``earlier_seeds``: the seeds of the folder's earlier attempts
    (`normbench.analysis.loading.attempts.earlier_seeds`); those in a rules' confirmatory block that
    the table reuses are a problem line (`check_fresh_seeds`) and its claims are judged with them."""
    folder = Path(folder)
    is_pilot = folder.name == PILOT if pilot is None else pilot
    preset = preset or (folder.parent.name if is_pilot else folder.name)
    per_run, claims = folder / "per_run.csv", folder / "claims.csv"
    if not claims.is_file() or not per_run.is_file():
        return [f"{folder}: no {'claims.csv' if per_run.is_file() else 'per_run.csv'} to check"]
    try:
        judged, lines = _judge(preset, folder, is_pilot, earlier_seeds)
    except (ConfigError, ValueError) as e:
        return [f"{per_run}: cannot be re-judged: {e}"]
    with tempfile.TemporaryDirectory(prefix="normbench-verify-") as scratch:
        write_claims(judged, scratch)
        with open(Path(scratch) / "claims.csv", newline="") as f:  # claims.md as people read it (issue 57)
            write_claims_markdown(preset, list(csv.DictReader(f)), Path(scratch), pilot=is_pilot)
        lines += compare_claims(claims, Path(scratch) / "claims.csv")
        lines += _compare_markdown(folder / "claims.md", Path(scratch) / "claims.md")
    sub = folder / PILOT
    if pilots and not is_pilot and (sub / "per_run.csv").is_file() and (sub / "claims.csv").is_file():
        lines += verify_folder(sub, preset, True)
    return lines
