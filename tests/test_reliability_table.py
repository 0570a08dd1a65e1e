"""RELIABILITY.md's table is what the tests say: ``scripts/reliability_table.py --check``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO


@pytest.mark.e2e
def test_the_reliability_table_matches_the_tests() -> None:
    r = subprocess.run(
        [sys.executable, "scripts/reliability_table.py", "--check", "RELIABILITY.md"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:] + r.stdout[-3000:]


def test_every_fault_has_a_known_outcome_and_counts_each_case() -> None:
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import reliability_table
    finally:
        sys.path.remove(str(REPO / "scripts"))
    from tests.faults import Fault

    cases = {
        "tests/a.py::test_x[1]": Fault("f", "g", "one-line"),
        "tests/a.py::test_x[2]": Fault("f", "g", "one-line"),
        "tests/b.py::test_y": Fault("h", "i", "bit-exact"),
    }
    text = reliability_table.table(cases)
    assert "| f | g | one-line | 2 | `a.py::test_x` |" in text
    assert "**3 cases** (2 tests, 2 faults): **2 one-line errors**, 0 recorded results" in text
    assert "**1 bit-exact resumes**" in text
