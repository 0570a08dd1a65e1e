"""Token batching: length buckets under ``max_tokens``, padded source / decoder tensors."""

from __future__ import annotations

import pytest
import torch

from normbench.base.errors import ConfigError
from normbench.data.synthetic_translation import make_synthetic_parallel
from normbench.data.translation import prepare
from normbench.tasks.batching import TokenBatches, token_buckets


def test_token_buckets_respect_max_tokens_and_cover_every_pair() -> None:
    g = torch.Generator().manual_seed(0)
    src = torch.randint(1, 40, (500,), generator=g).tolist()
    tgt = torch.randint(1, 40, (500,), generator=g).tolist()
    buckets = token_buckets(src, tgt, 256)
    assert sorted(i for b in buckets for i in b) == list(range(500))
    for b in buckets:
        assert len(b) * max(max(src[i], tgt[i]) for i in b) <= 256
    # length bucketing: batches are nearly full, and sentences of one batch have similar lengths
    padded = sum(len(b) * max(max(src[i], tgt[i]) for i in b) for b in buckets)
    assert padded / sum(max(s, t) for s, t in zip(src, tgt)) < 1.5
    with pytest.raises(ConfigError, match="dataset.max_tokens=30 is smaller than a sentence of 39 tokens"):
        token_buckets(src, tgt, 30)


def test_mixed_length_buckets_hold_the_padding_the_ablation_wants() -> None:
    """``by_length=False``: the same cover of the pairs under max_tokens, in a fixed random order, so
    that batches mix lengths: the padded share is far above the length-sorted buckets'."""
    g = torch.Generator().manual_seed(0)
    src = torch.randint(2, 40, (500,), generator=g).tolist()
    tgt = [s + int(d) for s, d in zip(src, torch.randint(-1, 2, (500,), generator=g))]  # a translation's length
    real = sum(max(s, t) for s, t in zip(src, tgt))

    def padded_share(buckets: list[list[int]]) -> float:
        return sum(len(b) * max(max(src[i], tgt[i]) for i in b) for b in buckets) / real

    mixed = token_buckets(src, tgt, 256, by_length=False)
    assert sorted(i for b in mixed for i in b) == list(range(500)) and mixed == token_buckets(src, tgt, 256, False)
    assert all(len(b) * max(max(src[i], tgt[i]) for i in b) <= 256 for b in mixed)
    assert padded_share(mixed) > 1.4 > 1.1 > padded_share(token_buckets(src, tgt, 256))


def test_batches_are_padded_masked_and_reshuffled_each_epoch(tmp_path) -> None:
    text = {
        s: make_synthetic_parallel(300 if s == "train" else 40, seed=i)
        for i, s in enumerate(("train", "valid", "test"))
    }
    data = prepare(
        text,
        root=None,
        train_files=None,
        vocab_size=120,
        lowercase=True,
        pretokenize_mode="none",
        cache_dir=tmp_path,
        max_positions=1024,
    )
    v = data.vocab
    batches = TokenBatches(*data.splits["train"], v, max_tokens=200)
    src_ids, tgt_ids = data.splits["train"]
    g = torch.Generator().manual_seed(0)
    epoch0 = [b.index.tolist() for b in batches.batches(g)]
    epoch1 = [b.index.tolist() for b in batches.batches(g)]
    assert epoch0 != epoch1 and sorted(map(sorted, epoch0)) == sorted(map(sorted, epoch1))
    for b in batches.batches(g):
        assert b.src.numel() <= 200 and b.tgt_in.shape == b.tgt_out.shape
        for row, i in enumerate(b.index.tolist()):
            n_src, n_tgt = len(src_ids[i]) + 1, len(tgt_ids[i]) + 1
            assert b.src[row, :n_src].tolist() == [*src_ids[i], v.eos] and (b.src[row, n_src:] == v.pad).all()
            assert b.tgt_in[row, :n_tgt].tolist() == [v.bos, *tgt_ids[i]]
            assert b.tgt_out[row, :n_tgt].tolist() == [*tgt_ids[i], v.eos] and (b.tgt_out[row, n_tgt:] == v.pad).all()
        assert b.num_tokens == sum(len(tgt_ids[i]) + 1 for i in b.index.tolist())
