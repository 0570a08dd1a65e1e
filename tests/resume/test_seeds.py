"""Per-rank random streams (issue 25): ranks other than 0 draw their own dropout and noise, rank 0
keeps the one-process stream, and each rank's state is saved beside rank 0's checkpoint so that a
resumed DDP run continues bit for bit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from normbench.resume.checkpoint import Carried, CheckpointConfig, Position, Trained
from normbench.resume.checkpointer import Checkpointer
from normbench.resume.files import list_checkpoints, rank_rng_path, remove_stale_tmp
from normbench.resume.seeds import rank_seed, restore_rank_rng, save_rank_rng, seed_everything, seed_rank_streams
from tests.placement.test_distributed import TINY, _launch, _run_dirs


def draws() -> torch.Tensor:
    return torch.rand(5)


def test_rank_seeds_are_distinct_and_repeatable() -> None:
    seeds = {(s, r, t): rank_seed(s, r, t) for s in (0, 1, 2**63 - 1) for r in range(4) for t in (0, 3)}
    assert len(set(seeds.values())) == len(seeds)  # seed + rank would collide: (1, 0) and (0, 1)
    assert all(0 <= v < 2**63 for v in seeds.values())
    assert rank_seed(7, 2, 3) == rank_seed(7, 2, 3)


def test_rank_0_keeps_the_one_process_stream_and_the_others_get_their_own() -> None:
    seed_everything(5)
    alone = draws()
    seed_everything(5)
    seed_rank_streams(5, 0)
    rank0 = draws()
    seed_everything(5)
    seed_rank_streams(5, 1)
    rank1 = draws()
    seed_everything(5)
    seed_rank_streams(5, 2)
    rank2 = draws()
    assert torch.equal(alone, rank0)
    assert not torch.equal(rank0, rank1) and not torch.equal(rank1, rank2)


def test_a_ranks_state_is_restored_from_its_own_file(tmp_path: Path, caplog) -> None:
    seed_everything(11)
    draws()
    save_rank_rng(tmp_path, 3, 1)
    expected = draws()
    seed_everything(999)
    assert restore_rank_rng(tmp_path, 3, seed=11, rank=1)
    assert torch.equal(draws(), expected)
    rank_rng_path(tmp_path, 3, 1).write_bytes(b"damaged")  # fails its checksum
    assert not restore_rank_rng(tmp_path, 3, seed=11, rank=1)
    fallback = draws()
    assert not restore_rank_rng(tmp_path, 6, seed=11, rank=1)  # missing
    assert "cannot be used (its SHA-256" in caplog.text and "cannot be used (it is missing)" in caplog.text
    restore_rank_rng(tmp_path, 3, seed=11, rank=1)
    assert torch.equal(draws(), fallback)  # the fallback stream is a function of (seed, rank, step)


class OneRun:
    """What `Checkpointer.save` asks of a run (`normbench.resume.checkpointer.Saved`)."""

    def __init__(self, trained: Trained) -> None:
        self._trained = trained

    def trained(self) -> Trained:
        return self._trained

    def carried(self) -> Carried:
        return Carried()


def test_rank_files_are_not_checkpoints_and_go_with_theirs(tmp_path: Path) -> None:
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    run = OneRun(Trained(model, opt, sched, [], torch.Generator()))
    ckpt = Checkpointer(tmp_path, CheckpointConfig(keep=2))
    other_rank = Checkpointer(tmp_path, CheckpointConfig(keep=2), rank=1)  # the same run's rank 1
    for step in (3, 6, 9):
        at = Position(step, 0, step, torch.Generator().get_state(), {})
        assert other_rank.save(run, at) is None  # its random state, no checkpoint
        assert rank_rng_path(ckpt.folder, step, 1).exists()
        ckpt.save(run, at)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [9, 6]
    assert not rank_rng_path(ckpt.folder, 3, 1).exists()  # removed with step 3
    assert rank_rng_path(ckpt.folder, 6, 1).exists() and rank_rng_path(ckpt.folder, 9, 1).exists()
    writing = ckpt.folder / f".{rank_rng_path(ckpt.folder, 12, 1).name}.tmp"
    writing.write_bytes(b"a rank writing now")
    remove_stale_tmp(ckpt.folder)  # rank 0's cleanup leaves the other ranks' writes alone
    assert writing.exists()


@pytest.mark.e2e
def test_a_resumed_ddp_run_with_noise_continues_bit_for_bit(tmp_path: Path) -> None:
    """Two gloo ranks with ``bn_noisy`` (per-activation noise from the global stream): the run
    resumed from its step-3 checkpoint logs the uninterrupted run's losses, float for float. Before
    each rank saved its own state, rank 1 resumed with rank 0's and the losses after step 3 parted."""
    cwd = tmp_path / "ddp"
    cwd.mkdir()
    args = (*TINY, "norm=bn_noisy", "hardware=ddp", "checkpoint.every_n_steps=3", "logger.wandb=false")
    _launch(cwd, *args, processes=2)
    (run_dir,) = _run_dirs(cwd)
    assert rank_rng_path(run_dir / "checkpoints", 3, 1).exists()
    resumed = tmp_path / "resumed"
    shutil.copytree(run_dir, resumed)
    for path in (resumed / "checkpoints").glob("step-00000006*"):
        path.unlink()
    (resumed / "summary.json").unlink()
    _launch(cwd, *args, "resume=true", f"hydra.run.dir={resumed}", processes=2)

    def losses(d: Path) -> list[float]:
        rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
        return [r["train/batch_loss"] for r in rows if "train/batch_loss" in r]

    assert len(losses(run_dir)) == 6
    assert losses(resumed) == losses(run_dir)
