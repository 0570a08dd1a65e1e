"""What the analysis commands read (issue 47): one run read twice (a sweep passed twice, a run
folder copied or linked) is one line naming both; symlinked run folders are followed; every
folder found and not used is named with the reason; a folder with no usable run is one line,
exit 2; ``--out`` that cannot be written is one line; one seed per norm gets no verdict."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from normbench.analysis.figures import figures_cli
from normbench.analysis.leaderboard.leaderboard import NO_RULES
from normbench.analysis.leaderboard.leaderboard_report import load_runs
from normbench.analysis.leaderboard.leaderboard_report import main as leaderboard_main
from normbench.analysis.loading.runs import load_local_runs
from tests.analysis.leaderboard.test_leaderboard import write_job
from tests.analysis.loading.test_pooling import one_error
from tests.conftest import REPO, cli_env
from tests.faults import fault
from tests.test_faults import UNSHARE, needs_mounts


def sweep(root: Path, seeds: int = 2) -> Path:
    for seed in range(seeds):
        for i, norm in enumerate(("bn", "gn")):
            write_job(root, f"{norm}{seed}", norm=norm, seed=seed, score=0.8 + 0.01 * seed - 0.05 * i)
    return root


def command(name: str, runs: list[Path], out: Path) -> int:
    if name == "leaderboard":
        return leaderboard_main([*map(str, runs), "--out", str(out)])
    return figures_cli.main(["santurkar_vgg", "--runs", *map(str, runs), "--out", str(out)])


def warnings(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("normbench: warning:")]


# ---------------------------------------------------------------------------------------------
# One run read twice


def _twice(tmp_path: Path, how: str) -> tuple[list[Path], str]:
    """The folders passed and the start of the expected message for a run read twice ``how``."""
    root = sweep(tmp_path / "sweep")
    if how == "the sweep passed twice":
        return [root, root], f"{root}/bn0 and {root}/bn0 are the same run folder"
    if how == "the sweep by two paths (a link)":
        (tmp_path / "latest").symlink_to(root)
        return [root, tmp_path / "latest"], f"{tmp_path}/latest/bn0 and {root}/bn0 are the same run folder ({root}/bn0)"
    if how == "a link to a job inside the sweep":
        (root / "best").symlink_to(root / "gn1")
        return [root], f"{root}/gn1 and {root}/best are the same run folder ({root}/gn1)"
    other = tmp_path / "copy"
    shutil.copytree(root / "gn1", other / "gn1")  # a run copied: another folder, the same seed of the same norm
    return [root, other], f"{root}/gn1 and {other}/gn1 are the same run (seed 1 of one setting)"


TWICE = ["the sweep passed twice", "the sweep by two paths (a link)", "a link to a job inside the sweep",
         "a run copied into another folder"]  # fmt: skip


@pytest.mark.parametrize("name", ["leaderboard", "figures"])
@pytest.mark.parametrize("how", TWICE)
@fault(
    "one run read twice by an analysis command (a sweep passed twice, a run folder linked or copied)",
    "one line naming both, exit 2; nothing written",
    "one-line",
)
def test_a_run_read_twice_is_one_line_naming_both(tmp_path, capsys, name, how) -> None:
    runs, expected = _twice(tmp_path, how)
    out = tmp_path / "out"
    assert command(name, runs, out) == 2
    error = one_error(capsys, f"normbench-{name}")
    assert error.startswith(f"normbench-{name}: error: {expected}") and "counted twice" in error, error
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# Found and not used: named; none usable: one line


@fault(
    "a symlinked run folder in a sweep folder",
    "followed: read like the others",
    "result",
)
def test_symlinked_run_folders_are_followed(tmp_path) -> None:
    root = tmp_path / "sweep"
    root.mkdir()
    elsewhere = sweep(tmp_path / "elsewhere")
    for job in sorted(elsewhere.iterdir()):
        (root / job.name).symlink_to(job)
    runs = load_runs([root])
    assert sorted(r.source for r in runs) == [f"{root}/{n}" for n in ("bn0", "bn1", "gn0", "gn1")]
    assert len(load_local_runs([root])) == 4


@fault(
    "job folders an analysis command cannot use (no metrics, an attempt set aside in restarts/, not a normbench run)",
    "each named in a warning with the reason; the rest read",
    "result",
)
def test_every_folder_found_and_not_used_is_named_with_the_reason(tmp_path, capsys) -> None:
    root = sweep(tmp_path / "sweep")
    write_job(root, "ln0", norm="ln", seed=0, error="norm.groups=7 does not divide 16")  # refused: no metrics
    aside = root / "bn0" / "restarts" / "1"
    aside.mkdir(parents=True)
    shutil.copy(root / "bn0" / "metrics.jsonl", aside / "metrics.jsonl")
    shutil.copy(root / "bn0" / "config.yaml", aside / "config.yaml")
    (root / "notes").mkdir()
    (root / "notes" / "summary.json").write_text(json.dumps({"accuracy": 0.9}))
    runs = load_local_runs([root])
    assert sorted(r.name for r in runs) == ["bn0", "bn1", "gn0", "gn1"]
    assert warnings(capsys) == [
        f"normbench: warning: {aside}: not used: an earlier attempt, set aside when the run in {root / 'bn0'} "
        "started over",
        f"normbench: warning: {root / 'ln0'}: not used: no metrics.jsonl (status failed: norm.groups=7 does not "
        "divide 16)",
        f"normbench: warning: {root / 'notes'}: not used: no config.yaml or .hydra/config.yaml: not a normbench run",
    ]
    board = load_runs([root])  # the leaderboard counts the refused job, as a failed run
    assert sorted(r.name for r in board) == ["bn0", "bn1", "gn0", "gn1", "ln0"]
    assert len(warnings(capsys)) == 2


@pytest.mark.parametrize("name", ["leaderboard", "figures"])
@pytest.mark.parametrize("content", ["a foreign summary.json", "a config without norm, model, dataset"])
@fault(
    "an analysis command on a folder whose runs are not normbench runs",
    "one line naming the folder and why, exit 2; nothing written",
    "one-line",
)
def test_a_folder_with_no_usable_run_is_one_line(tmp_path, capsys, name, content) -> None:
    job = tmp_path / "other" / "job"
    job.mkdir(parents=True)
    (job / "summary.json").write_text(json.dumps({"status": "finished", "accuracy": 0.9}))
    if content != "a foreign summary.json":
        (job / "config.yaml").write_text("learning_rate: 0.1\n")
        (job / "metrics.jsonl").write_text('{"step": 1, "loss": 1.0}\n')
    out = tmp_path / "out"
    assert command(name, [tmp_path / "other"], out) == 2
    error = one_error(capsys, f"normbench-{name}")
    assert f"{tmp_path / 'other'}' holds no usable runs (1 found: " in error and "not a normbench run" in error
    assert not out.exists()
    if name == "leaderboard" and content != "a foreign summary.json":
        assert "its config has no norm, model, dataset" in error


# ---------------------------------------------------------------------------------------------
# --out that cannot be written


@fault(
    "normbench-leaderboard --out through a file",
    "one line naming it, exit 2; nothing written",
    "one-line",
)
def test_leaderboard_out_through_a_file_is_one_line(tmp_path, capsys) -> None:
    root = sweep(tmp_path / "sweep")
    (tmp_path / "report").write_text("mine\n")
    assert leaderboard_main([str(root), "--out", str(tmp_path / "report" / "board")]) == 2
    error = one_error(capsys, "normbench-leaderboard")
    assert error == (
        f"normbench-leaderboard: error: --out '{tmp_path}/report/board' goes through '{tmp_path}/report', a file; "
        "pass a folder for the leaderboard"
    )
    assert (tmp_path / "report").read_text() == "mine\n"


@pytest.mark.e2e
@needs_mounts
@fault(
    "normbench-leaderboard on a read-only sweep folder with the default --out",
    "one line naming --out, exit 2; the folder untouched",
    "one-line",
)
def test_leaderboard_on_a_read_only_folder_is_one_line(tmp_path) -> None:
    sweep(tmp_path / "src")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    code = (
        "import sys; from normbench.analysis.leaderboard.leaderboard_report import main; sys.exit(main(sys.argv[1:]))"
    )
    script = (
        f"mount -t tmpfs tmpfs {mnt} && cp -a {tmp_path / 'src'}/. {mnt}/ && mount -o remount,ro {mnt} && "
        f"{{ {sys.executable} -c '{code}' {mnt} > {tmp_path}/stdout 2> {tmp_path}/stderr; echo $? > {tmp_path}/rc; "
        f"ls -A {mnt} > {tmp_path}/listing; }}"
    )
    r = subprocess.run([*UNSHARE, "sh", "-c", script], cwd=REPO, env=cli_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    stderr = (tmp_path / "stderr").read_text()
    assert int((tmp_path / "rc").read_text()) == 2 and "Traceback" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines() == [
        f"normbench-leaderboard: error: --out '{mnt}/leaderboard' cannot be written: permission denied or a "
        f"read-only file system ('{mnt}' is where it would be made); pass --out <a writable folder> for the "
        "leaderboard"
    ]
    assert (tmp_path / "listing").read_text().split() == ["bn0", "bn1", "gn0", "gn1"]


# ---------------------------------------------------------------------------------------------
# One seed per norm


@fault(
    "normbench-leaderboard with one seed per norm",
    "no verdict (no rules judge a sweep of quickstart, and one seed gives no interval): 'not judged', never tied",
    "result",
)
def test_one_seed_per_norm_gets_no_verdict(tmp_path, capsys) -> None:
    root = sweep(tmp_path / "sweep", seeds=1)
    assert leaderboard_main([str(root), "--out", str(tmp_path / "out")]) == 0
    with open(tmp_path / "out" / "leaderboard.csv") as f:
        rows = {r["norm"]: r for r in csv.DictReader(f) if r["n"] not in ("", "0")}
    assert {n: r["verdict"] for n, r in rows.items()} == {"bn": NO_RULES, "gn": NO_RULES}
    assert os.path.isfile(tmp_path / "out" / "leaderboard.md")
