"""Checkpoint files: atomic writes, plain-type state under weights_only, RNG round trips, the
fallback past a truncated file, and the config check on resume."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from normbench.checkpoint import (
    Checkpointer,
    capture_rng,
    config_difference,
    list_checkpoints,
    load_latest,
    restore_rng,
)
from normbench.errors import ConfigError

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


def test_rng_states_round_trip_through_a_weights_only_file(tmp_path) -> None:
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    np.random.randn()  # leaves a cached gaussian in numpy's state
    ckpt = Checkpointer(tmp_path, {"every_n_steps": 1})
    ckpt.save(_state(5))
    expected = _draws()
    state, path = load_latest(tmp_path)  # torch.load(weights_only=True) inside
    assert path.name == "step-00000005.pt"
    restore_rng(state["rng"])
    assert _draws() == expected


def test_keeps_the_newest_checkpoints_only(tmp_path) -> None:
    ckpt = Checkpointer(tmp_path, {"keep": 2})
    for step in (3, 6, 9):
        ckpt.save(_state(step))
    assert [s for s, _ in list_checkpoints(tmp_path)] == [9, 6]
    assert not list(ckpt.folder.glob(".*tmp"))  # no temporary file left behind


def test_truncated_checkpoint_falls_back_to_the_previous_with_a_warning(tmp_path, capsys) -> None:
    ckpt = Checkpointer(tmp_path, {})
    ckpt.save(_state(3))
    newest = ckpt.save(_state(6))
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])
    state, path = load_latest(tmp_path)
    assert state["step"] == 3 and torch.equal(state["weights"], torch.full((3,), 3.0))
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "normbench: warning:" in err[0] and "step-00000006.pt" in err[0]


def test_a_crash_while_writing_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch) -> None:
    ckpt = Checkpointer(tmp_path, {})
    ckpt.save(_state(3))

    def dying_save(obj, f, *a, **kw):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", dying_save)
    with pytest.raises(OSError):
        ckpt.save(_state(6))
    monkeypatch.undo()
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3]
    assert load_latest(tmp_path)[0]["step"] == 3


def test_resume_refuses_a_checkpoint_of_another_configuration(tmp_path) -> None:
    ckpt = Checkpointer(tmp_path, {})
    ckpt.save(_state(4))
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
