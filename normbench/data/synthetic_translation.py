"""A synthetic parallel corpus, written in fairseq's layout so that it is read back through the same
loader as real text (`normbench.data.parallel_text`): every synthetic run exercises the real path."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from normbench.base.errors import ConfigError
from normbench.data.parallel_text import SPLITS, ParallelText, write_parallel_folder


def _lexicon(num_words: int, consonants: str, vowels: str, g: torch.Generator) -> list[str]:
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < num_words:
        syllables = int(torch.randint(1, 4, (1,), generator=g))
        word = "".join(
            consonants[int(torch.randint(len(consonants), (1,), generator=g))]
            + vowels[int(torch.randint(len(vowels), (1,), generator=g))]
            for _ in range(syllables)
        )
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def make_synthetic_parallel(
    num: int, seed: int, num_words: int = 40, min_len: int = 3, max_len: int = 12, lexicon_seed: int = 1234
) -> ParallelText:
    """A learnable, deterministic parallel corpus. Each source word (made of 1–3 syllables of one
    alphabet) has one target word (another alphabet), fixed by ``lexicon_seed``; a target sentence
    is the word-by-word translation with each adjacent pair of words swapped (``a b c d e`` →
    ``B A D C E``), so the model must learn a lexicon and a local reordering. Lengths are uniform
    in [min_len, max_len]; sentences are drawn from ``seed``."""
    if not 1 <= min_len <= max_len:
        raise ConfigError(f"dataset.min_len={min_len}, dataset.max_len={max_len}: need 1 <= min_len <= max_len")
    lex = torch.Generator().manual_seed(lexicon_seed)
    src_words = _lexicon(num_words, "bdgklmnprst", "aeiou", lex)
    tgt_words = _lexicon(num_words, "cfhjqvwxz", "aeiouy", lex)
    g = torch.Generator().manual_seed(seed)
    src, tgt = [], []
    for _ in range(num):
        n = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        ids = torch.randint(num_words, (n,), generator=g).tolist()
        out = [tgt_words[i] for i in ids]
        for k in range(0, n - 1, 2):
            out[k], out[k + 1] = out[k + 1], out[k]
        src.append(" ".join(src_words[i] for i in ids))
        tgt.append(" ".join(out))
    return ParallelText(src, tgt)


def synthetic_translation_root(cfg: Mapping[str, Any], run_dir: Path) -> Path:
    """``<dataset.root or run dir/data>/synthetic_translation-<hash of the corpus settings>``."""
    keys = ("num_train", "num_valid", "num_test", "num_words", "min_len", "max_len", "seed", "src_lang", "tgt_lang")
    digest = hashlib.sha1(json.dumps([cfg[k] for k in keys]).encode()).hexdigest()[:10]
    base = Path(cfg["root"]).expanduser() if cfg.get("root") else Path(run_dir) / "data"
    return base / f"synthetic_translation-{digest}"


def write_synthetic_translation(cfg: Mapping[str, Any], run_dir: Path) -> Path:
    """The synthetic corpus of ``cfg`` in fairseq's layout, written once per settings (split
    ``train``, ``valid``, ``test`` drawn from ``seed``, ``seed + 1``, ``seed + 2``); its folder."""
    root = synthetic_translation_root(cfg, run_dir)
    if not (root / f"test.{cfg['tgt_lang']}").is_file():
        seed, kw = int(cfg["seed"]), {k: int(cfg[k]) for k in ("num_words", "min_len", "max_len")}
        splits = {
            split: make_synthetic_parallel(int(cfg[f"num_{split}"]), seed + offset, **kw)
            for offset, split in enumerate(SPLITS)
        }
        write_parallel_folder(root, splits, cfg["src_lang"], cfg["tgt_lang"])
    return root
