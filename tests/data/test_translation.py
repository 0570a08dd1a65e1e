"""Parallel text: the folder layout and its checks, pre-tokenization, the cached joint BPE, BPE ids
per split with what is dropped, cut or blank reported."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from normbench.base.errors import ConfigError, DatasetMissingError
from normbench.data import bpe
from normbench.data import translation as T
from normbench.data.bpe import SPECIALS, WORD_END, train_bpe
from normbench.data.parallel_text import (
    SPLITS,
    DataFileError,
    ParallelText,
    load_parallel_folder,
    pretokenize,
    write_parallel_folder,
)
from normbench.data.synthetic_translation import make_synthetic_parallel
from tests.conftest import DE_EN_SUBSET, REPO, run_cli


def write_small(root: Path, n: int = 300) -> dict[str, ParallelText]:
    splits = {s: make_synthetic_parallel(n if s == "train" else 40, seed=i) for i, s in enumerate(SPLITS)}
    write_parallel_folder(root, splits, "de", "en")
    return splits


def prepare(root: Path, text: dict[str, ParallelText], cache_dir: Path | None = None, **kw) -> T.TranslationData:
    settings = {"vocab_size": 120, "lowercase": True, "pretokenize_mode": "none", "max_positions": 1024, **kw}
    return T.prepare(
        text, root=root, train_files=[root / "train.de", root / "train.en"], cache_dir=cache_dir, **settings
    )


def test_pretokenize() -> None:
    line = "Two young, White males are outside near many bushes.  "
    assert pretokenize(line, "none") == "two young, white males are outside near many bushes."
    assert pretokenize(line, "punct") == "two young , white males are outside near many bushes ."
    assert pretokenize("Don't stop...", "punct", lowercase=False) == "Don ' t stop ..."
    with pytest.raises(ConfigError, match="dataset.pretokenize='moses'; valid choices: none, punct"):
        pretokenize("x", "moses")


def test_synthetic_corpus_follows_its_rule_and_repeats() -> None:
    a, b = make_synthetic_parallel(50, seed=3), make_synthetic_parallel(50, seed=3)
    assert a == b and a != make_synthetic_parallel(50, seed=4)
    lexicon: dict[str, str] = {}
    for src, tgt in zip(a.src, a.tgt):
        s, t = src.split(), tgt.split()
        assert 3 <= len(s) == len(t) <= 12
        swapped = [t[k ^ 1] if (k ^ 1) < len(t) else t[k] for k in range(len(t))]  # undo the pair swaps
        for word, translation in zip(s, swapped):
            assert lexicon.setdefault(word, translation) == translation  # one translation per word


def test_folder_round_trip_through_datasets(tmp_path) -> None:
    splits = write_small(tmp_path)
    loaded = load_parallel_folder(tmp_path, "de", "en")
    assert loaded == splits
    reverse = load_parallel_folder(tmp_path, "en", "de")  # the direction is a setting
    assert reverse["valid"].src == splits["valid"].tgt


@pytest.mark.parametrize("files", [("train.de",), ("test.en",), ("train.de", "valid.en", "test.de")])
def test_a_byte_order_mark_is_no_text(tmp_path, files: tuple[str, ...]) -> None:
    """A UTF-8 BOM at a file's start (U+FEFF): gone in what every reader returns, as if never written
    (it landed in the BPE vocabulary and as an extra token in test reference 1)."""
    from normbench.data.parallel_text import read_lines

    splits = write_small(tmp_path)
    for name in files:
        (tmp_path / name).write_bytes(b"\xef\xbb\xbf" + (tmp_path / name).read_bytes())
    assert load_parallel_folder(tmp_path, "de", "en") == splits
    for name in files:
        lines = read_lines(tmp_path / name)
        assert not lines[0].startswith("\ufeff") and lines[0] == (tmp_path / name).read_text("utf-8-sig").split("\n")[0]


def test_missing_or_misaligned_files_are_one_clear_error(tmp_path) -> None:
    with pytest.raises(DatasetMissingError) as e:
        load_parallel_folder(tmp_path / "nowhere", "de", "en")
    msg = str(e.value)
    assert str(tmp_path / "nowhere") in msg and "train.de" in msg and "dataset=synthetic_translation" in msg
    write_small(tmp_path)
    (tmp_path / "valid.en").write_text("one line\n")
    with pytest.raises(DataFileError, match="valid.de has 40 lines but .*valid.en has 1"):
        load_parallel_folder(tmp_path, "de", "en")


def write_files(root: Path, files: dict[str, bytes | str]) -> Path:
    """``{split}.{lang}`` files as given (bytes written as they are); the other splits get one pair."""
    root.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        for lang, line in (("de", "ab cd\n"), ("en", "x y\n")):
            (root / f"{split}.{lang}").write_text(line)
    for name, content in files.items():
        path = root / name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    return root


@pytest.mark.parametrize("name", ["train.de", "train.en", "valid.de", "valid.en", "test.en"])
def test_an_empty_file_is_one_error_naming_it(tmp_path, name) -> None:
    root = write_files(tmp_path, {name: ""})
    with pytest.raises(DataFileError) as e:
        load_parallel_folder(root, "de", "en")
    assert str(e.value) == f"{root / name} is empty; every split needs at least one sentence pair"


def test_bytes_that_are_not_utf8_are_one_error_naming_file_and_line(tmp_path) -> None:
    latin1 = "zwei junge männer\n".encode("latin-1")  # ä is 0xe4 in Latin-1, an unfinished sequence in UTF-8
    root = write_files(tmp_path, {"train.de": b"ab cd\nef gh\n" + latin1, "train.en": "x y\nz w\nv u\n"})
    with pytest.raises(DataFileError) as e:
        load_parallel_folder(root, "de", "en")
    column = latin1.index(0xE4) + 1
    assert str(e.value).startswith(f"{root / 'train.de'} line 3: byte 0xe4 at column {column} is not UTF-8")
    (root / "train.de").write_bytes(b"ab cd\nef gh\n" + "zwei junge männer\n".encode())  # the same text in UTF-8
    assert load_parallel_folder(root, "de", "en")["train"].src[2] == "zwei junge männer"


LONG = " ".join(["w"] * 20)
"""Twenty words: at least twenty BPE tokens, whatever the merges."""


def test_dropped_pairs_and_blank_references_are_reported_once_with_counts(tmp_path, capsys) -> None:
    # training pairs: 2, 3 and 5 have a blank side (5 is whitespace only); 4 is too long for 16
    # positions; 1 and 6 (at most 5 BPE tokens a side) are kept. valid: line 1's reference is blank
    root = write_files(
        tmp_path,
        {
            "train.de": f"ab cd\n\nef gh\n{LONG}\nij\nkl mn\n",
            "train.en": f"x y\nzz\n\n{LONG}\n   \nop\n",
            "valid.de": "ab\ncd\n",
            "valid.en": "\nx\n",
        },
    )
    text = load_parallel_folder(root, "de", "en")
    capsys.readouterr()
    data = T.prepare(
        text,
        root=root,
        train_files=[root / "train.de", root / "train.en"],
        vocab_size=60,
        lowercase=True,
        pretokenize_mode="none",
        cache_dir=None,
        max_positions=16,
        langs=("de", "en"),
    )
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"normbench: warning: {root / 'train.de'} / {root / 'train.en'}: dropped 4 of 6 training pairs: "
        f"3 with a blank side (lines 2, 3, 5); 1 with a side of 16 or more BPE tokens "
        f"(dataset.max_positions=16 holds 15 and EOS; line 4)",
        f"normbench: warning: valid pairs are all kept and scored; {root / 'valid.en'}: 1 of 2 lines blank (line 1)",
    ]
    src, tgt = data.splits["train"]
    assert [data.vocab.decode(ids) for ids in src] == ["ab cd", "kl mn"]
    assert [data.vocab.decode(ids) for ids in tgt] == ["x y", "op"]
    assert data.references["valid"] == ["", "x"] and len(data.splits["valid"][0]) == 2


def test_max_positions_that_drops_every_pair_is_one_error_with_the_value_that_works(tmp_path) -> None:
    write_small(tmp_path)
    text = load_parallel_folder(tmp_path, "de", "en")
    with pytest.raises(ConfigError) as e:
        prepare(tmp_path, text, max_positions=3)
    message = str(e.value)
    assert message.startswith("dataset.max_positions=3 drops every training pair of ")
    need = int(message.rsplit("needs dataset.max_positions=", 1)[1].split(" ")[0])
    kept = prepare(tmp_path, text, max_positions=need).splits["train"][0]  # the value it names keeps a pair ...
    assert len(kept) >= 1 and all(len(ids) < need for ids in kept)
    with pytest.raises(ConfigError, match="drops every training pair"):  # ... and is the smallest that does
        prepare(tmp_path, text, max_positions=need - 1)
    with pytest.raises(ConfigError, match="dataset.max_positions=1 must be at least 2"):
        prepare(tmp_path, text, max_positions=1)


def test_training_text_that_is_all_blank_is_one_error(tmp_path) -> None:
    root = write_files(tmp_path, {"train.de": "\n \n", "train.en": "a\nb\n"})
    with pytest.raises(ConfigError, match=r"all 2 training pairs of .*train.de / .*train.en have a blank side"):
        prepare(root, load_parallel_folder(root, "de", "en"), langs=("de", "en"))


def test_a_split_without_pairs_from_another_source_is_one_error(tmp_path) -> None:
    text = {"train": ParallelText(["ab"], ["x"]), "valid": ParallelText([], []), "test": ParallelText(["ab"], ["x"])}
    with pytest.raises(ConfigError, match="the valid split has no sentence pairs"):  # e.g. a Hub data set
        T.prepare(
            text,
            root=None,
            train_files=None,
            vocab_size=20,
            lowercase=True,
            pretokenize_mode="none",
            cache_dir=tmp_path,
            max_positions=8,
        )


def run_cli_inprocess(monkeypatch, capsys, *args: str) -> tuple[int, str]:
    """``normbench *args`` in this process; its exit code and stderr."""
    from normbench.cli import main as cli

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(sys, "argv", ["normbench", *args])
    code = 0
    try:
        cli.cli()
    except SystemExit as e:
        code = int(e.code or 0)
    return code, capsys.readouterr().err


LATIN1_LINE = "ein mädchen\n".encode("latin-1")


@pytest.mark.parametrize(
    "files, args, expected",
    [
        ({"train.de": ""}, (), "{root}/train.de is empty"),
        ({"valid.en": ""}, (), "{root}/valid.en is empty"),
        ({"train.en": b"x y\n\n" + LATIN1_LINE, "train.de": "a\nb\nc\n"}, (), "{root}/train.en line 3: byte 0xe4"),
        ({}, ("dataset.max_positions=2",), "dataset.max_positions=2 drops every training pair of {root}/train.de"),
    ],
    ids=["empty-train", "empty-valid", "latin1", "max-positions"],
)
def test_bad_translation_data_through_the_cli_is_one_line_and_exit_2(
    tmp_path, monkeypatch, capsys, files, args, expected
) -> None:
    root = write_files(tmp_path / "data", files)
    code, err = run_cli_inprocess(
        monkeypatch,
        capsys,
        "model=transformer_tiny",
        "dataset=iwslt14",
        f"dataset.root={root}",
        "dataset.vocab_size=40",
        "logger=local",
        "logger.progress_bar=false",
        "hardware=cpu",
        *args,
        f"hydra.run.dir={tmp_path / 'run'}",
    )
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in err, err[-2000:]
    assert [line for line in lines if line.startswith("normbench: error:")] == lines[-1:]
    assert lines[-1].startswith("normbench: error: " + expected.format(root=root))


def test_bpe_round_trip_is_lossless_on_training_text(tmp_path) -> None:
    write_small(tmp_path)
    text = load_parallel_folder(tmp_path, "de", "en")
    data = prepare(tmp_path, text)
    lines = [pretokenize(s) for s in text["train"].src + text["train"].tgt]
    ids = data.vocab.encode(lines)
    assert [data.vocab.decode(i) for i in ids] == lines
    assert all(data.vocab.unk not in row for row in ids)
    assert max(len(r) for r in ids) < max(len(line) for line in lines)  # merges happened


def test_bpe_is_trained_once_per_data_and_settings(tmp_path, monkeypatch) -> None:
    write_small(tmp_path)
    text = load_parallel_folder(tmp_path, "de", "en")
    first = prepare(tmp_path, text)
    assert first.bpe_path.parent == tmp_path / ".normbench_bpe"
    calls = []
    monkeypatch.setattr(bpe, "train_bpe", lambda *a: calls.append(a) or pytest.fail("trained again"))
    again = prepare(tmp_path, text)
    assert again.bpe_path == first.bpe_path and again.splits == first.splits
    monkeypatch.undo()
    other = prepare(tmp_path, text, vocab_size=100)  # another setting: another file
    assert other.bpe_path != first.bpe_path
    with open(tmp_path / "train.en", "a") as f:
        f.write("fo\n")
    with open(tmp_path / "train.de", "a") as f:
        f.write("ba\n")
    changed = prepare(tmp_path, load_parallel_folder(tmp_path, "de", "en"))  # other data: another file
    assert changed.bpe_path not in (first.bpe_path, other.bpe_path)


def test_read_only_data_folder_puts_the_bpe_in_the_cache_dir(tmp_path) -> None:
    data_dir, cache = tmp_path / "data", tmp_path / "cache"
    write_small(data_dir)
    text = load_parallel_folder(data_dir, "de", "en")
    os.chmod(data_dir, 0o555)
    try:
        data = prepare(data_dir, text, cache_dir=cache)
    finally:
        os.chmod(data_dir, 0o755)
    assert data.bpe_path.parent == cache and data.bpe_path.is_file()
    assert not (data_dir / ".normbench_bpe").exists()


@pytest.mark.slow
@pytest.mark.skipif(not (DE_EN_SUBSET / "train.de").is_file(), reason="shared de-en subset absent")
def test_de_en_subset_loads_and_its_bpe_round_trips(tmp_path, monkeypatch) -> None:
    # whether the shared folder is writable differs between machines (CI copies it without write
    # bits): treat it as read-only here, so the BPE goes to the cache dir and nothing is written there
    import normbench.data.bpe as bpe

    monkeypatch.setattr(bpe, "writable_dir", lambda path: False)
    text = load_parallel_folder(DE_EN_SUBSET, "de", "en")
    assert [len(text[s].src) for s in SPLITS] == [20_000, 1_000, 1_000]
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
    assert data.bpe_path.parent == tmp_path / "bpe"  # nothing written into the shared folder
    assert len(data.vocab) == 10_000
    lines = [pretokenize(s, "punct") for s in text["train"].src + text["train"].tgt]
    assert [data.vocab.decode(ids) for ids in data.vocab.encode(lines)] == lines
    assert data.references["test"][0] == pretokenize(text["test"].tgt[0], "punct")


def greedy_bpe(lines: list[str], vocab_size: int) -> list[tuple[str, str]]:
    """Textbook BPE (Sennrich et al. 2016), recounting every pair at every step: merge the most
    frequent adjacent pair, left to right in each word; a tie goes to the pair whose first symbol,
    then second, comes first (initial symbols in character order, ``a`` < ``a</w>`` < ``b``,
    then merged symbols in the order they were made). Stops at ``vocab_size`` entries."""
    words = Counter(w for line in lines for w in line.split())
    segs = {w: [*w[:-1], w[-1] + WORD_END] for w in words}
    rank = {s: i for i, s in enumerate(sorted({s for seg in segs.values() for s in seg} | set("".join(words))))}
    merges: list[tuple[str, str]] = []
    while len(SPECIALS) + len(rank) < vocab_size:
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
    tok = train_bpe([TIES], 30)
    assert merges_of(tok) == [("q", c + WORD_END) for c in "abcde"]
    # the initial symbols, reserved through the trainer's special tokens, are plain vocabulary, not
    # added tokens cut out of the text before the BPE (which would give "q</w>", "b")
    assert [a["content"] for a in json.loads(tok.to_str())["added_tokens"]] == list(SPECIALS)
    assert tok.encode("qb qf <s>").tokens == ["qb</w>", "q", "f</w>", "<s>"]


def test_bpe_merges_are_those_of_textbook_bpe() -> None:
    # a small corpus is full of ties; each must go the textbook way, not the way of a hash map
    text = make_synthetic_parallel(30, seed=0)
    lines = text.src + text.tgt
    tok = train_bpe(lines, 150)
    assert merges_of(tok) == greedy_bpe(lines, 150)
    assert len(tok.get_vocab()) == 150


BPE_OF_A_FRESH_PROCESS = """
import sys
from pathlib import Path
from normbench.data.bpe import load_or_train_bpe
from normbench.data.synthetic_translation import make_synthetic_parallel
out = Path(sys.argv[1])
load_or_train_bpe([out / "ties.json"], [sys.argv[2]], 30)
text = make_synthetic_parallel(500, seed=0)
load_or_train_bpe([out / "synthetic.json"], text.src + text.tgt, 150)
"""


@pytest.mark.e2e
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

    assert merges_of(Tokenizer.from_file(str(outs[0] / "ties.json"))) == [("q", c + WORD_END) for c in "abcde"]


@pytest.mark.e2e
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
