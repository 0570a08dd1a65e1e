"""Checkpoint files: atomic writes, plain-type state under weights_only, RNG round trips, the
SHA-256 sidecars and the fallback past a corrupted or truncated file, no silent fresh start, the
`keep` rotation past bad and stale files, and the config check on resume."""

from __future__ import annotations

import hashlib
import json
import random
import signal
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from normbench.base.errors import ConfigError
from normbench.resume.checkpoint import (
    Carried,
    CheckpointConfig,
    Position,
    Trained,
    checksum_path,
    config_difference,
    list_checkpoints,
    record_difference,
)
from normbench.resume.checkpointer import Checkpointer
from normbench.resume.seeds import capture_rng, restore_rng
from tests.conftest import TINY_RUN
from tests.faults import fault
from tests.test_validate import run_cli_inprocess

CONFIG = {"lr": 0.1, "norm": {"name": "bn", "eps": 1e-5}, "resume": False, "logger": {"wandb": True}}


def _state(step: int, config: dict | None = None) -> dict:
    return {
        "format": 1,
        "config": config or CONFIG,
        "step": step,
        "weights": torch.full((3,), float(step)),
        "rng": capture_rng(),
    }


def _draws() -> tuple:
    return random.random(), float(np.random.rand()), np.random.randn(), torch.rand(3).tolist()


class SavedRun:
    """What `Checkpointer.save` asks of a run (`normbench.resume.checkpointer.Saved`)."""

    def __init__(self, trained: Trained, carried: Carried) -> None:
        self._trained, self._carried = trained, carried

    def trained(self) -> Trained:
        return self._trained

    def carried(self) -> Carried:
        return self._carried


def _trained(seed: int) -> Trained:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / (1 + s))
    return Trained(model, opt, sched, [], torch.Generator().manual_seed(seed))


def _train_step(t: Trained) -> None:
    x = torch.randn(8, 4, generator=t.generator) + torch.rand(1)  # the loader's stream and the global one
    loss = t.model(x).square().mean()
    t.optimizer.zero_grad()
    loss.backward()
    t.optimizer.step()
    t.scheduler.step()


def test_a_saved_run_restored_into_new_objects_continues_bit_for_bit(tmp_path) -> None:
    """`Checkpointer.save` of a run's objects and `Checkpointer.restore` into fresh ones: the next
    step's weights, BN buffers and random draws equal the uninterrupted run's; the records carried as given."""
    run = _trained(0)
    _train_step(run)
    _train_step(run)
    carried = Carried(final={"val/acc": 0.5, "kept out": torch.ones(1)}, reference_loss=2.0, wandb_run_id="w1",
                      metrics_offset=10, metrics_sha256="ab", wall_time_s=3.0, train_time_s=2.0,
                      segments=[{"from_step": 0}])  # fmt: skip
    at = Position(2, 1, 2, run.generator.get_state(), {"loss": torch.tensor(1.5)})
    path = Checkpointer(tmp_path, CheckpointConfig(), CONFIG).save(SavedRun(run, carried), at)
    assert path is not None and path.name == "step-00000002.pt"
    _train_step(run)  # the uninterrupted run
    expected, expected_draw = {k: v.clone() for k, v in run.model.state_dict().items()}, torch.rand(3)

    resumed = _trained(1)  # another initialization, another stream: all of it comes from the checkpoint
    ckpt = Checkpointer(tmp_path, CheckpointConfig(), CONFIG)
    state = ckpt.start(resume=True)
    assert state is not None
    ckpt.restore(state, resumed)
    _train_step(resumed)
    got = resumed.model.state_dict()
    assert got.keys() == expected.keys() and all(torch.equal(got[k], expected[k]) for k in expected)
    assert torch.equal(torch.rand(3), expected_draw)
    assert (state["step"], state["epoch"], state["batch_in_epoch"]) == (2, 1, 2)
    assert state["final"] == {"val/acc": 0.5} and state["epoch_sums"]["loss"].item() == 1.5
    assert (state["reference_loss"], state["wandb_run_id"], state["metrics_offset"]) == (2.0, "w1", 10)
    assert (state["wall_time_s"], state["train_time_s"], state["segments"]) == (3.0, 2.0, [{"from_step": 0}])
    with pytest.raises(ConfigError, match="already holds a run"):  # a new run where one left a checkpoint
        Checkpointer(tmp_path, CheckpointConfig(), CONFIG).start(resume=False)


def test_rng_states_round_trip_through_a_weights_only_file(tmp_path) -> None:
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    np.random.randn()  # leaves a cached gaussian in numpy's state
    ckpt = Checkpointer(tmp_path, CheckpointConfig(every_n_steps=1))
    ckpt.write(_state(5))
    expected = _draws()
    state = Checkpointer(tmp_path, CheckpointConfig()).resume_state(CONFIG)  # torch.load(weights_only=True) inside
    path = list_checkpoints(tmp_path)[0][1]
    assert path.name == "step-00000005.pt"
    restore_rng(state["rng"])
    assert _draws() == expected


def test_keeps_the_newest_checkpoints_only(tmp_path) -> None:
    ckpt = Checkpointer(tmp_path, CheckpointConfig(keep=2))
    for step in (3, 6, 9):
        ckpt.write(_state(step))
    assert [s for s, _ in list_checkpoints(tmp_path)] == [9, 6]
    assert not list(ckpt.folder.glob(".*tmp"))  # no temporary file left behind


def test_truncated_checkpoint_falls_back_to_the_previous_with_a_warning(tmp_path, capsys) -> None:
    ckpt = Checkpointer(tmp_path, CheckpointConfig())
    ckpt.write(_state(3))
    newest = ckpt.write(_state(6))
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])
    state = Checkpointer(tmp_path, CheckpointConfig()).resume_state(CONFIG)
    assert state["step"] == 3 and torch.equal(state["weights"], torch.full((3,), 3.0))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "normbench: warning:" in err[0] and "step-00000006.pt" in err[0]


@fault("a crash while a checkpoint is written", "the previous checkpoint stays whole", "kept")
def test_a_crash_while_writing_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch) -> None:
    ckpt = Checkpointer(tmp_path, CheckpointConfig())
    ckpt.write(_state(3))

    def dying_save(obj, f, *a, **kw):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(OSError):
        ckpt.write(_state(6))
    monkeypatch.undo()
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3]
    assert Checkpointer(tmp_path, CheckpointConfig()).resume_state(CONFIG)["step"] == 3


def test_resume_refuses_a_checkpoint_of_another_configuration(tmp_path) -> None:
    ckpt = Checkpointer(tmp_path, CheckpointConfig())
    ckpt.write(_state(4))
    other = {**CONFIG, "norm": {"name": "bn", "eps": 1e-3}}
    with pytest.raises(ConfigError, match=r"norm\.eps=1e-05 there, 0\.001 here"):
        ckpt.resume_state(other)
    # logging, checkpoint and resume settings may change between a run and its resume
    volatile = {**CONFIG, "resume": True, "logger": {"wandb": False}, "checkpoint": {"every_n_steps": 9}}
    assert ckpt.resume_state(volatile)["step"] == 4


def test_config_difference_names_the_first_differing_key() -> None:
    assert config_difference(CONFIG, CONFIG) is None
    assert config_difference(CONFIG, {**CONFIG, "lr": 0.2}) == "lr=0.1 there, 0.2 here"
    assert config_difference(CONFIG, {**CONFIG, "seed": 1}) == "seed is new here (=1)"


def _records() -> tuple[dict, dict]:
    """The quickstart's record as the run writes it, and as an older version wrote it (without
    ``optimizer.momentum``, whose default is 0.9, and without ``hardware.resolved``)."""
    import copy

    from normbench.config import as_recorded, parse
    from tests.conftest import compose_cfg

    cfg = compose_cfg(["experiment=quickstart"])
    record = as_recorded(cfg, parse(cfg))
    record["optimizer"]["momentum"] = 0.9
    old = copy.deepcopy(record)
    del old["optimizer"]["momentum"]
    record["hardware"]["resolved"] = {"device": "cpu", "world_size": 1}
    return old, record


def test_records_are_compared_as_the_typed_loader_reads_them() -> None:
    from normbench.config import comparable_record

    old, record = _records()
    assert config_difference(old, record) == "optimizer.momentum is new here (=0.9)"  # as written
    assert record_difference(old, record, comparable_record) is None  # it ran with 0.9 too
    changed = {**record, "optimizer": {**record["optimizer"], "momentum": 0.5}}
    assert record_difference(old, changed, comparable_record) == "optimizer.momentum=0.9 there, 0.5 here"
    unreadable = record_difference({**old, "epoks": 3}, record, comparable_record)
    assert unreadable is not None and "cannot be read" in unreadable and "epoks" in unreadable


def test_resume_checks_a_checkpoint_of_an_older_version_as_loaded(tmp_path) -> None:
    from normbench.config import comparable_record

    old, record = _records()
    ckpt = Checkpointer(tmp_path, CheckpointConfig())
    ckpt.write(_state(4, old))
    assert ckpt.resume_state(record, load=comparable_record)["step"] == 4
    with pytest.raises(ConfigError, match=r"optimizer\.momentum=0\.9 there, 0\.5 here"):
        ckpt.resume_state({**record, "optimizer": {**record["optimizer"], "momentum": 0.5}}, load=comparable_record)


def test_a_config_yaml_of_an_older_version_is_no_hand_edit(tmp_path) -> None:
    from normbench.config import comparable_record
    from normbench.sinks.files import keep_edited_config

    old, record = _records()
    (tmp_path / "config.yaml").write_text(json.dumps(old))  # JSON is YAML
    assert keep_edited_config(tmp_path / "config.yaml", record, comparable_record) is None
    assert (tmp_path / "config.yaml").is_file()
    assert keep_edited_config(tmp_path / "config.yaml", record) == tmp_path / "config.yaml.edited-1"  # as written


def _flip_weights(path: Path, step: int) -> None:
    """Change one float of the saved ``weights`` in place, leaving a file that still loads."""
    data = path.read_bytes()
    old = struct.pack("<3f", *[float(step)] * 3)
    assert data.count(old) == 1
    path.write_bytes(data.replace(old, struct.pack("<3f", float(step), float(step), step + 0.5)))


def test_sidecar_holds_the_sha256_of_the_file(tmp_path) -> None:
    path = Checkpointer(tmp_path, CheckpointConfig()).write(_state(4))
    digest, name = checksum_path(path).read_text().split()
    assert name == path.name and digest == hashlib.sha256(path.read_bytes()).hexdigest()


@fault("flipped bits in the newest checkpoint", "a warning naming it; the previous verified one is used", "kept")
def test_flipped_bits_fall_back_to_the_previous_verified_checkpoint(tmp_path, capsys) -> None:
    ckpt = Checkpointer(tmp_path, CheckpointConfig())
    ckpt.write(_state(3))
    newest = ckpt.write(_state(6))
    _flip_weights(newest, 6)
    # the damage is silent to torch: the file loads, with other weights
    assert torch.load(newest, weights_only=True)["weights"].tolist() == [6.0, 6.0, 6.5]
    state = Checkpointer(tmp_path, CheckpointConfig()).resume_state(CONFIG)  # a new process resuming
    assert state["step"] == 3 and torch.equal(state["weights"], torch.full((3,), 3.0))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("normbench: warning: checkpoint ") and newest.name in err[0]
    assert "SHA-256" in err[0] and "using the previous one" in err[0]
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3]  # the bad one is out of the rotation
    assert (ckpt.folder / "rejected" / newest.name).is_file()  # and kept for inspection


def test_resume_stops_when_no_checkpoint_verifies(tmp_path, capsys) -> None:
    ckpt = Checkpointer(tmp_path, CheckpointConfig())
    paths = [ckpt.write(_state(3)), ckpt.write(_state(6))]
    _flip_weights(paths[0], 3)
    paths[1].write_bytes(paths[1].read_bytes()[:100])
    before = sorted((p.name, p.read_bytes()) for p in ckpt.folder.iterdir())
    with pytest.raises(ConfigError, match="no checkpoint in .* verifies") as e:
        ckpt.resume_state(CONFIG)
    assert "step-00000003.pt" in str(e.value) and "step-00000006.pt" in str(e.value) and "\n" not in str(e.value)
    assert "not starting over from step 0" in str(e.value)
    assert sorted((p.name, p.read_bytes()) for p in ckpt.folder.iterdir()) == before  # nothing touched
    assert capsys.readouterr().err == ""


def test_resume_without_any_checkpoint_is_an_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="holds no checkpoint, so there is nothing to resume"):
        Checkpointer(tmp_path, CheckpointConfig()).resume_state(CONFIG)
    # a checkpoint without its checksum (died between the two renames) does not count either
    Checkpointer(tmp_path, CheckpointConfig()).write(_state(2))
    checksum_path(list_checkpoints(tmp_path)[0][1]).unlink()
    with pytest.raises(ConfigError, match="has no checksum file step-00000002.pt.sha256"):
        Checkpointer(tmp_path, CheckpointConfig()).resume_state(CONFIG)


@fault("stale .tmp and bad checkpoint files", "no keep slot taken; cleaned up, bad ones kept aside", "kept")
def test_bad_and_stale_files_take_no_keep_slot_and_are_cleaned(tmp_path, capsys) -> None:
    ckpt = Checkpointer(tmp_path, CheckpointConfig(keep=2))
    ckpt.write(_state(3))
    bad = ckpt.write(_state(6))
    _flip_weights(bad, 6)
    (ckpt.folder / ".step-00000009.pt.tmp").write_bytes(b"PK half a file")  # a write that died
    (ckpt.folder / ".step-00000006.pt.sha256.tmp").write_text("0" * 64)
    later = Checkpointer(tmp_path, CheckpointConfig(keep=2))  # the next process
    later.write(_state(9))
    assert [s for s, _ in list_checkpoints(tmp_path)] == [9, 3]  # the two newest verified ones
    assert sorted(p.name for p in ckpt.folder.iterdir() if p.is_file()) == [
        "step-00000003.pt",
        "step-00000003.pt.sha256",
        "step-00000009.pt",
        "step-00000009.pt.sha256",
    ]
    assert (ckpt.folder / "rejected" / bad.name).is_file()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and bad.name in err[0]


@fault("a corrupted checkpoint and no other", "one line; the run untouched; never a silent restart", "one-line")
def test_cli_resume_past_a_corrupted_checkpoint_is_one_line_and_keeps_the_run(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "run"
    base = (*TINY_RUN, "max_steps=2", "logger=local", f"hydra.run.dir={out}")
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *base)
    assert code == 0, stderr
    ((_, only),) = list_checkpoints(out)
    data = bytearray(only.read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit
    only.write_bytes(bytes(data))
    summary = json.loads((out / "summary.json").read_text())  # a run stopped before its end (a finished one
    (out / "summary.json").write_text(json.dumps({**summary, "status": "interrupted"}))  # has nothing to resume)
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *base, "resume=true")
    assert code == 2 and stderr.count("\n") == 1, stderr
    assert stderr.startswith("normbench: error: resume=true but no checkpoint in") and only.name in stderr
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before  # the run is untouched, Hydra's records of it too
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"


@fault("resume=true where there is nothing to resume", "one line; no fresh run, nothing left behind", "one-line")
def test_cli_resume_without_a_checkpoint_is_refused(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "fresh"
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *TINY_RUN, "resume=true", f"hydra.run.dir={out}")
    assert code == 2 and stderr.count("\n") == 1 and f"hydra.run.dir={out} does not exist" in stderr
    assert not out.exists()  # nothing left behind
    out.mkdir()  # a folder without a run in it
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *TINY_RUN, "resume=true", f"hydra.run.dir={out}")
    assert code == 2 and stderr.count("\n") == 1 and "holds no checkpoint" in stderr
    assert list(out.iterdir()) == []


def test_a_requested_stop_makes_the_next_step_a_checkpoint_and_stops_after_it(tmp_path) -> None:
    from normbench.base.errors import RunInterrupted

    ckpt = Checkpointer(tmp_path, CheckpointConfig(every_n_steps=100))
    assert not ckpt.due(7)
    ckpt.request_stop(signal.SIGTERM)
    assert ckpt.due(7)
    with pytest.raises(RunInterrupted) as e:
        ckpt.write(_state(7))
    assert (e.value.signum, e.value.step, e.value.exit_code) == (signal.SIGTERM, 7, 143)
    assert Checkpointer(tmp_path, CheckpointConfig()).resume_state(CONFIG)["step"] == 7  # complete and verified
