"""Translation under DDP (2 gloo processes on the CPU): a `TranslationBatch` shards into the
ranks' slices, and beam search (with its ``max_positions`` limit) sees through the DDP and
compile wrappers to the bare model."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from normbench.data.synthetic_translation import make_synthetic_parallel
from normbench.data.translation import prepare
from normbench.models import build_model
from normbench.models.unwrap import unwrap
from normbench.norms import norm_factory
from normbench.placement import distributed
from normbench.tasks.batching import TranslationBatch
from normbench.tasks.translation import TranslationConfig, TranslationTask

MAX_POSITIONS = 12
"""Small enough that decoding past it (``max_len_b`` = 40) raises: beam search must read it."""


def task(cache_dir: Path) -> TranslationTask:
    """A tiny synthetic translation task (its BPE cached in ``cache_dir``, never in the user's home)."""
    splits = ("train", "valid", "test")
    text = {s: make_synthetic_parallel(60 if s == "train" else 8, seed=i) for i, s in enumerate(splits)}
    data = prepare(
        text,
        root=None,
        train_files=None,
        vocab_size=60,
        lowercase=True,
        pretokenize_mode="none",
        cache_dir=cache_dir,
        max_positions=MAX_POSITIONS,
    )
    cfg = TranslationConfig(max_tokens=256, beam=2, max_len_a=0.0, max_len_b=40)
    return TranslationTask(data, cfg, torch.device("cpu"), None)


def model(t: TranslationTask) -> nn.Module:
    torch.manual_seed(0)
    cfg = {"name": "transformer_tiny", "decoder_norm": "ln", "max_positions": MAX_POSITIONS, "dropout": 0.0}
    return build_model(cfg, norm_factory("ln"), **t.model_kwargs())


def first_batch(t: TranslationTask) -> TranslationBatch:
    return next(iter(t.train_batches(0, torch.Generator().manual_seed(0))))


def sources(t: TranslationTask) -> list[list[int]]:
    return t.data.splits["valid"][0][:4]


def _worker(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        t = task(Path(out) / "bpe")
        bare = model(t)
        ddp = DistributedDataParallel(bare)
        assert unwrap(ddp) is bare and unwrap(torch.compile(ddp)) is bare
        part = distributed.shard(first_batch(t), rank, 2)
        t.forward_loss(ddp, part).loss.backward()
        ddp.eval()
        with torch.no_grad():
            hyps = t.translate(ddp, sources(t))
        torch.save({"batch": part, "hyps": hyps}, Path(out) / f"rank{rank}.pt")
        dist.barrier()  # neither rank tears gloo down while the other still uses it
    finally:
        dist.destroy_process_group()


def test_shards_of_a_translation_batch_concatenate_back(tmp_path: Path) -> None:
    t = task(tmp_path)
    batch = first_batch(t)
    parts = [distributed.shard(batch, r, 2) for r in range(2)]
    assert all(isinstance(p, TranslationBatch) and p.pad == batch.pad for p in parts)
    for name in ("src", "tgt_in", "tgt_out", "index"):
        assert torch.equal(torch.cat([getattr(p, name) for p in parts]), getattr(batch, name)), name
    assert sum(p.num_tokens for p in parts) == batch.num_tokens


def test_unwrap_strips_compile_and_ddp_wrappers() -> None:
    bare = nn.Linear(2, 2)
    assert unwrap(bare) is bare
    assert unwrap(torch.compile(bare)) is bare


@pytest.mark.e2e
def test_two_gloo_processes_train_and_translate_a_translation_batch(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(port, str(tmp_path)), nprocs=2, join=True)
    t = task(tmp_path / "bpe")
    batch = first_batch(t)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(2)]
    assert torch.equal(torch.cat([r["batch"].src for r in ranks]), batch.src)
    with torch.no_grad():
        single = t.translate(model(t).eval(), sources(t))
    assert ranks[0]["hyps"] == ranks[1]["hyps"] == single
