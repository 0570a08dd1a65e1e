"""``normbench`` / ``python -m normbench``: the Hydra entry point."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import Any

import hydra
import yaml
from omegaconf import DictConfig, open_dict

from normbench.base.errors import (
    ConfigError,
    RecordsVanished,
    RunInterrupted,
    is_environment_error,
    signal_name,
    yaml_error_line,
)
from normbench.base.layout import RunDir
from normbench.base.output import error_line, info
from normbench.cli.help import list_groups_on_demand
from normbench.cli.store import config_dir, register_configs
from normbench.run.loop.interrupts import STOP_SIGNALS


def load_configs() -> None:
    """The plugins imported (`normbench.base.plugins`) and every schema stored, before Hydra composes
    anything; a plugin that fails to import is one line and exit 2."""
    from normbench.base.plugins import PluginError

    try:
        register_configs(config_dir())
    except PluginError as e:
        if full_error():
            raise
        error_line(str(e))
        sys.exit(2)


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="config")
def main(cfg: DictConfig) -> Any:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from normbench.cli import sweep
    from normbench.config import objective
    from normbench.records import rundir
    from normbench.run.loop.policy import one_line
    from normbench.run.loop.train import run

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN
    locked_here = False
    try:
        locked_here = rundir.hold(run_dir)  # a single run's lock is already held (RunDirCallback)
        if multirun and cfg.get("resume"):  # a sweep continued: keep results, resume checkpoints, start the rest
            action = sweep.job_action(run_dir)
            if action == "keep":
                return kept_job(run_dir)
            if action == "start":
                with open_dict(cfg):
                    cfg.resume = False
        result = run(cfg, run_dir)
        optimizing = multirun and hc.runtime.choices.get("hydra/sweeper") not in (None, "basic")
        return objective(cfg.optimized_metric, cfg.model.name, result, optimizing)  # the one number a sweeper optimizes
    except (RunInterrupted, KeyboardInterrupt) as e:
        if full_error():
            raise
        interrupted(e, run_dir)
    except Exception as e:
        expected = isinstance(e, ConfigError) or is_environment_error(e)
        if full_error() or not (expected or multirun):  # a single run's bug is a traceback
            raise
        message = one_line(e)  # a bad value, a full or read-only disk, or (a job of a sweep) a crash
        error_line(message if expected else f"job {hc.job.num} of the sweep failed: {message}")
        busy = isinstance(e, rundir.RunDirError)  # another run's directory, or unwritable: write nothing
        if multirun:  # this job fails alone; the sweep goes on
            if not busy:
                refused_job(run_dir, message, None if expected else traceback.format_exc())
            else:  # the folder is not this job's: its refusal is kept beside it, for the sweep summary
                from normbench.records.refusals import note_refused

                note_refused(run_dir, message)
            return {"status": "refused" if busy else "failed", "error": message}
        if not isinstance(e, RecordsVanished):  # the folder there now is not the run's: leave it be
            rundir.discard_new(run_dir)  # what this run created; never what was there before
        sys.exit(2 if isinstance(e, ConfigError) else 1)
    finally:
        if locked_here:
            rundir.release(run_dir)


def kept_job(run_dir: Path) -> None:
    """A job of a continued sweep that ended with a result earlier: not run again; Hydra's files
    of its run put back over those this start wrote."""
    from normbench.cli import sweep
    from normbench.records import segments as run_records

    run_records.restore_trained_records(run_dir)
    summary = sweep.read_summary(run_dir) or {}
    info(f"[normbench] {run_dir}: {summary.get('status')} earlier; kept (resume=true reruns only what did not end)")


def refused_job(run_dir: Path, message: str, trace: str | None = None) -> None:
    """A job of a sweep that was refused, crashed or whose disk refused a write: Hydra's files of
    the run its directory holds (if any) are put back over those this job's Hydra wrote;
    ``summary.json`` says ``failed`` unless the directory holds a summary already; a crash's
    traceback goes to ``traceback.txt`` beside it."""
    from normbench.base.output import atomic_write_text
    from normbench.records import segments as run_records

    files = RunDir(run_dir)
    with contextlib.suppress(OSError):
        run_records.restore_trained_records(run_dir)
        if not files.summary.exists():
            atomic_write_text(files.summary, json.dumps({"status": "failed", "error": message}) + "\n")
        if trace is not None:
            atomic_write_text(files.traceback, trace)
        run_records.remove_tmp_files(run_dir)


def interrupted(e: BaseException, run_dir: Path) -> None:
    """``normbench: interrupted by SIGTERM; …`` and exit 128 + the signal (130 for Ctrl-C)."""
    stop = e if isinstance(e, RunInterrupted) else RunInterrupted(signal.SIGINT)
    hint = f"; continue from {stop.checkpoint} with resume=true hydra.run.dir={run_dir}" if stop.checkpoint else ""
    print(f"normbench: interrupted by {signal_name(stop.signum)}{hint}", file=sys.stderr, flush=True)
    for sig in STOP_SIGNALS:  # the process is on its way out: no traceback from atexit
        signal.signal(sig, signal.SIG_IGN)
    sys.exit(stop.exit_code)


def full_error() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


load_configs()


SUBMITIT_LAUNCHERS = ("slurm", "submitit_slurm", "submitit_local", "submitit_slurm_resume", "submitit_local_resume")
"""``hydra/launcher`` choices that need the ``slurm`` extra (Hydra's submitit launcher plugin)."""


def check_launcher(args: list[str]) -> None:
    """``hydra/launcher=slurm`` (or another submitit launcher) without the ``slurm`` extra: one
    line naming the extra to install, instead of Hydra's list of the launchers it found."""
    wanted = [
        value
        for arg in args
        if arg.lstrip("+").startswith("hydra/launcher=")
        for value in arg.split("=", 1)[1].split(",")
        if value in SUBMITIT_LAUNCHERS
    ]
    if not wanted:
        return
    try:
        import hydra_plugins.hydra_submitit_launcher.submitit_launcher  # noqa: F401
    except ImportError as e:
        raise ConfigError(
            f"hydra/launcher={wanted[0]} needs the slurm extra (Hydra's submitit launcher), which is not "
            f'installed ({type(e).__name__}: {e}); install it with: pip install -e ".[slurm]"'
        ) from None


HELP_FLAGS = {"-h", "--help", "--hydra-help"}
MULTIRUN_FLAGS = ("-m", "--multirun")
SHOW_FLAGS = ("--cfg", "-c", "--info", "-i", "--shell-completion", "-sc", "--run", "-r")


def check_modes(args: list[str]) -> None:
    """Hydra runs one mode at a time: ``-m`` with ``--cfg`` (or ``--info``) is one line here, not
    Hydra's ValueError traceback."""
    flags = [a.split("=", 1)[0] for a in args if a.startswith("-")]
    shown = [f for f in flags if f in SHOW_FLAGS]
    if shown and any(f in MULTIRUN_FLAGS for f in flags):
        raise ConfigError(
            f"{shown[0]} cannot be combined with -m/--multirun (Hydra runs one mode at a time): drop -m to see "
            f"one job's config, e.g. normbench {shown[0]} job <the overrides of one job>"
        )


VERSION_FLAGS = {"--version", "-V"}


def version_line() -> str:
    """``normbench 0.1.0 (commit 1a2b3c4d5e6f[+dirty], torch 2.x, Hydra 1.3.x)``: what ``--version`` prints."""
    import torch

    from normbench import __version__
    from normbench.sinks.files import commit_label, git_state

    label = commit_label(git_state())
    commit = f"commit {label[:12]}{'+dirty' if label.endswith('+dirty') else ''}" if label else "no git checkout"
    return f"normbench {__version__} ({commit}, torch {torch.__version__}, Hydra {hydra.__version__})"


def cli() -> Any:
    """The ``normbench`` command: the command line's overrides are checked against ``conf/``
    first (one line and exit 2 on an unknown choice or key), then Hydra runs `main`. The run
    directory's lock and snapshot are taken by ``conf/config.yaml``'s ``hydra.callbacks``
    (`normbench.cli.callbacks.RunDirCallback`) before Hydra makes the directory."""
    from normbench.cli.overrides import check_overrides

    if VERSION_FLAGS & set(sys.argv[1:]):  # Hydra's own --version would name Hydra's version only
        print(version_line())
        return None
    from normbench.cli.recorded import ended_run, with_recorded_overrides

    if (ended := ended_run(sys.argv[1:])) is not None:  # resume=true of a run that ended: nothing to do
        info(ended)
        return None
    try:
        sys.argv[1:], taken = with_recorded_overrides(sys.argv[1:])  # Hydra reads sys.argv
        if taken:
            info(f"[normbench] resuming with the run's recorded overrides: {' '.join(taken)}")
        check_modes(sys.argv[1:])
        check_launcher(sys.argv[1:])
        check_overrides(sys.argv[1:], config_dir())
    except (ConfigError, yaml.YAMLError) as e:  # a YAML typo or Python tag in conf/: one line, not Hydra's 99
        if full_error():
            raise
        error_line(str(e) if isinstance(e, ConfigError) else yaml_error_line(e))
        sys.exit(2)
    if HELP_FLAGS & set(sys.argv[1:]):  # Hydra prints the help and runs nothing: no sweep, no run folder
        list_groups_on_demand()
        return main()
    from normbench.cli import sweep
    from normbench.records import (
        rundir,  # here, not above: `normbench --help` needs neither (nor torch.distributed)
    )

    try:
        result = main()
    except KeyboardInterrupt as e:  # before or after a run (composing, a sweep's launcher)
        if full_error():
            raise
        interrupted(e, Path.cwd())
    finally:
        sweep.close_sweep()  # a sweep stopped by a signal or a crash: its summary, every job listed
        rundir.release_all()
    code = sweep.exit_code()  # a sweep: 1 unless every job ended with a result
    if code:
        sys.exit(code)
    return result


if __name__ == "__main__":
    cli()
