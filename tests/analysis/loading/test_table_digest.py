"""The digests of ``per_run.csv`` and ``plan.txt`` in ``RUN.txt`` (issue 59, items I41, I32 and I36):
a value edited within its range after the run, with the claims regenerated from the edited table, is
a problem for ``normbench-reports index --check``; the table written again from the runs is not. An
edited plan is named while the rules are those of the run."""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

from normbench.analysis.loading.table_digest import DIGEST_KEY, PLAN, digest_problem, stamp_digest
from normbench.analysis.reports import index
from tests.analysis.reports.test_attempt_record import FOLDER, edit_table, results  # noqa: F401
from tests.faults import fault


def folder_with(tmp_path: Path, run_txt: str = "commit: abc\n") -> Path:
    folder = tmp_path / "toy_cpu"
    folder.mkdir()
    (folder / "per_run.csv").write_text("source,seed,claim:x\nruns/0,1,0.25\nruns/1,2,0.5\n")
    (folder / "RUN.txt").write_text(run_txt)
    return folder


def test_the_stamp_is_the_tables_sha256_and_replaces_its_own_line(tmp_path: Path) -> None:
    folder = folder_with(tmp_path)
    assert stamp_digest(folder) == folder / "RUN.txt" and stamp_digest(folder) is not None  # twice: one line
    want = hashlib.sha256((folder / "per_run.csv").read_bytes()).hexdigest()[:16]
    lines = (folder / "RUN.txt").read_text().splitlines()
    assert lines[0] == "commit: abc" and [line for line in lines if line.startswith(DIGEST_KEY)] == [lines[1]]
    assert lines[1].startswith(f"{DIGEST_KEY}: {want} ") and digest_problem(folder) is None


@fault("per_run.csv edited after its run within every range, its claims regenerated from it (issue 59)",
       "index --check names the folder: the table's SHA-256 is not the one RUN.txt keeps",
       "one-line")  # fmt: skip
def test_a_value_edited_within_its_range_is_named(tmp_path: Path) -> None:
    folder = folder_with(tmp_path)
    stamp_digest(folder)
    (folder / "per_run.csv").write_text("source,seed,claim:x\nruns/0,1,0.25\nruns/1,2,0.45\n")
    problem = digest_problem(folder)
    assert problem is not None and "edited after" in problem and "normbench-figures" in problem
    stamp_digest(folder)  # written again (from the runs): the record follows
    assert digest_problem(folder) is None


def test_no_line_no_check_and_no_run_txt_nothing_written(tmp_path: Path) -> None:
    folder = folder_with(tmp_path)
    assert digest_problem(folder) is None  # a RUN.txt from before the digest
    (folder / "RUN.txt").unlink()
    assert stamp_digest(folder) is None and not (folder / "RUN.txt").exists()


@fault("per_run.csv edited after its run within every range, its claims regenerated from it (issue 59)",
       "index --check names the folder: the table's SHA-256 is not the one RUN.txt keeps",
       "one-line")  # fmt: skip
def test_index_check_finds_an_edited_saturated_fraction(results: Path) -> None:  # noqa: F811
    """I41 on a copy of results/bn_saturation_cpu (pilot/ too, I32): stamped, clean; a value the claims
    read edited by 1 % (within every bound), a problem naming the folder."""
    folder = results / FOLDER.name
    shutil.copytree(FOLDER / "pilot", folder / "pilot")
    for f in (folder, folder / "pilot"):
        assert stamp_digest(f) is not None
    assert index.digest_problems(results) == []
    for f in (folder, folder / "pilot"):
        column = next(c for c in (f / "per_run.csv").read_text().splitlines()[0].split(",") if c.startswith("claim:"))
        edit_table(f / "per_run.csv", lambda row, c=column: row.update({c: f"{float(row[c]) * 1.01!r}"}))
    problems = index.digest_problems(results)
    assert [p.split(":")[0] for p in problems] == [f"results/{FOLDER.name}", f"results/{FOLDER.name}/pilot"]


@fault("plan.txt edited after its run: a pilot spread, n or needs_n (issue 59)",
       "index --check names the folder: the plan's SHA-256 is not RUN.txt's, or its keys not the rules'",
       "one-line")  # fmt: skip
def test_an_edited_plan_is_named_until_a_new_attempt_is_planned(tmp_path: Path) -> None:
    """A copy of results/gn_groups_cpu (its rules are those RUN.txt names): plan.txt stamped, then a
    pilot spread in its table edited, a problem; once RUN.txt's rules are not the preset's any more
    (a new attempt planned, its plan.txt the next run's to stamp), no check."""
    folder = tmp_path / "gn_groups_cpu"
    folder.mkdir()
    for name in ("RUN.txt", "per_run.csv", "plan.txt"):
        shutil.copy(FOLDER.parent / "gn_groups_cpu" / name, folder / name)
    stamp_digest(folder)
    want = hashlib.sha256((folder / "plan.txt").read_bytes()).hexdigest()[:16]
    assert f"{PLAN.key}: {want} (" in (folder / "RUN.txt").read_text() and digest_problem(folder) is None
    plan = (folder / "plan.txt").read_text()
    (folder / "plan.txt").write_text(plan.replace("| 1.04; 0.85 →", "| 0.94; 0.85 →", 1))
    problem = digest_problem(folder)
    assert problem is not None and problem.startswith("plan.txt has sha256 ") and f"RUN.txt names {want}" in problem
    run_txt = (folder / "RUN.txt").read_text()
    (folder / "RUN.txt").write_text(re.sub(r"^rules hash: \S+", "rules hash: 0123456789abcdef", run_txt, flags=re.M))
    assert digest_problem(folder) is None
