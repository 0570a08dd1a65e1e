"""Parallel text: the folder layout, pre-tokenization, the cached joint BPE, token batching."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from normbench.data import translation as T
from normbench.errors import ConfigError, DatasetMissingError
from tests.conftest import DE_EN_SUBSET, REPO, run_cli


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


def greedy_bpe(lines: list[str], vocab_size: int) -> list[tuple[str, str]]:
    """Textbook BPE (Sennrich et al. 2016), recounting every pair at every step: merge the most
    frequent adjacent pair, left to right in each word; a tie goes to the pair whose first symbol,
    then second, comes first (initial symbols in character order, ``a`` < ``a</w>`` < ``b``,
    then merged symbols in the order they were made). Stops at ``vocab_size`` entries."""
    words = Counter(w for line in lines for w in line.split())
    segs = {w: [*w[:-1], w[-1] + T.WORD_END] for w in words}
    rank = {s: i for i, s in enumerate(sorted({s for seg in segs.values() for s in seg} | set("".join(words))))}
    merges: list[tuple[str, str]] = []
    while len(T.SPECIALS) + len(rank) < vocab_size:
        counts: Counter[tuple[str, str]] = Counter()
        for w, n in words.items():
            for pair in zip(segs[w], segs[w][1:]):
                counts[pair] += n
        if not counts:
            break
        a, b = min(counts, key=lambda p: (-counts[p], rank[p[0]], rank[p[1]]))
        merges.append((a, b))
        rank.setdefault(a + b, len(rank))
        for w, seg in segs.items():
            out, i = [], 0
            while i < len(seg):
                if i + 1 < len(seg) and (seg[i], seg[i + 1]) == (a, b):
                    out.append(a + b)
                    i += 2
                else:
                    out.append(seg[i])
                    i += 1
            segs[w] = out
    return merges


def merges_of(tok) -> list[tuple[str, str]]:
    return [tuple(m.split(" ") if isinstance(m, str) else m) for m in json.loads(tok.to_str())["model"]["merges"]]


TIES = "qa qb qc qd qe qf qg qh qi qj"
"""Ten words seen once each: ten pairs (q, c</w>) tied at count 1, of which a vocabulary of 30 (4
specials + 21 initial symbols + 5 merges) keeps half."""


def test_bpe_ties_go_to_the_first_symbols() -> None:
    tok = T.train_bpe([TIES], 30)
    assert merges_of(tok) == [("q", c + T.WORD_END) for c in "abcde"]
    # the initial symbols, reserved through the trainer's special tokens, are plain vocabulary, not
    # added tokens cut out of the text before the BPE (which would give "q</w>", "b")
    assert [a["content"] for a in json.loads(tok.to_str())["added_tokens"]] == list(T.SPECIALS)
    assert tok.encode("qb qf <s>").tokens == ["qb</w>", "q", "f</w>", "<s>"]


def test_bpe_merges_are_those_of_textbook_bpe() -> None:
    # a small corpus is full of ties; each must go the textbook way, not the way of a hash map
    text = T.make_synthetic_parallel(30, seed=0)
    lines = text.src + text.tgt
    tok = T.train_bpe(lines, 150)
    assert merges_of(tok) == greedy_bpe(lines, 150)
    assert len(tok.get_vocab()) == 150


BPE_OF_A_FRESH_PROCESS = """
import sys
from collections import Counter
from pathlib import Path
from normbench.data import translation as T
out = Path(sys.argv[1])
T.load_or_train_bpe([out / "ties.json"], [sys.argv[2]], 30)
text = T.make_synthetic_parallel(500, seed=0)
T.load_or_train_bpe([out / "synthetic.json"], text.src + text.tgt, 150)
"""


def test_bpe_files_are_byte_identical_in_every_process(tmp_path) -> None:
    # Rust draws each process's hash-map order at random; the hash seeds and thread settings vary too
    envs = [
        {"PYTHONHASHSEED": "1", "TOKENIZERS_PARALLELISM": "false"},
        {"PYTHONHASHSEED": "2", "TOKENIZERS_PARALLELISM": "true", "RAYON_NUM_THREADS": "4"},
    ]
    outs = [tmp_path / f"run{i}" for i in range(len(envs))]
    for out, env in zip(outs, envs):
        subprocess.run(
            [sys.executable, "-c", BPE_OF_A_FRESH_PROCESS, str(out), TIES],
            env={**os.environ, **env},
            cwd=REPO,
            check=True,
            capture_output=True,
        )
    for name in ("ties.json", "synthetic.json"):
        first, second = ((out / name).read_bytes() for out in outs)
        assert first == second, name
    from tokenizers import Tokenizer

    assert merges_of(Tokenizer.from_file(str(outs[0] / "ties.json"))) == [("q", c + T.WORD_END) for c in "abcde"]


def test_quickstart_mt_step_one_loss_is_the_same_in_every_process(tmp_path, monkeypatch) -> None:
    # two sentence pairs and a vocabulary that stops among tied merges: the old trainer's merge order,
    # and with it the ids and the loss, changed from process to process
    args = (
        "experiment=quickstart_mt",
        "max_steps=1",
        "dataset.num_train=2",
        "dataset.num_valid=1",
        "dataset.num_test=1",
        "dataset.vocab_size=100",
        "dataset.eval_bleu=false",
        "logger=local",
        "logger.progress_bar=false",
        "logger.log_every_n_steps=1",
        "diagnostics=off",
        "checkpoint.enabled=false",
    )
    losses, bpe_files = [], []
    for hash_seed in ("1", "2"):
        monkeypatch.setenv("PYTHONHASHSEED", hash_seed)
        out = tmp_path / f"run{hash_seed}"
        r = run_cli(*args, f"hydra.run.dir={out}")
        assert r.returncode == 0, r.stderr[-3000:]
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        losses.append(next(row["train/batch_loss"] for row in rows if row["step"] == 1))
        (bpe,) = out.glob("data/*/.normbench_bpe/*.json")
        bpe_files.append(bpe.read_bytes())
    assert math.isfinite(losses[0]) and losses[0] == losses[1]
    assert bpe_files[0] == bpe_files[1]
