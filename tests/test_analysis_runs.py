"""Reading a run's metrics.jsonl back: a malformed line (two writers interleaved, a damaged file)
is an error naming the file and line, never skipped; a killed run's unfinished last line is left
out with a warning."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from normbench.analysis.loading.runs import load_local_runs
from normbench.base.errors import ConfigError


def write_job(root: Path, lines: list[str]) -> Path:
    job = root / "0"
    job.mkdir(parents=True)
    (job / "config.yaml").write_text("seed: 0\n")
    (job / "summary.json").write_text(json.dumps({"status": "finished", "step": 4}))
    (job / "metrics.jsonl").write_text("".join(lines))
    return job


ROWS = [json.dumps({"step": s, "epoch": 0, "train/batch_loss": 1.0 / s}) + "\n" for s in (1, 2, 3, 4)]


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ('{"step": 2, "epoch": 0, "train/ba{"step": 2, "epoch": 0, "train/batch_loss": 0.5}\n', "JSONDecodeError"),
        ("[1, 2]\n", "not a JSON object with an integer step"),
        ('{"epoch": 0, "train/batch_loss": 0.5}\n', "not a JSON object with an integer step"),
        ("\xff\xfe\n", "JSONDecodeError"),
    ],
    ids=["interleaved", "not-an-object", "no-step", "binary"],
)
def test_a_malformed_line_is_an_error_naming_file_and_line(tmp_path, bad: str, why: str) -> None:
    job = write_job(tmp_path, [ROWS[0], bad, *ROWS[2:]])
    with pytest.raises(ConfigError) as e:
        load_local_runs([tmp_path])
    message = str(e.value)
    assert message.startswith(f"{job / 'metrics.jsonl'}:2 is not a metrics row") and why in message
    assert "\n" not in message


def test_an_unfinished_last_line_is_left_out_with_a_warning(tmp_path, capsys) -> None:
    job = write_job(tmp_path, [*ROWS, '{"step": 5, "ep'])
    (run,) = load_local_runs([tmp_path])
    steps, values = run.series("train/batch_loss")
    assert steps.tolist() == [1, 2, 3, 4] and values.tolist() == [1.0, 0.5, 1 / 3, 0.25]
    err = capsys.readouterr().err.strip().splitlines()
    warning = f"{job / 'metrics.jsonl'}:5: an unfinished last line (a run killed mid-write) is left out"
    assert err == [f"normbench: warning: {warning}"]
