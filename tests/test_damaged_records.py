"""A resume over damaged records (issue 24): ``metrics.jsonl`` cut short or overwritten after the
checkpoint is refused in one line naming the file (never resumed over, never rows lost without a
word); a file moved aside is started anew with a warning; a hand-edited ``config.yaml`` is kept
beside the run's, with a warning."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

from normbench.base.errors import ConfigError
from normbench.sinks.files import LocalSink
from tests.faults import fault
from tests.test_reliability import SMALL, metrics
from tests.test_validate import run_cli_inprocess

CONFIG = {"norm": {"name": "bn"}, "lr": 0.1, "seed": 0, "hardware": {"device": "cpu", "resolved": {"threads": 2}}}


def written(tmp_path: Path, rows: int) -> tuple[int, str]:
    """A sink that logged ``rows`` rows: (offset, sha256) as a checkpoint records them."""
    sink = LocalSink(tmp_path, CONFIG, yaml.safe_dump(CONFIG))
    for step in range(1, rows + 1):
        sink.log(step, 0, {"loss": 1.0 / step})
    offset, digest = sink.offset(), sink.digest()
    sink.finish({"status": "interrupted"})
    return offset, digest


def test_the_digest_is_the_sha256_of_the_bytes_written(tmp_path: Path) -> None:
    offset, digest = written(tmp_path, 3)
    data = (tmp_path / "metrics.jsonl").read_bytes()
    assert offset == len(data) and digest == hashlib.sha256(data).hexdigest()
    resumed = LocalSink(tmp_path, CONFIG, yaml.safe_dump(CONFIG), resume_offset=offset, resume_sha256=digest)
    resumed.log(4, 0, {"loss": 0.25})
    assert resumed.digest() == hashlib.sha256((tmp_path / "metrics.jsonl").read_bytes()).hexdigest()


def test_rows_written_after_the_checkpoint_are_cut_back_as_before(tmp_path: Path) -> None:
    offset, digest = written(tmp_path, 2)
    with open(tmp_path / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 3, "epoch": 0, "loss": 0.3}\n{"step": 4, "ep')  # after the checkpoint, torn
    LocalSink(tmp_path, CONFIG, yaml.safe_dump(CONFIG), resume_offset=offset, resume_sha256=digest)
    assert (tmp_path / "metrics.jsonl").stat().st_size == offset


@fault("resume over a metrics.jsonl cut short or overwritten", "one line naming the file; nothing written", "one-line")
@pytest.mark.parametrize("damage", ["cut short", "garbage", "an edited row"])
def test_damaged_metrics_are_refused_before_anything_is_written(tmp_path: Path, damage: str) -> None:
    offset, digest = written(tmp_path, 4)
    path = tmp_path / "metrics.jsonl"
    data = path.read_bytes()
    damaged = {
        "cut short": data[: offset // 2],
        "garbage": b"\x00garbage\n" * 40,
        "an edited row": data.replace(b'"step": 2', b'"step": 7'),
    }[damage]
    path.write_bytes(damaged)
    (tmp_path / "config.yaml").write_text("mine: edited\n")
    with pytest.raises(ConfigError) as e:
        LocalSink(tmp_path, CONFIG, yaml.safe_dump(CONFIG), resume_offset=offset, resume_sha256=digest)
    message = str(e.value)
    assert str(path) in message and "\n" not in message and "move it aside" in message
    assert path.read_bytes() == damaged and (tmp_path / "config.yaml").read_text() == "mine: edited\n"


def test_a_metrics_file_moved_aside_is_started_anew_with_a_warning(tmp_path: Path, caplog) -> None:
    offset, digest = written(tmp_path, 2)
    (tmp_path / "metrics.jsonl").rename(tmp_path / "metrics.jsonl.damaged")
    sink = LocalSink(tmp_path, CONFIG, yaml.safe_dump(CONFIG), resume_offset=offset, resume_sha256=digest)
    sink.log(3, 0, {"loss": 0.3})
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [3]
    assert "is not there; the resumed run starts a new one" in caplog.text


@fault("resume after config.yaml in the run directory was edited by hand", "kept as config.yaml.edited-1; warned",
       "kept")  # fmt: skip
def test_a_hand_edited_config_is_kept_beside_the_runs(tmp_path: Path, caplog) -> None:
    offset, digest = written(tmp_path, 2)
    edited = yaml.safe_dump({**CONFIG, "lr": 0.5})
    (tmp_path / "config.yaml").write_text(edited)
    LocalSink(tmp_path, CONFIG, yaml.safe_dump(CONFIG), resume_offset=offset, resume_sha256=digest)
    assert (tmp_path / "config.yaml.edited-1").read_text() == edited
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == CONFIG
    assert "lr=0.1 there, 0.5 here" in caplog.text or "lr=0.5 there, 0.1 here" in caplog.text
    other_machine = {**CONFIG, "hardware": {"device": "cpu", "resolved": {"threads": 16}}}
    LocalSink(tmp_path, other_machine, yaml.safe_dump(other_machine), resume_offset=offset, resume_sha256=digest)
    assert not (tmp_path / "config.yaml.edited-2").exists()  # what the segment ran on is not an edit


@fault("resume over a metrics.jsonl overwritten after the checkpoint, through the command",
       "one line naming the file, exit 2; the run untouched", "one-line")  # fmt: skip
def test_the_command_refuses_to_resume_over_damaged_metrics_and_keeps_the_run(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "run"
    args = (*SMALL, "logger=local", "max_steps=6", "checkpoint.every_n_steps=3", f"hydra.run.dir={out}")
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *args)
    assert code == 0, stderr
    (out / "summary.json").unlink()  # as if killed after its last checkpoint (step 6)
    path = out / "metrics.jsonl"
    path.write_bytes(b"x" * path.stat().st_size)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *args, "resume=true")
    assert code == 2
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"normbench: error: {path}: its first")
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    path.rename(out / "metrics.jsonl.damaged")  # the remedy the line names
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *args, "resume=true")
    assert code == 0, stderr
    assert json.loads((out / "summary.json").read_text())["status"] == "finished"
    assert metrics(out) == []  # nothing after step 6 to log; the earlier rows are in the file set aside
