"""End to end: kill and resume bit for bit, divergence as a result, W&B unreachable, determinism,
a requeued submitit job that resumes."""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, cli_env, needs_slurm_extra, run_cli
from tests.faults import fault
from tests.test_validate import run_cli_inprocess

SMALL = (
    "experiment=quickstart",
    "epochs=2",
    "dataset.num_train=64",
    "dataset.num_test=32",
    "batch_size=8",  # 8 steps per epoch
    "logger.progress_bar=false",
    "logger.log_every_n_steps=2",
    "checkpoint.every_n_steps=3",
    "hardware=cpu",
    "hardware.deterministic=true",
)


def metrics(run_dir: Path) -> list[dict]:
    """``metrics.jsonl`` without the timing keys."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith("perf/")} for row in rows]


def as_in_a_terminal() -> None:
    """A run started from a terminal has Ctrl-C at its default; pytest itself may have been started
    in the background (``cmd &`` in a script ignores SIGINT, and children inherit that, which
    normbench then honours, as ``nohup`` users expect)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def popen_cli(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "normbench", *args],
        cwd=REPO,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_in_a_terminal,
    )


def wait_for(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < end, f"{path} did not appear"
        time.sleep(0.02)


@pytest.mark.e2e  # ~19 s (two runs, a kill): the default suite keeps under 4 minutes; CI runs it in its second pass
@fault(
    "kill -9 mid-run, then a truncated newest checkpoint", "resume from the previous one with a warning", "bit-exact"
)
def test_killed_run_resumes_bit_for_bit_past_a_truncated_checkpoint(tmp_path, monkeypatch, capsys) -> None:
    """The killed and the resumed run are processes of their own; the uninterrupted reference runs
    in this process (the same code on the quickstart's one thread; its W&B records are not compared)."""
    reference_dir, killed_dir = tmp_path / "reference", tmp_path / "killed"
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *SMALL, "logger=local", f"hydra.run.dir={reference_dir}")
    assert code == 0, stderr[-3000:]
    victim = popen_cli(*SMALL, f"hydra.run.dir={killed_dir}")
    wait_for(killed_dir / "checkpoints" / "step-00000006.pt", victim)
    victim.send_signal(signal.SIGKILL)  # mid-run: checkpoints at steps 3, 6, 8 (epoch end), 9, ...
    victim.communicate()
    newest = sorted((killed_dir / "checkpoints").glob("step-*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[:1000])  # a checkpoint truncated on disk
    assert not (killed_dir / "summary.json").exists()

    resumed = run_cli(*SMALL, f"hydra.run.dir={killed_dir}", "resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    warnings = [line for line in resumed.stderr.splitlines() if line.startswith("normbench: warning:")]
    assert len(warnings) == 1 and newest.name in warnings[0] and "using the previous one" in warnings[0]
    start = next(line for line in resumed.stdout.splitlines() if line.startswith("[normbench] resuming"))
    assert not start.endswith("batch 0)")  # resumed in the middle of an epoch

    expected, got = metrics(reference_dir), metrics(killed_dir)
    assert got == expected  # bit for bit: floats compared exactly
    steps = [row["step"] for row in got if "train/batch_loss" in row]
    assert steps == list(range(2, 17, 2))  # each logged step exactly once
    assert [row["step"] for row in got if "val/acc" in row] == [8, 16]
    summary = json.loads((killed_dir / "summary.json").read_text())
    ref_summary = json.loads((reference_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["step"] == 16
    assert {k: summary[k] for k in ("val/acc", "val/loss", "train/loss")} == {
        k: ref_summary[k] for k in ("val/acc", "val/loss", "train/loss")
    }
    # the W&B run is resumed with the same id
    run_ids = {p.name.rsplit("-", 1)[1] for p in (killed_dir / "wandb").glob("offline-run-*")}
    assert run_ids == {summary["wandb_run_id"]}


@fault("a diverging loss (lr=1e4)", "status diverged with its step, exit 0, in W&B too", "result")
def test_diverging_run_is_a_result_with_exit_0(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "run"
    code, stdout, stderr = run_cli_inprocess(
        monkeypatch, capsys, *SMALL, "norm=none", "lr=1e4", "max_steps=8", f"hydra.run.dir={out}"
    )
    assert code == 0, stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "diverged" and 1 <= summary["diverged_step"] <= summary["step"] <= 8
    wandb_file = next((out / "wandb").glob("offline-run-*/run-*.wandb"))
    end = time.monotonic() + 60  # in process, W&B's service finishes writing the file after finish()
    while b'"diverged"' not in wandb_file.read_bytes() and time.monotonic() < end:
        time.sleep(0.2)
    wandb_log = wandb_file.read_bytes()
    assert b"\n\x06status" in wandb_log and b'"diverged"' in wandb_log  # the W&B summary record
    assert "[normbench] diverged" in stdout


@fault("a diverged and a refused job in one sweep", "each recorded in sweep_summary.csv; the sweep goes on; exit 1",
       "result")  # fmt: skip
def test_multirun_goes_on_past_a_diverged_and_a_failed_job(tmp_path, monkeypatch, capsys) -> None:
    sweep = tmp_path / "sweep"
    code, stdout, stderr = run_cli_inprocess(
        monkeypatch,
        capsys,
        "-m",
        *SMALL,
        "norm=none",
        "max_steps=4",
        "logger=local",
        "lr=0.02,1e4,0.05,-1",
        f"hydra.sweep.dir={sweep}",
    )
    assert code == 1, stderr  # a job failed: the sweep went on, and its exit status says so
    assert "1 of 4 jobs of the sweep did not end with a result (1 failed)" in stderr  # diverged is a result
    with open(sweep / "sweep_summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["status"] for r in rows] == ["finished", "diverged", "finished", "failed"]
    assert 1 <= int(rows[1]["diverged_step"]) <= 4
    assert all(float(rows[i]["val/acc"]) >= 0 for i in (0, 2))
    assert "diverged" in stdout  # the table printed at the end


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.e2e
@fault("W&B server unreachable", "one warning; W&B offline; local files written", "result")
def test_unreachable_wandb_server_falls_back_to_offline(tmp_path) -> None:
    out = tmp_path / "run"
    env = cli_env()
    env.update(WANDB_BASE_URL=f"http://127.0.0.1:{_closed_port()}", WANDB_API_KEY="0" * 40)
    args = [*SMALL, "max_steps=4", "logger.mode=online", "logger.init_timeout_s=5", f"hydra.run.dir={out}"]
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "normbench", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    warnings = [line for line in r.stderr.splitlines() if line.startswith("normbench: warning:")]
    assert len(warnings) == 1 and "W&B could not start online" in warnings[0] and "logging offline" in warnings[0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["step"] == 4
    assert [row["step"] for row in metrics(out) if "train/batch_loss" in row] == [2, 4]
    assert list((out / "wandb").glob(f"offline-run-*-{summary['wandb_run_id']}/run-*.wandb"))
    assert time.monotonic() - t0 < 240


def test_same_seed_gives_identical_metrics(tmp_path, monkeypatch, capsys) -> None:
    for name in ("a", "b"):
        code, _, stderr = run_cli_inprocess(
            monkeypatch, capsys, *SMALL, "epochs=1", "logger=local", f"hydra.run.dir={tmp_path / name}"
        )
        assert code == 0, stderr
    a, b = metrics(tmp_path / "a"), metrics(tmp_path / "b")
    assert len([row for row in a if "train/batch_loss" in row]) == 4
    assert a == b


@pytest.mark.e2e
@pytest.mark.parametrize("full_error", [False, True])
def test_traceback_only_with_hydra_full_error(tmp_path, full_error: bool) -> None:
    env = cli_env()
    env["HYDRA_FULL_ERROR"] = "1" if full_error else "0"
    r = subprocess.run(
        [sys.executable, "-m", "normbench", *SMALL, "norm=gn", "norm.groups=12", f"hydra.run.dir={tmp_path / 'r'}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode != 0
    assert ("Traceback" in r.stderr) == full_error
    if not full_error:
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [
            "normbench: error: layer norm1 (16 channels): norm.groups=12 does not divide num_features=16; "
            "choose a divisor of 16"
        ]


@pytest.mark.e2e
@pytest.mark.slow
@needs_slurm_extra
@fault("a SLURM job preempted (USR2) after a checkpoint", "requeued with resume=true; same metrics", "bit-exact")
def test_preempted_submitit_job_is_requeued_and_resumes(tmp_path) -> None:
    """USR2 (what SLURM sends on preemption) to a job of the ``submitit_local_resume`` launcher:
    submitit calls the launcher's checkpoint hook, requeues the job with ``resume=true``, and the
    job ends with the metrics of an uninterrupted run."""
    sweep, reference_dir = tmp_path / "sweep", tmp_path / "reference"
    reference = popen_cli(*SMALL, f"hydra.run.dir={reference_dir}")
    sweep_proc = popen_cli("-m", *SMALL, "hydra/launcher=submitit_local_resume", f"hydra.sweep.dir={sweep}")
    wait_for(sweep / "0" / "checkpoints" / "step-00000006.pt", sweep_proc)
    job_pids = subprocess.run(
        ["pgrep", "-f", f"submitit.core._submit {sweep}"], capture_output=True, text=True
    ).stdout.split()
    assert len(job_pids) == 1
    os.kill(int(job_pids[0]), signal.SIGUSR2)
    assert sweep_proc.wait(timeout=600) == 0, sweep_proc.communicate()[1][-3000:]
    assert reference.wait(timeout=600) == 0
    log = (sweep / "0" / "cli.log").read_text()
    assert "this job is preempted" in log and "Requeued job" in log
    assert metrics(sweep / "0") == metrics(reference_dir)
    with open(sweep / "sweep_summary.csv") as f:
        (row,) = csv.DictReader(f)
    assert row["status"] == "finished" and row["overrides"].endswith("resume=true")


@fault("a diagnostic that raises", "one warning; switched off; training untouched", "result")
def test_a_failing_diagnostic_warns_once_and_is_switched_off(capsys) -> None:
    from normbench.run.loop.train import call_diagnostics

    class Broken:
        name = "broken"

        def __call__(self, ctx):
            raise RuntimeError("out of memory")

    class Fine:
        name = "fine"

        def __call__(self, ctx):
            return {"x": 1.0}

    import torch

    from normbench.diagnostics import DiagContext

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batch = (torch.randn(4, 3), torch.randn(4, 2))

    def loss_fn(m, b):
        return torch.nn.functional.mse_loss(m(b[0]), b[1])

    def ctx() -> DiagContext:
        return DiagContext(model, batch, loss_fn, optimizer, step=7, epoch=0, lr=0.1)

    hooks = [Broken(), Fine()]
    before = [p.detach().clone() for p in model.parameters()]
    assert call_diagnostics([hooks[0]], ctx(), hooks) == {}
    assert [h.name for h in hooks] == ["fine"]
    assert call_diagnostics([hooks[0]], ctx(), hooks) == {"fine/x": 1.0}
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "normbench: warning: diagnostic broken failed at step 7 (RuntimeError: out of memory); "
        "switched off for this run"
    ]
