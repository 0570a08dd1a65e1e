"""RELIABILITY.md's table is what the tests say: ``normbench-reports reliability --check RELIABILITY.md``
(`normbench.analysis.reports.reliability`)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from normbench.analysis.reports import reliability
from tests.conftest import REPO
from tests.faults import Fault


@pytest.mark.e2e
def test_the_reliability_table_matches_the_tests() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "normbench.analysis.reports.reliability", "--check", "RELIABILITY.md"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]


def test_every_fault_has_a_known_outcome_and_counts_each_case() -> None:
    cases = {
        "tests/a.py::test_x[1]": Fault("f", "g", "one-line"),
        "tests/a.py::test_x[2]": Fault("f", "g", "one-line"),
        "tests/b.py::test_y": Fault("h", "i", "bit-exact"),
    }
    text = reliability.table(cases)
    assert "| f | g | one-line | 2 | `a.py::test_x` |" in text
    assert "**3 cases** (2 tests, 2 faults): **2 one-line errors**, 0 recorded results" in text
    assert "**1 bit-exact resumes**" in text


def test_the_external_faults_name_test_files_it_collects_and_known_outcomes() -> None:
    """`EXTERNAL` (fault tests in files the decorator does not reach) names only files in `FILES`,
    with outcomes `tests.faults` knows, so `collect` can turn each into a `Fault`."""
    from tests.faults import OUTCOMES

    assert reliability.REPO == REPO
    assert {test.split("::")[0] for test in reliability.EXTERNAL} <= set(reliability.FILES)
    assert all(outcome in OUTCOMES for _, _, outcome in reliability.EXTERNAL.values())
    assert all((REPO / f).is_file() for f in reliability.FILES)


def test_every_test_file_that_declares_a_fault_is_collected() -> None:
    """A file whose tests carry ``@fault`` but is missing from `FILES` is never counted: issue 59's
    cases sat in 21 such files until they were listed."""
    decorated = re.compile(r"^@fault\(", re.M)
    tests = (REPO / "tests").rglob("test_*.py")
    declaring = {str(p.relative_to(REPO)) for p in tests if decorated.search(p.read_text())}
    assert declaring - set(reliability.FILES) == set()
