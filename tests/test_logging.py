"""normbench's terminal lines go through the ``normbench`` logger: the terminal shows them as
before (``[normbench] …`` on stdout, ``normbench: warning: …`` on stderr) and the job's
``<job>.log`` in the run directory holds the same lines; W&B says little in offline mode."""

from __future__ import annotations

import logging
import re
import subprocess
import sys

import pytest

from normbench.base import output
from tests.conftest import REPO, TINY_RUN, cli_env

RECORD = re.compile(r"^\[[^]]+\]\[normbench\]\[(INFO|WARNING|ERROR)\] - (.*)$")


def normbench_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(("[normbench]", "normbench: "))]


def run_quiet_wandb(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with W&B offline but not silenced (the test fixtures otherwise set WANDB_SILENT)."""
    env = cli_env()
    env.pop("WANDB_SILENT", None)
    return subprocess.run(
        [sys.executable, "-m", "normbench", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.e2e
def test_job_log_holds_what_the_terminal_showed(tmp_path) -> None:
    out = tmp_path / "run"
    base = (*TINY_RUN, "max_steps=2", "checkpoint.every_n_steps=1", f"hydra.run.dir={out}")
    first = run_quiet_wandb(*base)
    assert first.returncode == 0, first.stderr[-3000:]
    newest = sorted((out / "checkpoints").glob("step-*.pt"))[-1]
    newest.write_bytes(newest.read_bytes()[:1000])  # a truncated checkpoint: resume warns, falls back
    second = run_quiet_wandb(*base, "resume=true")
    assert second.returncode == 0, second.stderr[-3000:]

    (warning,) = normbench_lines(second.stderr)
    assert warning.startswith("normbench: warning: checkpoint ") and newest.name in warning
    directory, resumed, summary = normbench_lines(second.stdout)
    assert directory == f"[normbench] run directory: {out}"
    assert resumed.startswith("[normbench] resuming from step 1 ")
    assert summary.startswith("[normbench] finished after 2 steps")

    terminal = [normbench_lines(r.stdout) + normbench_lines(r.stderr) for r in (first, second)]
    records = [RECORD.match(line) for line in (out / "cli.log").read_text().splitlines()]
    logged = [m.group(2) for m in records if m]
    assert sorted(logged) == sorted(terminal[0] + terminal[1]) and len(logged) == 6
    levels = {m.group(2): m.group(1) for m in records if m}
    assert levels[warning] == "WARNING" and levels[summary] == "INFO"

    # W&B offline: its few start lines, no run history or summary at the end
    for r in (first, second):
        chatter = [line for line in r.stderr.splitlines() if line.startswith("wandb:")]
        assert 1 <= len(chatter) <= 4 and not any("Run history" in line or "Run summary" in line for line in chatter)
        assert any(str(out / "wandb") in line for line in chatter)  # where the offline run is


def test_outside_hydra_the_lines_reach_the_streams_of_the_moment(capsys) -> None:
    output.use_console()
    output.info("[normbench] one")
    output.warn("two")
    captured = capsys.readouterr()
    assert captured.out == "[normbench] one\n" and captured.err == "normbench: warning: two\n"
    assert logging.getLogger("normbench").propagate is False
