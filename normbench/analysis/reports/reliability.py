"""The faults and bad inputs normbench is tested against, counted from the tests themselves.

A test of a fault carries ``@fault(what, gets, outcome)`` (`tests.faults`); tests in files that
predate the decorator are named in `EXTERNAL`. This command collects the checkout's test files with
pytest (in process, ``--collect-only``: a parametrized test counts each case), groups the cases by
fault and prints the table and the figures that ``RELIABILITY.md`` holds between its markers. It
reads the tests of the checkout this package runs from (an editable install), from any folder.

    normbench-reports reliability                          # the table, from collection
    normbench-reports reliability --run                    # run every case too; count what passed
    normbench-reports reliability --check RELIABILITY.md   # exit 1 if the file's table differs

(``python -m normbench.analysis.reports.reliability`` is the same.)

Tracebacks, silent wrong results and data lost are 0 by construction of the cases, not by
counting output: every case fails on a traceback (where the user should get one line), on a
wrong or unflagged result, and on a file or folder removed or rewritten that should stay; so in a
suite where every case passes, each is 0. ``--run`` checks that every case passes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import sys
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[3]
"""The checkout whose tests are counted (this package's, installed editable)."""

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
    "tests/analysis/loading/test_pooling.py",
    "tests/analysis/loading/test_run_loading.py",
    "tests/test_cli.py",
    "tests/test_newcomer.py",
    "tests/data/test_cifar.py",
    "tests/data/test_translation.py",
    "tests/data/test_data_edges.py",
    "tests/norms/test_compile.py",
    "tests/analysis/figures/test_plot.py",
    "tests/analysis/judging/test_evidence.py",
    "tests/analysis/findings/test_verify.py",
    "tests/test_results_index.py",
    "tests/analysis/loading/test_table_digest.py",
    "tests/analysis/judging/test_plan_record.py",
    "tests/analysis/judging/test_plan_cli.py",
    "tests/data/test_prepare.py",
    "tests/data/test_prepare_cli.py",
    "tests/data/test_roots.py",
    "tests/test_optuna.py",
    "tests/test_wandb.py",
    "tests/sinks/test_background.py",
    "tests/test_wandb_start.py",
    "tests/test_yaml_errors.py",
    "tests/test_hydra_errors.py",
    "tests/analysis/leaderboard/test_leaderboard_report.py",
    "tests/test_help.py",
    "tests/test_override_text.py",
    "tests/run/test_refusals.py",
    "tests/analysis/loading/test_refused_jobs.py",
    "tests/test_sweep_table.py",
    "tests/resume/test_resume_overrides.py",
]

_BAD_CIFAR = "a bad CIFAR-10 file (short, garbage, wrong shape or labels)"
EXTERNAL: dict[str, tuple[str, str, str]] = {
    "tests/test_cli.py::test_missing_cifar_offline_is_one_clear_line_and_leaves_nothing": (
        "CIFAR-10 missing, offline",
        "one line naming the folder and the remedies; nothing written",
        "one-line",
    ),
    "tests/data/test_cifar.py::test_a_bad_file_is_one_error_naming_it": (
        _BAD_CIFAR,
        "one error naming the file",
        "one-line",
    ),
    "tests/data/test_cifar.py::test_a_bad_file_stops_the_run_before_anything_is_written": (
        _BAD_CIFAR + ", through the command",
        "one line naming the file before W&B or files are made",
        "one-line",
    ),
    "tests/data/test_cifar.py::test_a_pickle_that_runs_code_is_refused_and_runs_nothing": (
        "a CIFAR-10 pickle that runs code",
        "refused with one line; nothing runs",
        "one-line",
    ),
    "tests/data/test_translation.py::test_missing_or_misaligned_files_are_one_clear_error": (
        "translation files missing or misaligned",
        "one error naming the files",
        "one-line",
    ),
    "tests/data/test_translation.py::test_an_empty_file_is_one_error_naming_it": (
        "an empty translation file",
        "one error naming it",
        "one-line",
    ),
    "tests/data/test_translation.py::test_bytes_that_are_not_utf8_are_one_error_naming_file_and_line": (
        "a translation file that is not UTF-8",
        "one error naming the file and line",
        "one-line",
    ),
    "tests/data/test_translation.py::test_max_positions_that_drops_every_pair_is_one_error_with_the_value_that_works": (
        ("dataset.max_positions that drops every pair", "one error with a value that works", "one-line")
    ),
    "tests/data/test_translation.py::test_training_text_that_is_all_blank_is_one_error": (
        "training text that is all blank",
        "one error",
        "one-line",
    ),
    "tests/data/test_translation.py::test_a_byte_order_mark_is_no_text": (
        "a UTF-8 byte order mark at the start of a translation file (issue 59)",
        "removed by every reader alike: never in the BPE vocabulary or a reference",
        "result",
    ),
    "tests/data/test_translation.py::test_bad_translation_data_through_the_cli_is_one_line_and_exit_2": (
        "bad translation data, through the command",
        "one line, exit 2",
        "one-line",
    ),
}
"""Fault tests in files the decorator does not reach (their owners' files): (what, gets, outcome)."""

START, END = "<!-- reliability-table:start -->", "<!-- reliability-table:end -->"


def faults() -> ModuleType:
    """The checkout's ``tests.faults`` (`Fault`, `OUTCOMES`); SystemExit (one line) without a checkout."""
    if not (REPO / "tests" / "faults.py").is_file():
        raise SystemExit(f"reliability: no tests/faults.py under {REPO}; valid: a normbench checkout installed "
                         "editable (pip install -e .)")  # fmt: skip
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    return importlib.import_module("tests.faults")


@dataclass
class Collector:
    """A pytest plugin: the fault of each collected case, and (when run) each case's outcome."""

    cases: dict[str, Any] = field(default_factory=dict)
    results: dict[str, str] = field(default_factory=dict)
    external: Mapping[str, Any] = field(default_factory=dict)
    """`EXTERNAL` as `Fault` values."""

    def pytest_collection_modifyitems(self, items: list[Any]) -> None:
        for item in items:
            test = item.nodeid.split("[")[0]
            found = getattr(getattr(item, "function", None), "fault", None) or self.external.get(test)
            if found is not None:
                self.cases[item.nodeid] = found

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.nodeid in self.cases and (report.when == "call" or report.outcome != "passed"):
            self.results.setdefault(report.nodeid, report.outcome)


def collect() -> dict[str, Any]:
    """Each collected fault case's node id (relative to the checkout) and its `Fault`."""
    import pytest

    fault = faults().Fault
    plugin = Collector(external={test: fault(*spec) for test, spec in EXTERNAL.items()})
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", *(str(REPO / f) for f in FILES)],
                           plugins=[plugin])  # fmt: skip
    if code != 0:
        raise SystemExit(f"collection failed (pytest exit code {code}):\n{out.getvalue()[-3000:]}")
    return plugin.cases


def run(cases: dict[str, Any]) -> dict[str, str]:
    import pytest

    plugin = Collector(cases=dict(cases))
    pytest.main(["-q", "-p", "no:cacheprovider", *(str(REPO / nodeid) for nodeid in cases)], plugins=[plugin])
    return plugin.results


def table(cases: dict[str, Any]) -> str:
    """The Markdown table (one row per fault: `tests.faults.Fault`) and the figures."""
    outcomes = faults().OUTCOMES
    groups: dict[Any, list[str]] = defaultdict(list)
    for nodeid, found in cases.items():
        groups[found].append(nodeid)
    order = list(outcomes)
    rows = sorted(groups.items(), key=lambda kv: (order.index(kv[0].outcome), kv[0].what.casefold()))
    lines = ["| fault or bad input | what it gets | outcome | cases | test |", "|---|---|---|---|---|"]
    for found, nodeids in rows:
        tests = sorted({n.split("[")[0] for n in nodeids})
        shown = "<br>".join(f"`{t.split('::')[0].removeprefix('tests/')}::{t.split('::')[1]}`" for t in tests)
        lines.append(f"| {found.what} | {found.gets} | {found.outcome} | {len(nodeids)} | {shown} |")
    count = {o: sum(1 for f in cases.values() if f.outcome == o) for o in outcomes}
    tests = len({n.split("[")[0] for n in cases})
    lines += [
        "",
        f"**{len(cases)} cases** ({tests} tests, {len(groups)} faults): "
        f"**{count['one-line']} one-line errors**, {count['result']} recorded results, "
        f"{count['kept']} cases of nothing lost, **{count['bit-exact']} bit-exact resumes**, "
        f"{count['exact']} compiled as eager computes; "
        "**tracebacks: 0, silent wrong results: 0, data lost: 0**.",
        "",
        "Outcomes: " + "; ".join(f"*{o}*: {text}" for o, text in outcomes.items()) + ".",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None, prog: str = "python -m normbench.analysis.reports.reliability") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="run every case and report the ones that do not pass")
    parser.add_argument("--check", type=Path, help="a Markdown file whose table must equal this one")
    args = parser.parse_args(argv)
    doc = None
    if args.check is not None:  # read first: an unreadable file is a usage error, before any collection
        try:
            doc = args.check.read_text()
        except (OSError, UnicodeDecodeError) as e:  # missing, a folder, not text: one line
            print(f"{prog}: error: --check {str(args.check)!r} cannot be read ({type(e).__name__}: "
                  f"{getattr(e, 'strerror', None) or e}); pass the Markdown file that holds the table",
                  file=sys.stderr)  # fmt: skip
            return 2
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
    if doc is not None:
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
