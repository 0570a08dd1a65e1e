"""The faults and bad inputs normbench is tested against, counted from the tests themselves.

A test of a fault carries ``@fault(what, gets, outcome)`` (`tests.faults`); tests in files that
predate the decorator are named in `EXTERNAL`. This script collects the test files with pytest
(in process, ``--collect-only``: a parametrized test counts each case), groups the cases by fault
and prints the table and the figures that ``RELIABILITY.md`` holds between its markers.

    python scripts/reliability_table.py                        # the table, from collection
    python scripts/reliability_table.py --run                  # run every case too; count what passed
    python scripts/reliability_table.py --check RELIABILITY.md # exit 1 if the file's table differs

Tracebacks, silent wrong results and data lost are 0 by construction of the cases, not by
counting output: every case fails on a traceback (where the user should get one line), on a
wrong or unflagged result, and on a file or folder removed or rewritten that should stay; so in a
suite where every case passes, each is 0. ``--run`` checks that every case passes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.faults import OUTCOMES, Fault  # noqa: E402

FILES = [
    "tests/test_validate.py",
    "tests/test_bad_values.py",
    "tests/test_rundir.py",
    "tests/test_checkpoint.py",
    "tests/test_reliability.py",
    "tests/test_faults.py",
    "tests/test_file_faults.py",
    "tests/test_resume_records.py",
    "tests/test_edges.py",
    "tests/test_sweep.py",
    "tests/test_damaged_records.py",
    "tests/analysis/test_pooling.py",
    "tests/analysis/test_run_loading.py",
    "tests/test_cli.py",
    "tests/test_newcomer.py",
    "tests/data/test_cifar.py",
    "tests/data/test_translation.py",
    "tests/data/test_data_edges.py",
    "tests/norms/test_compile.py",
    "tests/analysis/test_plot.py",
]

_BAD_CIFAR = "a bad CIFAR-10 file (short, garbage, wrong shape or labels)"
EXTERNAL = {
    "tests/test_cli.py::test_missing_cifar_offline_is_one_clear_line_and_leaves_nothing": Fault(
        "CIFAR-10 missing, offline", "one line naming the folder and the remedies; nothing written", "one-line"
    ),
    "tests/data/test_cifar.py::test_a_bad_file_is_one_error_naming_it": Fault(
        _BAD_CIFAR, "one error naming the file", "one-line"
    ),
    "tests/data/test_cifar.py::test_a_bad_file_stops_the_run_before_anything_is_written": Fault(
        _BAD_CIFAR + ", through the command", "one line naming the file before W&B or files are made", "one-line"
    ),
    "tests/data/test_cifar.py::test_a_pickle_that_runs_code_is_refused_and_runs_nothing": Fault(
        "a CIFAR-10 pickle that runs code", "refused with one line; nothing runs", "one-line"
    ),
    "tests/data/test_translation.py::test_missing_or_misaligned_files_are_one_clear_error": Fault(
        "translation files missing or misaligned", "one error naming the files", "one-line"
    ),
    "tests/data/test_translation.py::test_an_empty_file_is_one_error_naming_it": Fault(
        "an empty translation file", "one error naming it", "one-line"
    ),
    "tests/data/test_translation.py::test_bytes_that_are_not_utf8_are_one_error_naming_file_and_line": Fault(
        "a translation file that is not UTF-8", "one error naming the file and line", "one-line"
    ),
    "tests/data/test_translation.py::test_max_positions_that_drops_every_pair_is_one_error_with_the_value_that_works": (
        Fault("dataset.max_positions that drops every pair", "one error with a value that works", "one-line")
    ),
    "tests/data/test_translation.py::test_training_text_that_is_all_blank_is_one_error": Fault(
        "training text that is all blank", "one error", "one-line"
    ),
    "tests/data/test_translation.py::test_bad_translation_data_through_the_cli_is_one_line_and_exit_2": Fault(
        "bad translation data, through the command", "one line, exit 2", "one-line"
    ),
}
"""Fault tests in files this script's decorator does not reach (their owners' files)."""

START, END = "<!-- reliability-table:start -->", "<!-- reliability-table:end -->"


@dataclass
class Collector:
    """A pytest plugin: the fault of each collected case, and (when run) each case's outcome."""

    cases: dict[str, Fault] = field(default_factory=dict)
    results: dict[str, str] = field(default_factory=dict)

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            test = item.nodeid.split("[")[0]
            found = getattr(getattr(item, "function", None), "fault", None) or EXTERNAL.get(test)
            if found is not None:
                self.cases[item.nodeid] = found

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.nodeid in self.cases and (report.when == "call" or report.outcome != "passed"):
            self.results.setdefault(report.nodeid, report.outcome)


def collect() -> dict[str, Fault]:
    plugin = Collector()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *FILES], plugins=[plugin])
    if code != 0:
        raise SystemExit(f"collection failed (pytest exit code {code}):\n{out.getvalue()[-3000:]}")
    return plugin.cases


def run(cases: dict[str, Fault]) -> dict[str, str]:
    plugin = Collector(cases=dict(cases))
    pytest.main(["-q", "-p", "no:cacheprovider", *cases], plugins=[plugin])
    return plugin.results


def table(cases: dict[str, Fault]) -> str:
    """The Markdown table (one row per fault) and the figures."""
    groups: dict[Fault, list[str]] = defaultdict(list)
    for nodeid, found in cases.items():
        groups[found].append(nodeid)
    order = list(OUTCOMES)
    rows = sorted(groups.items(), key=lambda kv: (order.index(kv[0].outcome), kv[0].what.casefold()))
    lines = ["| fault or bad input | what it gets | outcome | cases | test |", "|---|---|---|---|---|"]
    for found, nodeids in rows:
        tests = sorted({n.split("[")[0] for n in nodeids})
        shown = "<br>".join(f"`{t.split('::')[0].removeprefix('tests/')}::{t.split('::')[1]}`" for t in tests)
        lines.append(f"| {found.what} | {found.gets} | {found.outcome} | {len(nodeids)} | {shown} |")
    count = {o: sum(1 for f in cases.values() if f.outcome == o) for o in OUTCOMES}
    tests = len({n.split("[")[0] for n in cases})
    lines += [
        "",
        f"**{len(cases)} cases** ({tests} tests, {len(groups)} faults): "
        f"**{count['one-line']} one-line errors**, {count['result']} recorded results, "
        f"{count['kept']} cases of nothing lost, **{count['bit-exact']} bit-exact resumes**, "
        f"{count['exact']} compiled as eager computes; "
        "**tracebacks: 0, silent wrong results: 0, data lost: 0**.",
        "",
        "Outcomes: " + "; ".join(f"*{o}*: {text}" for o, text in OUTCOMES.items()) + ".",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="run every case and report the ones that do not pass")
    parser.add_argument("--check", type=Path, help="a Markdown file whose table must equal this one")
    args = parser.parse_args(argv)
    cases = collect()
    text = table(cases)
    if args.run:
        results = run(cases)
        missing = sorted(set(cases) - set(results))
        bad = {n: r for n, r in results.items() if r != "passed"}
        print(f"ran {len(results)} of {len(cases)} cases: {len(results) - len(bad)} passed", file=sys.stderr)
        for nodeid, outcome in sorted(bad.items()):
            print(f"  {outcome}: {nodeid}", file=sys.stderr)
        for nodeid in missing:
            print(f"  not run: {nodeid}", file=sys.stderr)
        if bad or missing:
            return 1
    if args.check is not None:
        doc = args.check.read_text()
        if START not in doc or END not in doc:
            print(f"{args.check} has no {START} ... {END} block", file=sys.stderr)
            return 1
        inside = doc.split(START, 1)[1].split(END, 1)[0].strip()
        if inside != text:
            print(f"{args.check}'s table differs from the tests'; paste this between its markers:", file=sys.stderr)
            print(text)
            return 1
        return 0
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
