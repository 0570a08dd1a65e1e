"""The analysis reads a recorded run's settings through its typed record (`Run.record`,
`normbench.config.load_record`), never by dotted key: ``run.get("norm.name")`` repeats no default
but hides a typo and a missing key alike, and a ``.get(key, default)`` can repeat a schema's default
wrongly (the leaderboard once said SGD's momentum was 0 where the optimizer's default is 0.9).

A dotted key that comes as data (a rule's ``select``, a grouping key) is read by `Run.get`; this
scan forbids a dotted key written as a literal in code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ANALYSIS = Path(__file__).resolve().parents[3] / "normbench" / "analysis"

NOT_YET = {  # being rewritten as figures-as-data (issue 45 item 5); each leaves this list when it reads run.record
}
"""Files the scan leaves out for now: the list only shrinks."""

NOT_RECORDS = {("judging/claims.py", "row.get('norm.name')")}
"""Dotted reads of something else than a record: a ``per_run.csv`` row, whose selector columns are
named by the config keys they hold (`normbench.analysis.judging.per_run`)."""


def dotted_reads(source: str) -> list[str]:
    """``line: call`` for every ``<x>.get("<a>.<b>", ...)`` with a dotted string literal as its key."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"):
            continue
        key = node.args[0] if node.args else None
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and "." in key.value.strip("."):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_scan_sees_a_dotted_read() -> None:
    source = 'def f(run, row):\n    return run.get("norm.name"), row.get("x", 1), run.get(key), run.get("model")\n'
    assert dotted_reads(source) == ["2: run.get('norm.name')"]
    assert dotted_reads('def g(r):\n    return r.config.get("optimizer.momentum", 0)\n')


def test_every_excluded_file_exists() -> None:
    """A file renamed or removed leaves the list (it must not hide a new file of the same name)."""
    assert not [name for name in sorted(NOT_YET) if not (ANALYSIS / name).is_file()]


SCANNED = sorted(p.relative_to(ANALYSIS).as_posix() for p in ANALYSIS.rglob("*.py"))
SCANNED = [name for name in SCANNED if name not in NOT_YET]
"""Every module of the analysis wing, by its path in it (``judging/claims.py``)."""


@pytest.mark.parametrize("name", SCANNED)
def test_no_dotted_read_of_a_record(name: str) -> None:
    found = [f for f in dotted_reads((ANALYSIS / name).read_text()) if (name, f.partition(": ")[2]) not in NOT_RECORDS]
    assert not found, f"{name} reads recorded configs by dotted key (use run.record.<group>.<key>): {found}"
