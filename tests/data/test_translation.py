"""Parallel text: the folder layout, pre-tokenization, the cached joint BPE, token batching."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from normbench.data import translation as T
from normbench.errors import ConfigError, DatasetMissingError
from tests.conftest import DE_EN_SUBSET, REPO


def write_small(root: Path, n: int = 300) -> dict[str, T.ParallelText]:
    splits = {s: T.make_synthetic_parallel(n if s == "train" else 40, seed=i) for i, s in enumerate(T.SPLITS)}
    T.write_parallel_folder(root, splits, "de", "en")
    return splits


def prepare(root: Path, text: dict[str, T.ParallelText], cache_dir: Path | None = None, **kw) -> T.TranslationData:
    settings = {"vocab_size": 120, "lowercase": True, "pretokenize_mode": "none", "max_positions": 1024, **kw}
    return T.prepare(
        text, root=root, train_files=[root / "train.de", root / "train.en"], cache_dir=cache_dir, **settings
    )


def test_pretokenize() -> None:
    line = "Two young, White males are outside near many bushes.  "
    assert T.pretokenize(line, "none") == "two young, white males are outside near many bushes."
    assert T.pretokenize(line, "punct") == "two young , white males are outside near many bushes ."
    assert T.pretokenize("Don't stop...", "punct", lowercase=False) == "Don ' t stop ..."
    with pytest.raises(ConfigError, match="dataset.pretokenize='moses'; valid choices: none, punct"):
        T.pretokenize("x", "moses")


def test_synthetic_corpus_follows_its_rule_and_repeats() -> None:
    a, b = T.make_synthetic_parallel(50, seed=3), T.make_synthetic_parallel(50, seed=3)
    assert a == b and a != T.make_synthetic_parallel(50, seed=4)
    lexicon: dict[str, str] = {}
    for src, tgt in zip(a.src, a.tgt):
        s, t = src.split(), tgt.split()
        assert 3 <= len(s) == len(t) <= 12
        swapped = [t[k ^ 1] if (k ^ 1) < len(t) else t[k] for k in range(len(t))]  # undo the pair swaps
        for word, translation in zip(s, swapped):
            assert lexicon.setdefault(word, translation) == translation  # one translation per word


def test_folder_round_trip_through_datasets(tmp_path) -> None:
    splits = write_small(tmp_path)
    loaded = T.load_parallel_folder(tmp_path, "de", "en")
    assert loaded == splits
    reverse = T.load_parallel_folder(tmp_path, "en", "de")  # the direction is a setting
    assert reverse["valid"].src == splits["valid"].tgt


def test_missing_or_misaligned_files_are_one_clear_error(tmp_path) -> None:
    with pytest.raises(DatasetMissingError) as e:
        T.load_parallel_folder(tmp_path / "nowhere", "de", "en")
    msg = str(e.value)
    assert str(tmp_path / "nowhere") in msg and "train.de" in msg and "dataset=synthetic_translation" in msg
    write_small(tmp_path)
    (tmp_path / "valid.en").write_text("one line\n")
    with pytest.raises(DatasetMissingError, match="valid.de has 40 lines but .*valid.en has 1"):
        T.load_parallel_folder(tmp_path, "de", "en")


def test_bpe_round_trip_is_lossless_on_training_text(tmp_path) -> None:
    write_small(tmp_path)
    text = T.load_parallel_folder(tmp_path, "de", "en")
    data = prepare(tmp_path, text)
    lines = [T.pretokenize(s) for s in text["train"].src + text["train"].tgt]
    ids = data.vocab.encode(lines)
    assert [data.vocab.decode(i) for i in ids] == lines
    assert all(data.vocab.unk not in row for row in ids)
    assert max(len(r) for r in ids) < max(len(line) for line in lines)  # merges happened


def test_bpe_is_trained_once_per_data_and_settings(tmp_path, monkeypatch) -> None:
    write_small(tmp_path)
    text = T.load_parallel_folder(tmp_path, "de", "en")
    first = prepare(tmp_path, text)
    assert first.bpe_path.parent == tmp_path / ".normbench_bpe"
    calls = []
    monkeypatch.setattr(T, "train_bpe", lambda *a: calls.append(a) or pytest.fail("trained again"))
    again = prepare(tmp_path, text)
    assert again.bpe_path == first.bpe_path and again.splits == first.splits
    monkeypatch.undo()
    other = prepare(tmp_path, text, vocab_size=100)  # another setting: another file
    assert other.bpe_path != first.bpe_path
    with open(tmp_path / "train.en", "a") as f:
        f.write("fo\n")
    with open(tmp_path / "train.de", "a") as f:
        f.write("ba\n")
    changed = prepare(tmp_path, T.load_parallel_folder(tmp_path, "de", "en"))  # other data: another file
    assert changed.bpe_path not in (first.bpe_path, other.bpe_path)


def test_read_only_data_folder_puts_the_bpe_in_the_cache_dir(tmp_path) -> None:
    data_dir, cache = tmp_path / "data", tmp_path / "cache"
    write_small(data_dir)
    text = T.load_parallel_folder(data_dir, "de", "en")
    os.chmod(data_dir, 0o555)
    try:
        data = prepare(data_dir, text, cache_dir=cache)
    finally:
        os.chmod(data_dir, 0o755)
    assert data.bpe_path.parent == cache and data.bpe_path.is_file()
    assert not (data_dir / ".normbench_bpe").exists()


def test_token_buckets_respect_max_tokens_and_cover_every_pair() -> None:
    g = torch.Generator().manual_seed(0)
    src = torch.randint(1, 40, (500,), generator=g).tolist()
    tgt = torch.randint(1, 40, (500,), generator=g).tolist()
    buckets = T.token_buckets(src, tgt, 256)
    assert sorted(i for b in buckets for i in b) == list(range(500))
    for b in buckets:
        assert len(b) * max(max(src[i], tgt[i]) for i in b) <= 256
    # length bucketing: batches are nearly full, and sentences of one batch have similar lengths
    padded = sum(len(b) * max(max(src[i], tgt[i]) for i in b) for b in buckets)
    assert padded / sum(max(s, t) for s, t in zip(src, tgt)) < 1.5
    with pytest.raises(ConfigError, match="dataset.max_tokens=30 is smaller than a sentence of 39 tokens"):
        T.token_buckets(src, tgt, 30)


def test_batches_are_padded_masked_and_reshuffled_each_epoch(tmp_path) -> None:
    write_small(tmp_path)
    text = T.load_parallel_folder(tmp_path, "de", "en")
    data = prepare(tmp_path, text)
    v = data.vocab
    batches = T.TokenBatches(*data.splits["train"], v, max_tokens=200)
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


@pytest.mark.skipif(not (DE_EN_SUBSET / "train.de").is_file(), reason="shared de-en subset absent")
def test_de_en_subset_loads_and_its_bpe_round_trips(tmp_path) -> None:
    text = T.load_parallel_folder(DE_EN_SUBSET, "de", "en")
    assert [len(text[s].src) for s in T.SPLITS] == [20_000, 1_000, 1_000]
    data = T.prepare(
        text,
        root=DE_EN_SUBSET,
        train_files=[DE_EN_SUBSET / "train.de", DE_EN_SUBSET / "train.en"],
        vocab_size=10_000,
        lowercase=True,
        pretokenize_mode="punct",
        cache_dir=tmp_path / "bpe",
        max_positions=1024,
    )
    assert data.bpe_path.parent == tmp_path / "bpe"  # the shared folder is read-only: nothing written there
    assert len(data.vocab) == 10_000
    lines = [T.pretokenize(s, "punct") for s in text["train"].src + text["train"].tgt]
    assert [data.vocab.decode(ids) for ids in data.vocab.encode(lines)] == lines
    assert data.references["test"][0] == T.pretokenize(text["test"].tgt[0], "punct")


VOCAB_OF_A_FRESH_PROCESS = """
import json, sys
from normbench.data import translation as T
text = T.make_synthetic_parallel(500, seed=0)
print(json.dumps(T.train_bpe(text.src + text.tgt, 150).get_vocab(), sort_keys=True))
"""


def test_bpe_ids_are_the_same_in_every_process() -> None:
    # tokenizers numbers some tokens in hash-map order, which changes from process to process
    runs = [
        subprocess.run(
            [sys.executable, "-c", VOCAB_OF_A_FRESH_PROCESS], capture_output=True, text=True, check=True, cwd=REPO
        )
        for _ in range(2)
    ]
    text = T.make_synthetic_parallel(500, seed=0)
    here = json.dumps(T.train_bpe(text.src + text.tgt, 150).get_vocab(), sort_keys=True)
    assert runs[0].stdout.strip() == runs[1].stdout.strip() == here
