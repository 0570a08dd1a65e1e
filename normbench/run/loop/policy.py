"""How a run ends: its status and the summary. (How it starts over or continues is the
`normbench.resume.checkpointer.Checkpointer`'s: `Checkpointer.start`.)

- `Ending`: the status a run ends with, the exit code W&B records, the error in one line;
  `write_summary` writes it (``summary.json``, W&B) and `print_summary` prints its line.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from normbench.base.errors import ConfigError, RunInterrupted, is_environment_error, one_line_os_error, signal_name
from normbench.base.output import info, warn
from normbench.divergence import diverged_reason
from normbench.records import segments as run_records

if TYPE_CHECKING:
    from normbench.run.loop.state import Run


@dataclass
class Ending:
    """How a run ended: its status, the exit code W&B records (0: finished or diverged, 128 +
    signal: interrupted, 1: failed), the error in one line, the signal's name."""

    status: str
    exit_code: int = 0
    error: str | None = None
    signal: str | None = None

    @classmethod
    def of(cls, error: BaseException, run: Run) -> Ending:
        """The ending that ``error`` (raised out of `normbench.run.loop.train.fit`) makes."""
        if isinstance(error, (RunInterrupted, KeyboardInterrupt)):
            stop = error if isinstance(error, RunInterrupted) else RunInterrupted(signal.SIGINT)
            if run.progress.epochs_done >= run.plan.epochs:  # the signal came after the last step: nothing is missing
                return cls("finished")
            return cls("interrupted", stop.exit_code, signal=signal_name(stop.signum))
        if isinstance(error, SystemExit):  # submitit requeues a preempted job with sys.exit(-1)
            code = error.code if isinstance(error.code, int) and error.code else 1
            return cls("interrupted", code, signal="exit")
        return cls("failed", 1, error=one_line(error))


def one_line(error: BaseException) -> str:
    """``error`` as one line: a `ConfigError`'s message, a refused write's file and reason, else
    the type and the first line of the message."""
    if isinstance(error, ConfigError):
        return str(error)
    if is_environment_error(error):
        return one_line_os_error(error)  # type: ignore[arg-type]
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def write_summary(run: Run, ending: Ending) -> dict[str, Any]:
    """The run's summary, written to ``summary.json`` and W&B (whose run is finished with the
    ending's exit code); ``wall_time_s`` counts every segment of a resumed run. Temporary files of
    failed writes go first (on a full disk, that is the space the summary needs); when the run is
    failing anyway, a summary that cannot be written is a warning, not a second error."""
    c = run.progress
    summary = {"status": ending.status, "step": c.step, "epoch": c.epochs_done, "wall_time_s": run.wall_time(),
               "train_time_s": run.train_time()}  # fmt: skip
    summary.update({**run.info, **c.final, "segments": c.segments})
    if ending.error is not None:
        summary["error"] = ending.error
    if ending.signal is not None:
        summary["interrupted_by"] = ending.signal
    if c.diverged_at is not None:
        summary["diverged_step"] = c.diverged_at
        summary["diverged_in"] = c.diverged_in
        summary["diverged_reason"] = c.diverged_reason or diverged_reason(None, run.plan.loss_factor)
    if run.sinks.wandb is not None:
        summary["wandb_run_id"] = run.sinks.wandb.run_id
    summary["machine"] = run.placement.machine_record(run.load_start)
    try:
        if run.placement.is_main:
            run_records.remove_tmp_files(run.run_dir)
        run.sinks.logger.finish(summary, exit_code=ending.exit_code)
    except Exception as e:
        if ending.status in ("finished", "diverged"):
            raise
        warn(f"the summary of this {ending.status} run could not be written ({one_line(e)})")
    finally:
        if run.placement.is_main:
            run_records.remove_tmp_files(run.run_dir)
    return summary


def print_summary(summary: Mapping[str, Any], unit: str) -> None:
    """The run's one result line (stdout and the job's log file)."""
    keys = ["val/acc", "val/bleu", "test/bleu", "val/loss", "train/loss", f"perf/{unit}_per_s"]
    parts = [f"{k}={summary[k]:.4g}" for k in keys if isinstance(summary.get(k), (int, float))]
    if summary["status"] == "diverged":  # the cause first: where and what went bad, then where it stopped
        info(f"[normbench] diverged at step {summary['diverged_step']}: {summary['diverged_reason']} "
             f"(stopped at step {summary['step']}, {summary['wall_time_s']:.1f}s)")  # fmt: skip
        return
    info(
        f"[normbench] {summary['status']} after {summary['step']} steps, {summary['wall_time_s']:.1f}s: "
        + " ".join(parts)
    )
