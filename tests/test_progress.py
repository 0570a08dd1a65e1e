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
    ]  # the end of the epoch: its own line after the evaluation (epoch_line)


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
    assert epoch_lines[0].startswith("[normbench] epoch 1/2: step 8/16, ") and "left in the run" in epoch_lines[0]
    assert all("train/loss=" in line and "val/acc=" in line and "samples_per_s=" in line for line in epoch_lines)
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
    assert made == [2, 5, 8]  # the three interval lines (the epoch's end is epoch_line's, from its metrics)
    assert caplog.records[-1].getMessage().endswith(": loss=8")  # the last interval line's numbers, made then

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


def test_the_epoch_line_gives_validation_metrics_and_the_whole_runs_eta() -> None:
    from normbench.sinks.progress import epoch_line

    metrics = {"train/loss": 1.2345, "val/acc": 0.5, "val/loss": 2.0, "perf/samples_per_s": 40.0}
    line = epoch_line(1, 5, 200, 500, metrics, elapsed=120.0, steps_here=150)  # 150 steps in 2 min: 300 left
    assert line == ("[normbench] epoch 2/5: step 200/500, 2m00s, ~4m00s left in the run: "
                    "train/loss=1.234 val/loss=2 val/acc=0.5 perf/samples_per_s=40")  # fmt: skip
    assert "left" not in epoch_line(4, 5, 500, 500, metrics, 300.0, 450)  # the last epoch: nothing left


@pytest.mark.e2e
def test_on_a_terminal_each_epoch_leaves_a_line_with_validation_and_eta(tmp_path) -> None:
    """Under a pseudo-terminal (the bar mode), each epoch's line stays after the bar is cleared."""
    import os
    import pty
    import re
    import subprocess
    import sys

    from tests.conftest import REPO, cli_env

    master, slave = pty.openpty()
    args = [sys.executable, "-m", "normbench", "experiment=quickstart", "dataset.num_train=256", "dataset.num_test=64",
            "epochs=2", "logger=local", f"hydra.run.dir={tmp_path / 'run'}"]  # fmt: skip
    proc = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, cwd=REPO, env=cli_env(), close_fds=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=300) == 0
    screen = b"".join(chunks).decode(errors="replace")
    lines = [line.split("\r")[-1] for line in screen.splitlines()]  # what a \r-redrawn line leaves
    first = [line for line in lines if line.startswith("[normbench] epoch 1/2: step 4/8")]
    assert first and re.search(r"~\d+s left in the run: .*val/acc=", first[0]), lines[-12:]
    assert any(line.startswith("[normbench] epoch 2/2: step 8/8") and "val/loss=" in line for line in lines)
