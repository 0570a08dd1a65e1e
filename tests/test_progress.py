"""Progress off a terminal (issue 26): plain lines (one per epoch, one per interval within a long
epoch) instead of a bar's carriage-return redraws; the bar on a terminal; an option to choose."""

from __future__ import annotations

import sys

import pytest

from normbench.sinks import progress
from normbench.sinks.progress import LineProgress, fmt_seconds, progress_display
from tests.test_reliability import SMALL
from tests.test_validate import run_cli_inprocess


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_lines_come_every_interval_and_at_the_end_with_the_bars_numbers(monkeypatch, caplog) -> None:
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    caplog.set_level("INFO", logger="normbench")
    lines = LineProgress(epoch=1, epochs=3, steps=10, every_s=60.0)
    for step in range(10):
        clock.t += 25.0  # 25 s a step: a line after steps 3, 6, 9 (60 s or more since the last one)
        lines.set_postfix({"loss": f"{2.0 - step / 10:.3f}", "samples/s": "41"})
        lines.update(1)
    lines.close()
    got = [r.getMessage() for r in caplog.records]
    assert got == [
        "[normbench] epoch 2/3: 3/10 steps in 1m15s, ~2m55s left: loss=1.800 samples/s=41",
        "[normbench] epoch 2/3: 6/10 steps in 2m30s, ~1m40s left: loss=1.500 samples/s=41",
        "[normbench] epoch 2/3: 9/10 steps in 3m45s, ~25s left: loss=1.200 samples/s=41",
        "[normbench] epoch 2/3: done, 10 steps in 4m10s: loss=1.100 samples/s=41",
    ]


def test_seconds_read_as_a_person_writes_them() -> None:
    assert [fmt_seconds(s) for s in (0.4, 59.6, 60, 185, 3599, 3600, 7625)] == [
        "0s", "1m00s", "1m00s", "3m05s", "59m59s", "1h00m", "2h07m"
    ]  # fmt: skip


def test_auto_is_the_bar_on_a_terminal_and_lines_elsewhere(monkeypatch) -> None:
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    assert type(progress_display("auto", 0, 1, 5, 60.0)).__name__ == "tqdm"
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    assert isinstance(progress_display("auto", 0, 1, 5, 60.0), LineProgress)
    assert type(progress_display("bar", 0, 1, 5, 60.0)).__name__ == "tqdm"


def test_a_run_off_a_terminal_writes_one_plain_line_per_epoch(tmp_path, monkeypatch, capsys) -> None:
    args = [a for a in SMALL if not a.startswith("logger.progress_bar")]  # the default: progress shown
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *args, "logger=local", f"hydra.run.dir={tmp_path}")
    assert code == 0, stderr
    assert "\r" not in stdout + stderr  # no redraws in a log file
    epoch_lines = [line for line in stdout.splitlines() if line.startswith("[normbench] epoch ")]
    assert [line.split(":")[0] for line in epoch_lines] == ["[normbench] epoch 1/2", "[normbench] epoch 2/2"]
    assert all("done, 8 steps" in line and "samples/s=" in line for line in epoch_lines)
    assert len((stdout + stderr).encode()) < 4000  # a few lines, not a redraw every step


@pytest.mark.parametrize("value", ["fancy", "none"])
def test_an_unknown_progress_mode_is_one_line(tmp_path, monkeypatch, capsys, value: str) -> None:
    code, _, stderr = run_cli_inprocess(
        monkeypatch, capsys, *SMALL, f"logger.progress={value}", f"hydra.run.dir={tmp_path / 'r'}"
    )
    assert code == 2 and stderr.strip() == (
        f"normbench: error: logger.progress={value} is not allowed; logger.progress must be one of auto, bar, lines"
    )
    assert not (tmp_path / "r").exists()


def test_the_numbers_are_made_only_when_shown(monkeypatch, caplog) -> None:
    """Issue 61: the postfix (syncs, formatting) is made when a line is written, not at every
    logged step; the bar reads it at most every BAR_POSTFIX_EVERY_S."""
    clock = Clock()
    monkeypatch.setattr(progress.time, "monotonic", clock)
    caplog.set_level("INFO", logger="normbench")
    made = []

    def numbers(i: int) -> dict[str, str]:
        made.append(i)
        return {"loss": f"{i}"}

    lines = LineProgress(epoch=0, epochs=1, steps=10, every_s=60.0)
    for step in range(10):
        clock.t += 25.0
        progress.show_postfix(lines, lambda i=step: numbers(i))
        lines.update(1)
    lines.close()
    assert made == [2, 5, 8, 9]  # the three interval lines and the epoch's end
    assert caplog.records[-1].getMessage().endswith(": loss=9")

    class Bar:
        def __init__(self) -> None:
            self.shown: list[dict[str, str]] = []

        def set_postfix(self, postfix: dict[str, str], refresh: bool = True) -> None:
            self.shown.append(postfix)

    bar, made[:] = Bar(), []
    for step in range(10):
        clock.t += 0.2  # a logged step every 0.2 s: the bar takes every third
        progress.show_postfix(bar, lambda i=step: numbers(i))
    assert made == [0, 3, 6, 9] and bar.shown == [{"loss": str(i)} for i in made]
