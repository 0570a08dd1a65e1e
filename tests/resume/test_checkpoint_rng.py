"""A checkpoint's CUDA RNG states restored on a machine with fewer visible GPUs than at save
(on the CPU: `torch.cuda`'s device count and RNG setter replaced by fakes)."""

from __future__ import annotations

import logging

import pytest
import torch

from normbench.resume.seeds import capture_rng, restore_rng


def fake_cuda(monkeypatch: pytest.MonkeyPatch, visible: int) -> dict[int, torch.Tensor]:
    """``visible`` CUDA devices whose RNG states land in the returned dict; setting the state of
    a device that does not exist raises IndexError, as torch's ``default_generators[idx]`` does."""
    states: dict[int, torch.Tensor] = {}

    def set_rng_state(new_state: torch.Tensor, device: int | str | torch.device = "cuda") -> None:
        index = device if isinstance(device, int) else (torch.device(device).index or 0)
        if index >= visible:
            raise IndexError("tuple index out of range")
        states[index] = new_state

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: visible)
    monkeypatch.setattr(torch.cuda, "set_rng_state", set_rng_state)
    monkeypatch.setattr(torch.cuda.random, "set_rng_state", set_rng_state)
    return states


def saved(devices: int) -> dict:
    state = capture_rng()
    state["cuda"] = [torch.full((16,), i, dtype=torch.uint8) for i in range(devices)]
    return state


def test_fewer_visible_gpus_than_at_save_restores_those_that_exist(monkeypatch, caplog) -> None:
    states = fake_cuda(monkeypatch, visible=1)
    with caplog.at_level(logging.WARNING):
        restore_rng(saved(devices=2))
    assert sorted(states) == [0] and torch.equal(states[0], torch.zeros(16, dtype=torch.uint8))
    assert "CUDA RNG states of 2 devices" in caplog.text and "1 is visible" in caplog.text


def test_as_many_or_more_visible_gpus_restore_every_saved_state_without_a_warning(monkeypatch, caplog) -> None:
    states = fake_cuda(monkeypatch, visible=3)
    with caplog.at_level(logging.WARNING):
        restore_rng(saved(devices=2))
    assert sorted(states) == [0, 1] and torch.equal(states[1], torch.ones(16, dtype=torch.uint8))
    assert "CUDA RNG" not in caplog.text
