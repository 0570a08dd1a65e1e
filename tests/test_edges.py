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
    """This process's signal handlers as they were (a stopped run ignores the stop signals on its way out).
    Inside, every stop signal but SIGINT starts at its default action, as in a shell: pytest run under
    ``nohup`` inherits an ignored SIGHUP, which a run rightly leaves ignored."""
    from normbench.run.loop.interrupts import STOP_SIGNALS

    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s in STOP_SIGNALS:
        if s != signal.SIGINT:
            signal.signal(s, signal.SIG_DFL)
    yield
    for s, handler in before.items():
        signal.signal(s, handler)


def send_after_checkpoint(monkeypatch: pytest.MonkeyPatch, sig: int, step: int) -> None:
    """Send ``sig`` to this process once the checkpoint of ``step`` is written (as a terminal that
    closes, or SLURM's ``--signal``, would at any time)."""
    import normbench.run.loop.train

    save = normbench.run.loop.train.save_checkpoint

    def save_then_signal(run, *args, **kwargs):
        save(run, *args, **kwargs)
        if run.step == step:
            os.kill(os.getpid(), sig)

    monkeypatch.setattr(normbench.run.loop.train, "save_checkpoint", save_then_signal)


@fault("SIGHUP (terminal closed, SSH dropped), SIGUSR1 / SIGUSR2 (SLURM --signal)",
       "like SIGTERM: exit 128 + signal, summary interrupted, checkpoint; resume", "bit-exact")  # fmt: skip
@pytest.mark.parametrize(
    ("sig", "resume"),
    [
        (signal.SIGHUP, True),
        (signal.SIGUSR1, False),
        (signal.SIGUSR2, False),
        pytest.param(signal.SIGUSR1, True, marks=pytest.mark.slow),
        pytest.param(signal.SIGUSR2, True, marks=pytest.mark.slow),
    ],
    ids=lambda v: v.name if isinstance(v, signal.Signals) else ("resumed" if v else "stopped"),
)
def test_hangup_and_cluster_signals_stop_like_sigterm(
    tmp_path, tmp_path_factory, monkeypatch, capsys, handlers_kept, sig, resume
) -> None:
    """Every signal stops the run alike; the resume (bit for bit), the same whatever stopped the
    run, follows one of them in the default suite and each in the slow one."""
    run_dir = tmp_path / "run"
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
    if resume:
        reference = uninterrupted(tmp_path_factory, monkeypatch, capsys)
        code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, f"hydra.run.dir={run_dir}", "resume=true")
        assert code == 0, stderr
        assert metrics(run_dir) == metrics(reference)


@fault("SIGHUP under nohup (ignored before the run starts)", "left ignored: the run goes on to its end", "result")
def test_a_run_under_nohup_goes_on_past_a_hangup(tmp_path, monkeypatch, capsys, handlers_kept) -> None:
    """A handler is installed only where the signal had its default action: ``nohup normbench ...``
    asked for a run that outlives its terminal, and gets it."""
    run_dir = tmp_path / "run"
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    with monkeypatch.context() as m:
        send_after_checkpoint(m, signal.SIGHUP, 3)
        code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, f"hydra.run.dir={run_dir}")
    assert code == 0, stderr
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN


# ---------------------------------------------------------------------------------------------
# Thread counts


@fault("hardware.num_threads beyond the machine's cores (5000, 100000)", "one line naming the cores, exit 2; no folder",
       "one-line")  # fmt: skip
@pytest.mark.parametrize("threads", ["cores+1", pytest.param("100000", marks=pytest.mark.slow)])
def test_a_thread_count_beyond_the_cores_is_one_line(tmp_path, monkeypatch, capsys, threads: str) -> None:
    cores = os.cpu_count() or 1
    value = str(cores + 1) if threads == "cores+1" else threads
    out = tmp_path / "run"
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, f"hardware.num_threads={value}",
                                             f"hydra.run.dir={out}")  # fmt: skip
    assert code == 2
    assert error_lines(stderr) == [
        f"normbench: error: hardware.num_threads={value} is not allowed; hardware.num_threads must be "
        f"in [1, {cores}] (this machine's {cores} cores), or null: the cores free at the start"
    ]
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# What the terminal says


@fault("an evaluation metric that is not finite", "the diverged line names the metric and the step", "result")
def test_the_diverged_line_names_the_non_finite_metric(tmp_path, monkeypatch, capsys) -> None:
    import normbench.run.loop.train

    monkeypatch.setattr(normbench.run.loop.train, "evaluate", lambda run, epoch: {"val/loss": math.nan, "val/acc": 0.1})
    out = tmp_path / "run"
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, f"hydra.run.dir={out}")
    assert code == 0, stderr
    (line,) = [s for s in stdout.splitlines() if s.startswith("[normbench] diverged")]
    assert line.startswith("[normbench] diverged at step 8: val/loss=nan in the evaluation (stopped at step 8, "), line
    assert json.loads((out / "summary.json").read_text())["diverged_reason"] == "val/loss=nan in the evaluation"


@fault("a training loss that diverges", "the diverged line says the loss went bad at its step", "result")
def test_the_diverged_line_names_the_training_loss(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "run"
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, "norm=none", "lr=1e4",
                                             f"hydra.run.dir={out}")  # fmt: skip
    assert code == 0, stderr
    summary = json.loads((out / "summary.json").read_text())
    (line,) = [s for s in stdout.splitlines() if s.startswith("[normbench] diverged")]
    # the cause first (issue 60: 'diverged after 10 steps … at step 2' read as if it went bad at 10)
    assert line.startswith(f"[normbench] diverged at step {summary['diverged_step']}: {summary['diverged_reason']} "
                           f"(stopped at step {summary['step']}, "), line  # fmt: skip
    assert "training loss" in summary["diverged_reason"]


_finished: list[tuple[Path, str]] = []


def finished_run(tmp_path_factory, monkeypatch, capsys) -> tuple[Path, str]:
    """`LOCAL` for two steps, run once in process for the module (its directory and stdout): the
    tests that read it or refuse to write into it check that it is left as it was."""
    if not _finished:
        out = tmp_path_factory.mktemp("finished") / "run"
        code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, "max_steps=2", f"hydra.run.dir={out}")
        assert code == 0, stderr
        _finished.append((out, stdout))
    return _finished[0]


@pytest.mark.slow
@fault("a run or a sweep started without knowing where it writes", "its directory printed when it starts", "result")
def test_a_run_and_a_sweep_print_their_directory(tmp_path, tmp_path_factory, monkeypatch, capsys) -> None:
    sweep_dir = tmp_path / "sweep"
    out, stdout = finished_run(tmp_path_factory, monkeypatch, capsys)
    assert stdout.splitlines()[0] == f"[normbench] run directory: {out}"
    code, stdout, stderr = run_cli_inprocess(
        monkeypatch, capsys, "-m", *LOCAL, "max_steps=2", "seed=0,1", f"hydra.sweep.dir={sweep_dir}"
    )
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert lines[0] == f"[normbench] sweep directory: {sweep_dir}"
    assert f"[normbench] run directory: {sweep_dir / '1'}" in lines


# ---------------------------------------------------------------------------------------------
# The command line: what Hydra would refuse in several lines (exit 1) is one line, exit 2

_MODELS_WITH_ENCODER_NORM = "transformer_iwslt,transformer_tiny"
HYDRA_ERRORS = [
    (["norm=бн"], "norm=бн is not an option of norm; valid choices: "),
    (
        ["logger.run_name=日本語"],
        "logger.run_name=日本語: Hydra's override syntax takes characters beyond ASCII only "
        "inside quotes; write 'logger.run_name=\"日本語\"'",
    ),  # fmt: skip
    (["norm=bn,gn"], "norm=bn,gn gives several values, a sweep: add -m to run one job per value, or give one value"),
    (["lr=0.1,0.2"], "lr=0.1,0.2 gives several values, a sweep: add -m to run one job per value, or give one value"),
    (
        ["norm@model.encoder_norm=pn"],
        "norm@model.encoder_norm=pn places a norm at model.encoder_norm, but "
        f"model=resnet20 has no encoder_norm; models that have it: model={_MODELS_WITH_ENCODER_NORM}",
    ),  # fmt: skip
    (
        ["+norm@model.encoder_norm=pn"],
        "+norm@model.encoder_norm=pn places a norm at model.encoder_norm, but "
        f"model=resnet20 has no encoder_norm; models that have it: model={_MODELS_WITH_ENCODER_NORM}",
    ),  # fmt: skip
    (["lr=(0.1"], "lr=(0.1 is not an override Hydra can read"),
]


@fault("a command line Hydra refuses in several lines (non-ASCII, a sweep without -m, a norm placed where the model "
       "has no such key, bad syntax)", "one line naming the fix, exit 2; nothing made", "one-line")  # fmt: skip
@pytest.mark.parametrize(("args", "expected"), HYDRA_ERRORS, ids=[" ".join(a) for a, _ in HYDRA_ERRORS])
def test_what_hydra_refuses_in_several_lines_is_one_line(tmp_path, monkeypatch, capsys, args, expected) -> None:
    out = tmp_path / "run"
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, *args, f"hydra.run.dir={out}")
    assert code == 2, stderr
    (line,) = error_lines(stderr)
    assert line.startswith(f"normbench: error: {expected}"), line
    assert not out.exists()


def test_what_the_one_line_errors_suggest_works(tmp_path, monkeypatch, capsys) -> None:
    """The quoted non-ASCII value is accepted (the run starts); so is a norm placed on a model that has the key."""
    from normbench.cli.overrides import check_overrides

    conf = Path(__file__).resolve().parents[1] / "conf"
    check_overrides(["experiment=quickstart", 'logger.run_name="日本語"'], conf)
    check_overrides(["model=transformer_tiny", "dataset=synthetic_translation", "norm@model.encoder_norm=pn"], conf)
    check_overrides(["-m", "norm=bn,gn"], conf)


# ---------------------------------------------------------------------------------------------
# A sweep into a run's folder


@fault("a sweep into a finished run's directory, or a folder under it", "one line naming the run; the run kept",
       "one-line")  # fmt: skip
@pytest.mark.parametrize("where", ["the run", pytest.param("under the run", marks=pytest.mark.slow)])
def test_a_sweep_into_a_runs_directory_is_refused(tmp_path, tmp_path_factory, monkeypatch, capsys, where) -> None:
    from tests.test_sweep import files

    run_dir, _ = finished_run(tmp_path_factory, monkeypatch, capsys)
    before = files(run_dir)
    sweep_dir = run_dir if where == "the run" else run_dir / "sweeps" / "a"
    code, stdout, stderr = run_cli_inprocess(
        monkeypatch, capsys, "-m", *LOCAL, "max_steps=2", "seed=0,1", f"hydra.sweep.dir={sweep_dir}"
    )
    assert code == 2
    assert error_lines(stderr) == [
        f"normbench: error: hydra.sweep.dir={sweep_dir} is inside the run directory {run_dir} (its jobs would be "
        "mixed with that run's records); pass a folder outside any run"
    ]
    assert files(run_dir) == before and not (run_dir / "sweeps").exists()


# ---------------------------------------------------------------------------------------------
# A resume on other code or another thread count


def tree(commit: str, dirty: bool) -> dict:
    return {"commit": commit, "dirty_files": ["normbench/x.py"] if dirty else [], "diff_hash": "d1" if dirty else None}


@pytest.mark.slow
@fault("a resume on another commit, tree state or thread count (OMP_NUM_THREADS)",
       "every segment's commit, tree and threads in the summary; a warning naming what changed", "result")  # fmt: skip
def test_each_segment_records_its_code_and_threads(tmp_path, monkeypatch, capsys, handlers_kept) -> None:
    """The thread count, which cannot change a result, may differ on a resume (issue 60): recorded, warned."""
    import torch

    import normbench.sinks.files

    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs 2 cores for a second thread count")
    run_dir, threads = tmp_path / "run", torch.get_num_threads()
    args = (*LOCAL, f"hydra.run.dir={run_dir}")
    try:
        with monkeypatch.context() as m:
            m.setattr(normbench.sinks.files, "git_state", lambda path=None: tree("a" * 40, False))
            send_after_checkpoint(m, signal.SIGTERM, 3)
            code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *args, "hardware.num_threads=1")
        assert code == 128 + signal.SIGTERM, stderr
        monkeypatch.setattr(normbench.sinks.files, "git_state", lambda path=None: tree("b" * 40, True))
        code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *args, "hardware.num_threads=2", "resume=true")
    finally:
        torch.set_num_threads(threads)
    assert code == 0, stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["segments"] == [
        {"from_step": 0, "git_commit": "a" * 40, "git_diff_hash": None, "num_threads": 1},
        {"from_step": 4, "git_commit": "b" * 40 + "+dirty", "git_diff_hash": "d1", "num_threads": 2},
    ]
    warnings = [line for line in stderr.splitlines() if line.startswith("normbench: warning:")]
    assert warnings == [
        f"normbench: warning: this resume (from step 4) differs from the segment before it: git_commit "
        f"{'a' * 40} -> {'b' * 40}+dirty, git_diff_hash None -> d1, num_threads 1 -> 2; its metrics are not "
        "bit for bit those of one run; the summary's segments list each"
    ]


# ---------------------------------------------------------------------------------------------
# Records that vanish under a run


def after_checkpoint(monkeypatch: pytest.MonkeyPatch, step: int, action) -> None:
    """Do ``action(run_dir)`` once the checkpoint of ``step`` is written."""
    import normbench.run.loop.train

    save = normbench.run.loop.train.save_checkpoint

    def save_then_act(run, *args, **kwargs):
        save(run, *args, **kwargs)
        if run.step == step:
            action(run.run_dir)

    monkeypatch.setattr(normbench.run.loop.train, "save_checkpoint", save_then_act)


def remove_dir(run_dir: Path) -> None:
    import shutil

    shutil.rmtree(run_dir)


def replace_dir(run_dir: Path) -> None:
    run_dir.rename(run_dir.with_name("moved"))
    run_dir.mkdir()


def replace_metrics(run_dir: Path) -> None:
    (run_dir / "metrics.jsonl").rename(run_dir / "metrics.moved")
    (run_dir / "metrics.jsonl").write_text("")


def truncate_metrics(run_dir: Path) -> None:
    (run_dir / "metrics.jsonl").write_text("")  # `: > metrics.jsonl`: the same file, cut to nothing


@fault("the run directory removed, replaced, or its metrics.jsonl replaced or truncated mid-run (truncated: issue 59)",
       "stops at the next write: one line naming it, exit 1, status failed where the folder is the run's; "
       "never 'finished', nothing recreated", "one-line")  # fmt: skip
@pytest.mark.parametrize("action", [remove_dir, replace_dir, replace_metrics, truncate_metrics],
                         ids=lambda f: f.__name__)  # fmt: skip
def test_records_that_vanish_under_a_run_fail_it(tmp_path, monkeypatch, capsys, action) -> None:
    run_dir = tmp_path / "run"
    with monkeypatch.context() as m:
        after_checkpoint(m, 3, action)
        code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *LOCAL, f"hydra.run.dir={run_dir}")
    assert code == 1, stderr
    assert "Traceback" not in stderr
    errors = [line for line in error_lines(stderr) if line.startswith("normbench: error:")]
    gone = run_dir if action in (remove_dir, replace_dir) else run_dir / "metrics.jsonl"
    what = "cut short" if action is truncate_metrics else "removed or replaced"
    assert errors == [f"normbench: error: {gone}: {what} while the run wrote into it; the run stops "
                      "(errno 116)"]  # fmt: skip
    assert "finished" not in stdout
    if action is remove_dir:
        assert not run_dir.exists()  # not recreated with a lone summary or checkpoints
    if action is replace_dir:
        assert list(run_dir.iterdir()) == []  # the folder in its place is not written into
    if action in (replace_metrics, truncate_metrics):
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["status"] == "failed" and what in summary["error"]
        assert (run_dir / "metrics.jsonl").read_text() == ""


# ---------------------------------------------------------------------------------------------
# What a newcomer reads


@fault("a DDP run's terminal lines", "samples/s over every process, as in the records (not one rank's)", "result")
def test_ddp_terminal_lines_show_the_global_throughput() -> None:
    from types import SimpleNamespace

    import torch

    from normbench.placement.distributed import DistState
    from normbench.placement.hardware import HardwareConfig
    from normbench.placement.placement import Placement
    from normbench.run.loop.state import StepTimer, show_progress
    from normbench.run.loop.sums import RunningSums

    class Bar:
        postfix: dict = {}

        def set_postfix(self, postfix: dict, refresh: bool = False) -> None:
            self.postfix = postfix

    timer = StepTimer(torch.device("cpu"))
    timer.elapsed = 2.0
    task = SimpleNamespace(summarize=lambda sums, prefix: {}, unit="samples")
    cpu = HardwareConfig(name="cpu", device="cpu")
    for world_size, expected in ((1, "80"), (2, "160"), (4, "320")):  # 160 samples on this rank in 2 s
        placement = Placement(cpu, DistState(0, world_size, 0, "gloo"), timer.device)
        run = SimpleNamespace(task=task, timer=timer, placement=placement)
        epoch = SimpleNamespace(sums=RunningSums(), timed_units=160, bar=Bar())
        show_progress(run, epoch)
        assert epoch.bar.postfix == {"samples/s": expected}


@fault("normbench --help", "each preset's first sentence whole; every launcher the README names", "result")
def test_help_shows_whole_sentences_and_every_launcher() -> None:
    from normbench.cli.help import described, first_comment, group_options
    from normbench.cli.main import config_dir

    conf = Path(config_dir())
    assert first_comment(conf / "experiment" / "quickstart.yaml") == (
        "ResNet20 + BN on synthetic CIFAR-shaped data, offline: about 25 s on one CPU thread."
    )
    for path in (conf / "experiment").glob("*.yaml"):
        text = first_comment(path)
        assert not text or text.endswith((".", ")", ":")) or len(text.split()) < 12, (path.name, text)
    readme = "".join(p.read_text() for p in [conf.parent / "README.md", *(conf.parent / "docs").glob("*.md")])
    named = {name for name in ("submitit_local_resume", "submitit_slurm_resume") if name in readme}
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        launchers = group_options("hydra/launcher", [conf])
        lines = described("hydra/launcher", launchers, [conf], "basic")
    listed = {line.split()[0] for line in lines}
    assert named and named <= listed, (named, listed)
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines), lines  # each with what it does


# ---------------------------------------------------------------------------------------------
# An Optuna sweep resumed

OPTUNA = ("hparams_search=optuna", *LOCAL, "max_steps=2", "hydra.sweeper.n_trials=1")


@pytest.mark.slow
@fault("resume=true of an Optuna sweep (its study lived in memory)",
       "one line: start a new sweep; never a best from the new trials alone; kept", "one-line")  # fmt: skip
def test_resuming_an_optuna_sweep_is_refused_and_keeps_it(tmp_path, monkeypatch, capsys) -> None:
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    from tests.test_sweep import files

    sweep_dir = tmp_path / "search"
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, "-m", *OPTUNA, f"hydra.sweep.dir={sweep_dir}")
    assert code == 0, stderr
    before = files(sweep_dir)
    code, stdout, stderr = run_cli_inprocess(
        monkeypatch, capsys, "-m", *OPTUNA, "resume=true", f"hydra.sweep.dir={sweep_dir}"
    )
    assert code == 2
    assert error_lines(stderr) == [
        f"normbench: error: resume=true continues sweeps of Hydra's basic sweeper only; the Optuna study of "
        f"{sweep_dir} was kept in memory (hydra.sweeper.storage=null) and is gone; start a new search in another "
        "hydra.sweep.dir, with hydra.sweeper.storage=sqlite:///<file> to keep the study"
    ]  # with a storage, the study continues in a new sweep folder (tests/test_optuna.py)
    assert files(sweep_dir) == before


@fault("the sweep table on a terminal", "at most 120 columns: the swept overrides only, errors cut (whole in the CSV)",
       "result")  # fmt: skip
def test_the_sweep_table_fits_a_terminal(tmp_path, capsys) -> None:
    import csv

    import yaml

    from normbench.cli import sweep

    common = [*LOCAL, "hardware.num_threads=1", "dataset.root=/a/very/long/path/to/the/data/cifar10-subset"]
    error = "norm.groups=12 is not allowed; " + "a long reason " * 12
    for job, (lr, status) in enumerate([("0.02", "finished"), ("-1", "failed"), ("0.05", "finished")]):
        (tmp_path / str(job) / ".hydra").mkdir(parents=True)
        (tmp_path / str(job) / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([*common, f"lr={lr}"]))
        summary = {"status": status, "val/acc": 0.31, "val/loss": 2.123456, "train/loss": 2.2, "wall_time_s": 12.5}
        if status == "failed":
            summary = {"status": status, "error": error}
        (tmp_path / str(job) / "summary.json").write_text(json.dumps(summary))
    sweep.write_summary(tmp_path)
    table = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in table) <= 120, "\n".join(table)
    assert table[0].split()[:3] == ["job", "swept", "status"] and table[3].split()[1] == "lr=-1"
    with open(tmp_path / "sweep_summary.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows[1]["error"] == error and rows[1]["overrides"] == " ".join([*common, "lr=-1"])  # the CSV whole


@pytest.mark.e2e
@fault("a read-only HOME (W&B's cache, config, data and log folders)",
       "one warning; W&B's folders go into the run directory; no W&B log lines on the terminal", "result")  # fmt: skip
def test_a_read_only_home_gives_one_warning_not_wandbs_log(tmp_path) -> None:
    import re
    import subprocess
    import sys

    from tests.conftest import REPO, cli_env

    out = tmp_path / "run"
    env = {k: v for k, v in cli_env().items() if not k.startswith(("XDG_", "WANDB_DIR", "WANDB_CACHE", "WANDB_DATA"))}
    env["HOME"] = "/proc"  # a folder nobody can create anything in, root included
    args = [sys.executable, "-m", "normbench", *LOCAL, "max_steps=2", "logger=wandb", f"hydra.run.dir={out}"]
    r = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    noise = [line for line in r.stderr.splitlines() if re.match(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ", line)]
    assert noise == [], noise
    warnings = [line for line in r.stderr.splitlines() if line.startswith("normbench: warning:")]
    assert warnings == [
        f"normbench: warning: HOME (/proc) cannot be written; W&B's cache, config and data folders go under "
        f"{out / 'wandb' / 'home'}"
    ]
    assert list((out / "wandb").glob("offline-run-*/run-*.wandb"))
