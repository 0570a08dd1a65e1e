"""The edges users reach (issue 47): signals a terminal or a cluster sends, records that vanish
under a run, thread counts, resumes across code or thread changes, sweeps into a run's folder,
what a newcomer reads on the terminal. In process where a process is not the point."""

from __future__ import annotations

import json
import math
import os
import signal
from pathlib import Path

import pytest

from tests.faults import fault
from tests.test_reliability import SMALL, metrics
from tests.test_validate import run_cli_inprocess

LOCAL = (*SMALL, "logger=local", "max_steps=8")


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


# ---------------------------------------------------------------------------------------------
# Signals


_reference: list[Path] = []


def uninterrupted(tmp_path_factory, monkeypatch, capsys) -> Path:
    """`LOCAL` run once, in process, for the whole module: what resumed runs are compared with."""
    if not _reference:
        out = tmp_path_factory.mktemp("reference") / "run"
        code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, f"hydra.run.dir={out}")
        assert code == 0, stderr
        _reference.append(out)
    return _reference[0]


@pytest.fixture
def handlers_kept():
    """This process's signal handlers as they were (a stopped run ignores the stop signals on its way out)."""
    from normbench.interrupts import STOP_SIGNALS

    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    yield
    for s, handler in before.items():
        signal.signal(s, handler)


def send_after_checkpoint(monkeypatch: pytest.MonkeyPatch, sig: int, step: int) -> None:
    """Send ``sig`` to this process once the checkpoint of ``step`` is written (as a terminal that
    closes, or SLURM's ``--signal``, would at any time)."""
    import normbench.train

    save = normbench.train.save_checkpoint

    def save_then_signal(run, *args, **kwargs):
        save(run, *args, **kwargs)
        if run.step == step:
            os.kill(os.getpid(), sig)

    monkeypatch.setattr(normbench.train, "save_checkpoint", save_then_signal)


@fault("SIGHUP (terminal closed, SSH dropped), SIGUSR1 / SIGUSR2 (SLURM --signal)",
       "like SIGTERM: exit 128 + signal, summary interrupted, checkpoint; resume", "bit-exact")  # fmt: skip
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2], ids=lambda s: s.name)
def test_hangup_and_cluster_signals_stop_like_sigterm(
    tmp_path, tmp_path_factory, monkeypatch, capsys, handlers_kept, sig
) -> None:
    run_dir = tmp_path / "run"
    reference = uninterrupted(tmp_path_factory, monkeypatch, capsys)
    with monkeypatch.context() as m:
        send_after_checkpoint(m, sig, 3)
        code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, f"hydra.run.dir={run_dir}")
    assert code == 128 + sig, stderr
    assert "Traceback" not in stderr + stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["interrupted_by"] == sig.name
    newest = sorted((run_dir / "checkpoints").glob("step-*.pt"))[-1]
    assert newest.name == f"step-{summary['step']:08d}.pt" and summary["step"] == 4  # the next step boundary
    assert error_lines(stderr)[-1].startswith(f"normbench: interrupted by {sig.name}; continue from {newest}")
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, f"hydra.run.dir={run_dir}", "resume=true")
    assert code == 0, stderr
    assert metrics(run_dir) == metrics(reference)


# ---------------------------------------------------------------------------------------------
# Thread counts


@fault("hardware.num_threads beyond the machine's cores (5000, 100000)", "one line naming the cores, exit 2; no folder",
       "one-line")  # fmt: skip
@pytest.mark.parametrize("threads", ["cores+1", "100000"])
def test_a_thread_count_beyond_the_cores_is_one_line(tmp_path, monkeypatch, capsys, threads: str) -> None:
    cores = os.cpu_count() or 1
    value = str(cores + 1) if threads == "cores+1" else threads
    out = tmp_path / "run"
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, f"hardware.num_threads={value}",
                                             f"hydra.run.dir={out}")  # fmt: skip
    assert code == 2
    assert error_lines(stderr) == [
        f"normbench: error: hardware.num_threads={value} is not allowed; hardware.num_threads must be "
        f"in [1, {cores}] (this machine's {cores} cores), or null for torch's default"
    ]
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# What the terminal says


@fault("an evaluation metric that is not finite", "the diverged line names the metric and the step", "result")
def test_the_diverged_line_names_the_non_finite_metric(tmp_path, monkeypatch, capsys) -> None:
    import normbench.train

    monkeypatch.setattr(normbench.train, "evaluate", lambda run, epoch: {"val/loss": math.nan, "val/acc": 0.1})
    out = tmp_path / "run"
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, f"hydra.run.dir={out}")
    assert code == 0, stderr
    (line,) = [s for s in stdout.splitlines() if s.startswith("[normbench] diverged")]
    assert line.endswith(": at step 8, val/loss=nan in the evaluation"), line
    assert json.loads((out / "summary.json").read_text())["diverged_reason"] == "val/loss=nan in the evaluation"


@fault("a training loss that diverges", "the diverged line says the loss went bad at its step", "result")
def test_the_diverged_line_names_the_training_loss(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "run"
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, "norm=none", "lr=1e4",
                                             f"hydra.run.dir={out}")  # fmt: skip
    assert code == 0, stderr
    summary = json.loads((out / "summary.json").read_text())
    (line,) = [s for s in stdout.splitlines() if s.startswith("[normbench] diverged")]
    assert line.endswith(f": at step {summary['diverged_step']}, {summary['diverged_reason']}"), line
    assert "training loss" in summary["diverged_reason"]


@fault("a run or a sweep started without knowing where it writes", "its directory printed when it starts", "result")
def test_a_run_and_a_sweep_print_their_directory(tmp_path, monkeypatch, capsys) -> None:
    out, sweep_dir = tmp_path / "run", tmp_path / "sweep"
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, "max_steps=2", f"hydra.run.dir={out}")
    assert code == 0, stderr
    assert stdout.splitlines()[0] == f"[normbench] run directory: {out}"
    code, stdout, stderr = run_cli_inprocess(
        monkeypatch, capsys, "-m", *LOCAL, "max_steps=2", "seed=0,1", f"hydra.sweep.dir={sweep_dir}"
    )
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert lines[0] == f"[normbench] sweep directory: {sweep_dir}"
    assert f"[normbench] run directory: {sweep_dir / '1'}" in lines

