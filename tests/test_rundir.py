"""Run directories: a refused run removes only what it created (never a folder the user had, never
the current directory), and one process at a time writes a run directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from normbench.placement import distributed
from normbench.records.rundir import LOCK_NAME, RunDirBusyError, RunDirLock, Snapshot, hold, release
from tests.conftest import REPO, TINY_RUN
from tests.faults import fault
from tests.test_validate import run_cli_inprocess

HOLDER = """
import sys, time
from normbench.records.rundir import RunDirLock
RunDirLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(600)
"""


def tree(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (relative), with file contents; None for folders."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def refused(monkeypatch, capsys, run_dir: str) -> str:
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *TINY_RUN, "lr=-1", f"hydra.run.dir={run_dir}")
    assert code == 2 and stderr.strip().splitlines() == ["normbench: error: lr=-1.0 is not allowed; lr must be > 0"]
    return stderr


# ---------------------------------------------------------------------------------------------
# A refused run removes what it created and nothing else


@fault("a refused run in a folder the user had", "only what the run created is removed", "kept")
def test_a_config_error_keeps_a_folder_the_user_had(tmp_path, monkeypatch, capsys) -> None:
    mylogs = tmp_path / "mylogs"
    mylogs.mkdir()
    (mylogs / "experiment-notes.log").write_text("notes\n")
    refused(monkeypatch, capsys, str(mylogs))
    assert tree(mylogs) == {"experiment-notes.log": b"notes\n"}  # Hydra's .hydra/ and log are gone, the notes stay


@fault("a refused run in the current directory", "the directory stays as it was", "kept")
def test_a_config_error_in_the_current_directory_leaves_it_as_it_was(tmp_path, monkeypatch, capsys) -> None:
    here = tmp_path / "here"
    (here / ".hydra").mkdir(parents=True)  # an earlier run's records, and a log of the user's
    (here / ".hydra" / "notes.yaml").write_text("mine: 1\n")
    (here / "train.log").write_text("old log\n")
    before = tree(here)
    monkeypatch.chdir(here)
    refused(monkeypatch, capsys, ".")
    assert here.is_dir() and tree(here) == before


def test_a_config_error_in_an_empty_current_directory_keeps_it(tmp_path, monkeypatch, capsys) -> None:
    here = tmp_path / "empty"
    here.mkdir()
    monkeypatch.chdir(here)
    refused(monkeypatch, capsys, ".")
    assert here.is_dir() and list(here.iterdir()) == []


def test_a_config_error_removes_the_folders_the_run_made(tmp_path, monkeypatch, capsys) -> None:
    refused(monkeypatch, capsys, str(tmp_path / "a" / "b" / "c"))
    assert list(tmp_path.iterdir()) == []  # a/ and a/b/ were made for this run: gone too


def test_snapshot_never_removes_a_result_of_the_run(tmp_path) -> None:
    run_dir = tmp_path / "run"
    snap = Snapshot.take(run_dir)
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')  # training had started
    assert snap.discard_new() == [] and (run_dir / "metrics.jsonl").is_file()


# ---------------------------------------------------------------------------------------------
# One writer per run directory


@pytest.fixture
def holder(tmp_path):
    """Another process holding the lock of ``tmp_path / "run"``."""
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    yield run_dir, proc
    proc.kill()
    proc.wait()


@pytest.mark.e2e
@fault("two runs in one run directory", "the second: one line naming the first's PID; nothing written", "one-line")
def test_a_second_writer_fails_at_once_naming_the_holder(holder, monkeypatch, capsys) -> None:
    run_dir, proc = holder
    (run_dir / "summary.json").write_text('{"status": "running"}\n')
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "epoch": 0}\n')
    before = tree(run_dir)
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *TINY_RUN, "resume=true", f"hydra.run.dir={run_dir}")
    assert code == 2
    assert stderr.strip().splitlines() == [
        f"normbench: error: the run directory {run_dir} is in use by another normbench run (pid {proc.pid}); "
        "wait for it to end, or choose another hydra.run.dir"
    ]
    assert tree(run_dir) == before  # nothing written: not even Hydra's .hydra/


@pytest.mark.e2e
def test_the_lock_is_free_again_when_its_holder_is_killed(holder) -> None:
    run_dir, proc = holder
    lock = RunDirLock(run_dir)
    with pytest.raises(RunDirBusyError, match=f"pid {proc.pid}"):
        lock.acquire()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lock.acquire()  # the kernel dropped the dead holder's lock; its stale file does not block
    assert (run_dir / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    lock.release()
    assert not (run_dir / LOCK_NAME).exists()


@pytest.mark.e2e
def test_hold_is_reentrant_in_one_process_and_exclusive_across(tmp_path) -> None:
    run_dir = tmp_path / "run"
    assert hold(run_dir) is True and hold(run_dir) is False
    script = "import sys\nfrom normbench.records.rundir import RunDirLock\nRunDirLock(sys.argv[1]).acquire()"
    other = subprocess.run([sys.executable, "-c", script, str(run_dir)], cwd=REPO, capture_output=True, text=True)
    assert other.returncode != 0 and f"pid {os.getpid()}" in other.stderr
    release(run_dir)
    other = subprocess.run([sys.executable, "-c", script, str(run_dir)], cwd=REPO, capture_output=True, text=True)
    assert other.returncode == 0, other.stderr


@fault("a refused resume (another norm) of a trained run", "Hydra's records of the run put back as they were", "kept")
def test_a_refused_resume_leaves_the_runs_records_as_they_were(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "run"
    base = (*TINY_RUN, "max_steps=2", "logger=local", f"hydra.run.dir={out}")
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *base)
    assert code == 0, stderr
    before = tree(out)
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *base, "norm=gn", "resume=true")
    assert code == 2 and "comes from another configuration (norm." in stderr and stderr.count("\n") == 1
    assert tree(out) == before  # .hydra/overrides.yaml and config.yaml too, and the job's log


@fault("a non-zero rank's own run folder that held the user's files", "only Hydra's new files removed", "kept")
def test_a_secondary_ranks_own_folder_loses_only_what_the_run_made(tmp_path, monkeypatch) -> None:
    """torchrun without hydra.run.dir: each rank's Hydra makes its own folder; rank 0's is the
    run's. A rank's folder that existed before (the user's logs in it) keeps what it held."""
    import normbench.records.rundir as rundir

    own, main_dir = tmp_path / "rank1", tmp_path / "rank0"
    own.mkdir()
    (own / "notes.log").write_text("the user's\n")
    rundir._snapshots[own] = Snapshot.take(own)  # RunDirCallback, before Hydra wrote
    (own / ".hydra").mkdir()
    (own / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (own / "train.log").write_text("hydra's job log\n")

    def broadcast(holder, src):
        holder[0] = str(main_dir)

    monkeypatch.setattr(distributed.dist, "broadcast_object_list", broadcast)
    try:
        got = distributed.shared_run_dir(own, distributed.DistState(rank=1, world_size=2, backend="gloo"))
    finally:
        rundir._snapshots.pop(own, None)
    assert got == main_dir
    assert tree(own) == {"notes.log": b"the user's\n"}


def test_a_secondary_ranks_new_folder_is_removed_with_the_parents_it_made(tmp_path, monkeypatch) -> None:
    import normbench.records.rundir as rundir

    own = tmp_path / "outputs" / "runs" / "rank1"
    rundir._snapshots[own] = Snapshot.take(own)
    (own / ".hydra").mkdir(parents=True)
    (own / "train.log").write_text("hydra's job log\n")
    monkeypatch.setattr(distributed.dist, "broadcast_object_list", lambda holder, src: holder.__setitem__(0, "/x"))
    try:
        distributed.shared_run_dir(own, distributed.DistState(rank=1, world_size=2, backend="gloo"))
    finally:
        rundir._snapshots.pop(own, None)
    assert list(tmp_path.iterdir()) == []


def test_the_run_dir_callback_comes_from_the_config_not_the_command_line(tmp_path, monkeypatch, capsys) -> None:
    import yaml

    out = tmp_path / "run"
    code, _, stderr = run_cli_inprocess(
        monkeypatch, capsys, *TINY_RUN, "max_steps=1", "logger=local", f"hydra.run.dir={out}"
    )
    assert code == 0, stderr
    hydra = yaml.safe_load((out / ".hydra" / "hydra.yaml").read_text())["hydra"]
    assert hydra["callbacks"]["normbench_run_dir"] == {"_target_": "normbench.cli.callbacks.RunDirCallback"}
    assert not [o for o in hydra["overrides"]["hydra"] if "callbacks" in o]  # not a command-line override
    assert not (out / LOCK_NAME).exists()  # taken and released


@fault("the lock file deleted under a running run, then a second run into the folder (issue 59)",
       "the second is refused: the folder itself is locked", "one-line")  # fmt: skip
def test_deleting_the_lock_file_lets_no_second_writer_in(tmp_path) -> None:
    run_dir = tmp_path / "run"
    first = RunDirLock(run_dir)
    first.acquire()
    try:
        (run_dir / LOCK_NAME).unlink()  # rm .normbench.lock while the run goes on
        second = RunDirLock(run_dir)
        with pytest.raises(RunDirBusyError, match="is in use by another normbench run"):
            second.acquire()
        assert not second.held
    finally:
        first.release()
    third = RunDirLock(run_dir)
    third.acquire()  # released: free again
    assert (run_dir / LOCK_NAME).read_text() == f"{os.getpid()}\n"
    third.release()


@fault("hydra.run.dir=/, empty (an unset $VAR), or a folder holding the checkout; a sweep with no jobs (issue 59)",
       "one line naming the key and value, exit 2; nothing written", "one-line")  # fmt: skip
@pytest.mark.parametrize(
    ("args", "needle"),
    [(("hydra.run.dir=",), "hydra.run.dir is empty (an unset shell variable?)"),
     (("hydra.run.dir=/",), "hydra.run.dir='/' is the file system's root"),
     ((f"hydra.run.dir={REPO}",), f"is the checkout {REPO}"),
     ((f"hydra.run.dir={REPO.parent}",), f"holds the checkout {REPO}"),
     (("-m", "seed=range(0,0)", "hydra.sweep.dir=SWEEP"), "the sweep has no jobs"),
     (("-m", "seed=0,1", "hydra.sweep.dir=/"), "hydra.sweep.dir='/' is the file system's root")],
    ids=["empty", "root", "checkout", "above-checkout", "no-jobs", "sweep-root"],
)  # fmt: skip
def test_a_folder_no_run_may_write_into_is_one_line(tmp_path, monkeypatch, capsys, args, needle) -> None:
    args = tuple(a.replace("SWEEP", str(tmp_path / "sweep")) for a in args)
    before = sorted(p.name for p in REPO.iterdir())
    monkeypatch.chdir(tmp_path)
    flags = [a for a in args if a.startswith("-")]
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *flags, *TINY_RUN, "logger=local",
                                             *(a for a in args if a not in flags))  # fmt: skip
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("normbench: error: ") and needle in lines[0], stderr
    assert sorted(p.name for p in REPO.iterdir()) == before and list(tmp_path.iterdir()) == []
