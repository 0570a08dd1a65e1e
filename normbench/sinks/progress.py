"""How a run shows its progress within an epoch: a tqdm bar on a terminal, plain lines elsewhere.

``logger.progress``: ``bar`` (tqdm on stderr, redrawn in place), ``lines`` (`LineProgress`: one
plain line every ``logger.progress_every_s`` seconds within a long epoch, on stdout and in the
job's log file), or ``auto`` (the bar when stderr is a terminal,
lines otherwise: a SLURM job, ``nohup``, CI). ``logger.progress_bar=false`` shows neither. Both
show the same numbers: the epoch's running train metrics and the throughput (`show_postfix`),
read and formatted only when the display draws: the lines when one is written, the bar at most
every ``BAR_POSTFIX_EVERY_S`` seconds (not at every logged step). After each epoch, either way,
one line stays (`epoch_line`): its train and validation metrics and the whole run's ETA.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from normbench.base.output import info

PROGRESS_MODES = ("auto", "bar", "lines")
BAR_POSTFIX_EVERY_S = 0.5
"""The bar reads its numbers at most this often (tqdm redraws at most every 0.1 s)."""

Postfix = Mapping[str, Any] | Callable[[], Mapping[str, Any]]


class LineProgress:
    """The interface of the tqdm bar the runner uses (``update``, ``set_postfix``, ``close``),
    written as plain lines: one every ``every_s`` seconds (if the epoch lasts that long); the epoch's
    end is `epoch_line`'s, with its validation metrics."""

    def __init__(self, epoch: int, epochs: int, steps: int, every_s: float) -> None:
        self.desc = f"epoch {epoch + 1}/{epochs}"
        self.total, self.n, self.every_s = steps, 0, every_s
        self.postfix: Postfix = {}
        self.t0 = self.last = time.monotonic()

    def update(self, n: int = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last >= self.every_s and self.n < self.total:
            self.last = now
            self._line(now)

    def set_postfix(self, postfix: Postfix, refresh: bool = False) -> None:
        """The numbers the next line shows: a mapping, or a function that makes it (called only
        when a line is written)."""
        self.postfix = postfix if callable(postfix) else dict(postfix)

    def close(self) -> None:
        """Nothing: the epoch's line (`epoch_line`, after its evaluation) says how it ended."""

    def _line(self, now: float, done: bool = False) -> None:
        elapsed = now - self.t0
        postfix = self.postfix() if callable(self.postfix) else self.postfix
        numbers = " ".join(f"{k}={v}" for k, v in postfix.items())
        where = f"{self.n}/{self.total} steps" if not done else f"done, {self.n} steps"
        eta = ""
        if not done and self.n:
            eta = f", ~{fmt_seconds(elapsed / self.n * (self.total - self.n))} left"
        info(f"[normbench] {self.desc}: {where} in {fmt_seconds(elapsed)}{eta}" + (f": {numbers}" if numbers else ""))


EPOCH_KEYS = ("train/loss", "train/acc", "val/loss", "val/acc", "val/bleu", "test/bleu", "perf/samples_per_s",
              "perf/tokens_per_s")
"""What an epoch's result line shows, where the epoch has it (validation only on evaluation epochs)."""


def epoch_line(epoch: int, epochs: int, step: int, total_steps: int, metrics: Mapping[str, Any], elapsed: float,
               steps_here: int) -> str:  # fmt: skip
    """The line that stays after each epoch, on a terminal too (the bar is cleared): the epoch, the
    step against the run's, its train and validation metrics, the time so far and the whole run's
    ETA (at this segment's pace: ``steps_here`` steps in ``elapsed`` seconds)."""
    numbers = " ".join(f"{k}={metrics[k]:.4g}" for k in EPOCH_KEYS if isinstance(metrics.get(k), (int, float)))
    left = total_steps - step
    eta = f", ~{fmt_seconds(elapsed / steps_here * left)} left in the run" if steps_here > 0 and left > 0 else ""
    return f"[normbench] epoch {epoch + 1}/{epochs}: step {step}/{total_steps}, {fmt_seconds(elapsed)}{eta}: {numbers}"


def show_epoch(epoch: int, epochs: int, step: int, total_steps: int, metrics: Mapping[str, Any], elapsed: float,
               steps_here: int) -> None:  # fmt: skip
    """`epoch_line` on stdout and in the job's log file."""
    info(epoch_line(epoch, epochs, step, total_steps, metrics, elapsed, steps_here))


def fmt_seconds(s: float) -> str:
    """``42s``, ``3m05s``, ``2h07m``."""
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def show_postfix(display: Any, postfix: Callable[[], Mapping[str, Any]]) -> None:
    """Give ``display`` the numbers ``postfix()`` makes, without making them now: `LineProgress`
    calls it when it writes a line; the tqdm bar gets them at most every ``BAR_POSTFIX_EVERY_S``."""
    if isinstance(display, LineProgress):
        display.set_postfix(postfix)
        return
    now = time.monotonic()
    if now - getattr(display, "_normbench_postfix_at", -BAR_POSTFIX_EVERY_S) >= BAR_POSTFIX_EVERY_S:
        display._normbench_postfix_at = now
        display.set_postfix(postfix(), refresh=False)


def progress_display(mode: str, epoch: int, epochs: int, steps: int, every_s: float) -> Any:
    """The bar or the lines for one epoch of ``steps`` steps (``mode``: `PROGRESS_MODES`)."""
    if mode == "auto":
        mode = "bar" if sys.stderr.isatty() else "lines"
    if mode == "lines":
        return LineProgress(epoch, epochs, steps, every_s)
    from tqdm import tqdm

    return tqdm(total=steps, desc=f"epoch {epoch + 1}/{epochs}", leave=False, file=sys.stderr, dynamic_ncols=True)
