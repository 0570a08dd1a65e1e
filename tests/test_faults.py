"""What the machine does to a run (issue 15.7): a full or read-only disk, Ctrl-C, SIGTERM, a
missing optional extra, W&B's mode from the environment. Each is one line (or a recorded status)
and never a traceback; a run stopped by a signal leaves a checkpoint of the step it stopped at,
and resuming it gives the uninterrupted run's metrics float for float.

The disk tests mount a real tmpfs (full: a few KiB; read-only: ``-o ro``) in a private mount
namespace (``unshare -m``), run ``normbench`` inside it and copy the run directory out before the
namespace ends; they are skipped where unprivileged namespaces are not allowed.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, cli_env, run_cli
from tests.faults import fault
from tests.test_reliability import SMALL, metrics, popen_cli, wait_for
from tests.test_wandb import of_type, wandb_records

LOCAL = (
    "experiment=quickstart",
    "epochs=1",
    "dataset.num_train=64",
    "dataset.num_test=32",
    "batch_size=8",
    "hardware=cpu",
    "logger=local",
    "logger.progress_bar=false",
    "logger.log_every_n_steps=1",
    "checkpoint.every_n_steps=3",
)


def _unshare() -> list[str] | None:
    """``unshare -m`` (root) or ``unshare -rm`` (a user namespace), if this machine allows it."""
    flags = "-m" if os.geteuid() == 0 else "-rm"
    try:
        ok = subprocess.run(["unshare", flags, "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return ["unshare", flags] if ok else None


UNSHARE = _unshare()
needs_mounts = pytest.mark.skipif(UNSHARE is None, reason="needs a private mount namespace (unshare -m)")


def in_namespace(mounts: list[str], args: list[str], run_dir: Path, out: Path) -> tuple[int, str, str]:
    """``normbench *args`` after ``mounts`` (shell lines) in a private mount namespace; the run
    directory is copied to ``out`` before the namespace (and its tmpfs) goes."""
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "normbench", *args])
    script = " && ".join(mounts) + f" && {{ {cmd} > {out}.stdout 2> {out}.stderr; echo $? > {out}.rc; "
    script += f"mkdir -p {out}; cp -a {run_dir}/. {out}/; }}"
    r = subprocess.run(
        [*UNSHARE, "sh", "-c", script], cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return int(Path(f"{out}.rc").read_text()), Path(f"{out}.stdout").read_text(), Path(f"{out}.stderr").read_text()


def leftovers(root: Path) -> list[str]:
    """Temporary files of writes that did not complete."""
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.name.endswith(".tmp"))


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("normbench: error:")]


@pytest.mark.e2e
@needs_mounts
@fault(
    "a full disk (the first checkpoint does not fit)", "one line naming the file; summary failed; no .tmp", "one-line"
)
def test_a_full_disk_is_one_line_leaves_no_tmp_files_and_a_summary(tmp_path) -> None:
    mnt, out = tmp_path / "mnt", tmp_path / "copy"
    mnt.mkdir()
    run_dir = mnt / "run"
    args = [*LOCAL, f"dataset.root={tmp_path / 'data'}", f"hydra.run.dir={run_dir}"]
    code, _, stderr = in_namespace([f"mount -t tmpfs -o size=96k tmpfs {mnt}"], args, run_dir, out)
    assert code == 1, stderr[-3000:]
    assert "Traceback" not in stderr
    (line,) = error_lines(stderr)
    assert "No space left on device (errno 28)" in line and str(run_dir / "checkpoints") in line
    assert leftovers(out) == []
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and "No space left on device" in summary["error"]
    assert summary["step"] == 3  # the step whose checkpoint did not fit
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]  # whole lines only
    assert [row["step"] for row in rows if "train/batch_loss" in row] == [1, 2, 3]
    assert not list((out / "checkpoints").glob("step-*"))  # no checkpoint without its checksum


@pytest.mark.e2e
@needs_mounts
@fault("a read-only run directory", "one line naming it; nothing written", "one-line")
def test_a_read_only_run_directory_is_one_line(tmp_path) -> None:
    mnt, out = tmp_path / "mnt", tmp_path / "copy"
    mnt.mkdir()
    args = [*LOCAL, f"dataset.root={tmp_path / 'data'}", f"hydra.run.dir={mnt}"]
    code, stdout, stderr = in_namespace([f"mount -t tmpfs -o ro tmpfs {mnt}"], args, mnt, out)
    assert code == 2 and "Traceback" not in stderr + stdout
    assert error_lines(stderr) == [
        f"normbench: error: the run directory {mnt} cannot be written (OSError: [Errno 30] Read-only file system: "
        f"'{mnt / '.normbench.lock'}')"
    ]
    assert list(out.iterdir()) == []


@pytest.mark.e2e
@needs_mounts
@fault("a read-only checkpoints folder", "one line naming the file; summary failed; no .tmp", "one-line")
def test_a_read_only_checkpoint_folder_is_one_line_and_a_summary(tmp_path) -> None:
    run_dir, out = tmp_path / "run", tmp_path / "copy"
    (run_dir / "checkpoints").mkdir(parents=True)
    args = [*LOCAL, f"dataset.root={tmp_path / 'data'}", f"hydra.run.dir={run_dir}"]
    code, _, stderr = in_namespace([f"mount -t tmpfs -o ro tmpfs {run_dir / 'checkpoints'}"], args, run_dir, out)
    assert code == 1 and "Traceback" not in stderr, stderr[-3000:]
    (line,) = error_lines(stderr)
    assert "Read-only file system (errno 30)" in line and str(run_dir / "checkpoints") in line
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["step"] == 3 and "Read-only file system" in summary["error"]
    assert leftovers(run_dir) == []


# ---------------------------------------------------------------------------------------------
# Signals


def stopped_by(sig: int, run_dir: Path) -> tuple[int, str, str]:
    """`SMALL` in ``run_dir``, sent ``sig`` once its step-3 checkpoint is complete."""
    proc = popen_cli(*SMALL, f"hydra.run.dir={run_dir}")
    wait_for(run_dir / "checkpoints" / "step-00000003.pt.sha256", proc)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=300)
    return proc.returncode, stdout, stderr


def check_stopped_and_resumed(sig: int, name: str, run_dir: Path, reference: Path) -> None:
    code, stdout, stderr = stopped_by(sig, run_dir)
    assert code == 128 + sig, stderr[-3000:]
    assert "Traceback" not in stderr + stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["interrupted_by"] == name
    newest = sorted((run_dir / "checkpoints").glob("step-*.pt"))[-1]
    assert newest.name == f"step-{summary['step']:08d}.pt"  # a checkpoint of the very step it stopped at
    assert stderr.strip().splitlines()[-1] == (
        f"normbench: interrupted by {name}; continue from {newest} with resume=true hydra.run.dir={run_dir}"
    )
    (exit_record,) = of_type(wandb_records(run_dir)[0], "exit")
    assert exit_record["exit_code"] == 128 + sig  # W&B records the run as failed, not finished

    resumed = run_cli(*SMALL, f"hydra.run.dir={run_dir}", "resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert metrics(run_dir) == metrics(reference)  # bit for bit
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"


@pytest.mark.e2e
@fault("Ctrl-C (SIGINT) during training", "exit 130, one line, checkpoint of that step; resume", "bit-exact")
def test_ctrl_c_stops_at_a_step_with_a_checkpoint_and_exit_130(tmp_path, reference) -> None:
    check_stopped_and_resumed(signal.SIGINT, "SIGINT", tmp_path / "run", reference)


@pytest.mark.e2e
@fault("SIGTERM (SLURM, before it kills a job)", "exit 143, summary interrupted, checkpoint; resume", "bit-exact")
def test_sigterm_writes_the_summary_and_a_resumable_checkpoint(tmp_path, reference) -> None:
    check_stopped_and_resumed(signal.SIGTERM, "SIGTERM", tmp_path / "run", reference)


@pytest.mark.e2e
@fault("Ctrl-C twice", "stops at once: exit 130, one line, summary interrupted", "one-line")
def test_a_second_signal_stops_at_once(tmp_path) -> None:
    run_dir = tmp_path / "run"
    proc = popen_cli(*SMALL, "checkpoint.every_n_steps=0", "logger=local", f"hydra.run.dir={run_dir}")
    wait_for(run_dir / "metrics.jsonl", proc)
    while not (run_dir / "metrics.jsonl").stat().st_size:  # training has started
        assert proc.poll() is None
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "Traceback" not in stderr + stdout, stderr[-3000:]
    assert stderr.strip().splitlines()[-1].startswith("normbench: interrupted by SIGINT")
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted"


# ---------------------------------------------------------------------------------------------
# The environment

HIDE_SUBMITIT = """
import importlib.abc, runpy, sys
class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.startswith(("hydra_plugins.hydra_submitit_launcher", "submitit")):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, Hide())
sys.argv = ["normbench", *sys.argv[1:]]
runpy.run_module("normbench", run_name="__main__")
"""


@pytest.mark.e2e
@fault("a SLURM launcher without the slurm extra", 'one line naming pip install -e ".[slurm]"', "one-line")
@pytest.mark.parametrize("launcher", ["slurm", "submitit_local"])
def test_a_launcher_without_its_extra_names_the_extra(tmp_path, launcher: str) -> None:
    args = ["-m", *LOCAL, f"hydra/launcher={launcher}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    r = subprocess.run(
        [sys.executable, "-c", HIDE_SUBMITIT, *args],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"normbench: error: hydra/launcher={launcher} needs the slurm extra")
    assert line.endswith('install it with: pip install -e ".[slurm]"')
    assert not (tmp_path / "sweep").exists()


@pytest.mark.e2e
@fault("WANDB_MODE with a quickstart preset", "honoured: the presets do not pin logger.mode", "result")
def test_wandb_mode_from_the_environment_counts_with_the_quickstart_presets(tmp_path, monkeypatch) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from normbench.cli.main import config_dir

    presets = sorted(p.stem for p in (Path(config_dir()) / "experiment").glob("quickstart*.yaml"))
    assert presets
    for preset in presets:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
            assert compose("config", overrides=[f"experiment={preset}"]).logger.mode is None, preset
    GlobalHydra.instance().clear()
    env = {**cli_env(), "WANDB_MODE": "disabled"}
    out = tmp_path / "run"
    args = [a for a in LOCAL if not a.startswith("logger=")]
    r = subprocess.run(
        [sys.executable, "-m", "normbench", *args, "logger=wandb", "max_steps=1", f"hydra.run.dir={out}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"
    assert not list(out.glob("wandb/offline-run-*"))  # disabled, as the environment said


def test_one_data_file_error_class() -> None:
    from normbench.base.errors import ConfigError, DataFileError
    from normbench.data import cifar_files, parallel_text

    assert cifar_files.DataFileError is parallel_text.DataFileError is DataFileError
    assert issubclass(DataFileError, ConfigError)
