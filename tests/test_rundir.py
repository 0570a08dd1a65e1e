"""Run directories: a refused run removes only what it created (never a folder the user had, never
the current directory), and one process at a time writes a run directory."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from normbench.rundir import LOCK_NAME, RunDirBusyError, RunDirLock, Snapshot, hold, release
from tests.conftest import REPO, TINY_RUN
from tests.test_validate import run_cli_inprocess

HOLDER = """
import sys, time
from normbench.rundir import RunDirLock
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


def test_a_config_error_keeps_a_folder_the_user_had(tmp_path, monkeypatch, capsys) -> None:
    mylogs = tmp_path / "mylogs"
    mylogs.mkdir()
    (mylogs / "experiment-notes.log").write_text("notes\n")
    refused(monkeypatch, capsys, str(mylogs))
    assert tree(mylogs) == {"experiment-notes.log": b"notes\n"}  # Hydra's .hydra/ and log are gone, the notes stay


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


def test_hold_is_reentrant_in_one_process_and_exclusive_across(tmp_path) -> None:
    run_dir = tmp_path / "run"
    assert hold(run_dir) is True and hold(run_dir) is False
    script = "import sys\nfrom normbench.rundir import RunDirLock\nRunDirLock(sys.argv[1]).acquire()"
    other = subprocess.run([sys.executable, "-c", script, str(run_dir)], cwd=REPO, capture_output=True, text=True)
    assert other.returncode != 0 and f"pid {os.getpid()}" in other.stderr
    release(run_dir)
    other = subprocess.run([sys.executable, "-c", script, str(run_dir)], cwd=REPO, capture_output=True, text=True)
    assert other.returncode == 0, other.stderr
