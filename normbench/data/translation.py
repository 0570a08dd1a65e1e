"""Translation data: parallel text → BPE ids per split, ready for `normbench.tasks.translation`.

``prepare`` pre-tokenizes every split (`normbench.data.parallel_text.pretokenize`), fits (or loads
from its cache) the joint BPE on the training text (`normbench.data.bpe`) and encodes every split.
Training pairs with a blank side or too long for ``max_positions`` are dropped; valid and test
pairs are all kept (every one is scored), cut to ``max_positions`` − 1 tokens. What is dropped,
cut or blank is reported once (once per process: the jobs of a sweep read the same files), with
counts and the first line numbers; a training split left empty is one error.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from normbench.base.errors import ConfigError
from normbench.base.output import warn
from normbench.data.bpe import (
    SPECIALS,
    Vocabulary,
    bpe_cache_key,
    bpe_cache_path,
    default_cache_dir,
    file_digest,
    load_or_train_bpe,
)
from normbench.data.parallel_text import PRETOKENIZERS, ParallelText, pretokenize


@dataclass
class TranslationData:
    vocab: Vocabulary
    splits: dict[str, tuple[list[list[int]], list[list[int]]]]
    """BPE ids (src, tgt) per split: training pairs with an empty side or longer than ``max_positions``
    dropped; valid/test pairs kept, cut to ``max_positions`` − 1 tokens (BLEU still uses the full
    references)."""
    references: dict[str, list[str]]
    """Pre-tokenized target lines of ``valid`` and ``test``: what BLEU compares against."""
    bpe_path: Path


def prepare(
    text: dict[str, ParallelText],
    *,
    root: Path | None,
    train_files: Sequence[Path] | None,
    vocab_size: int,
    lowercase: bool,
    pretokenize_mode: str,
    cache_dir: str | Path | None,
    max_positions: int,
    langs: tuple[str, str] = ("src", "tgt"),
) -> TranslationData:
    """Pre-tokenize, fit (or load) the joint BPE on the training text, encode every split.

    ``langs`` names the two sides in reports (``<root>/<split>.<lang>``, or ``<split>.<lang>`` for
    text that did not come from a folder)."""
    if pretokenize_mode not in PRETOKENIZERS:
        raise ConfigError(f"dataset.pretokenize={pretokenize_mode!r}; valid choices: {', '.join(PRETOKENIZERS)}")
    if vocab_size < len(SPECIALS) + 1:
        raise ConfigError(f"dataset.vocab_size={vocab_size} must exceed the {len(SPECIALS)} special tokens")
    if max_positions < 2:
        raise ConfigError(f"dataset.max_positions={max_positions} must be at least 2 (one token and EOS)")
    for split, pt in text.items():  # a folder's empty files are refused when read; this is for other sources
        if not pt.src:
            raise ConfigError(f"the {split} split has no sentence pairs; every split needs at least one")
    tok = {
        split: ParallelText(
            [pretokenize(s, pretokenize_mode, lowercase) for s in pt.src],
            [pretokenize(t, pretokenize_mode, lowercase) for t in pt.tgt],
        )
        for split, pt in text.items()
    }
    names = {split: tuple(_file_name(root, split, lang) for lang in langs) for split in tok}
    if train_files is not None:
        digest = file_digest(train_files)
    else:
        digest = hashlib.sha256("\n".join(text["train"].src + text["train"].tgt).encode()).hexdigest()
    key = bpe_cache_key(digest, vocab_size, lowercase, pretokenize_mode)
    paths = [bpe_cache_path(root, key, cache_dir)]
    if paths[0].parent.parent == root:
        paths.append(default_cache_dir(cache_dir) / f"{key}.json")
    tokenizer, path = load_or_train_bpe(paths, tok["train"].src + tok["train"].tgt, vocab_size)
    vocab = Vocabulary(tokenizer)
    splits = {}
    for split, pt in tok.items():
        src, tgt = vocab.encode(pt.src), vocab.encode(pt.tgt)
        if split == "train":
            keep = [i for i in range(len(src)) if 0 < len(src[i]) < max_positions and 0 < len(tgt[i]) < max_positions]
            _report_dropped(src, tgt, keep, max_positions, names[split])
            src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
        else:  # every pair is scored; an over-long source is cut to fit the positions
            _report_kept(split, src, tgt, max_positions, names[split])
            src = [s[: max_positions - 1] for s in src]
            tgt = [t[: max_positions - 1] for t in tgt]
        splits[split] = (src, tgt)
    refs = {split: tok[split].tgt for split in ("valid", "test")}
    return TranslationData(vocab, splits, refs, path)


# --- reports -----------------------------------------------------------------------------------


def _file_name(root: Path | None, split: str, lang: str) -> str:
    return str(root / f"{split}.{lang}") if root is not None else f"{split}.{lang}"


def _lines(indices: Sequence[int], shown: int = 5) -> str:
    """``line 4`` / ``lines 4, 9, 12, ...``: 1-based line numbers of the first ``shown`` indices."""
    head = ", ".join(str(i + 1) for i in indices[:shown])
    return f"line{'s' if len(indices) > 1 else ''} {head}{', ...' if len(indices) > shown else ''}"


_REPORTED: set[str] = set()
"""The reports this process has printed: the jobs of a sweep (one process under Hydra's basic
launcher) read the same files, and the same report once is enough."""


def _report(message: str) -> None:
    """`normbench.base.output.warn`, on the first process only under torch.distributed, and once per
    process for the same message (`_REPORTED`)."""
    import torch.distributed as dist

    if message in _REPORTED or (dist.is_available() and dist.is_initialized() and dist.get_rank() != 0):
        return
    _REPORTED.add(message)
    warn(message)


def _report_dropped(
    src: list[list[int]], tgt: list[list[int]], keep: list[int], max_positions: int, names: tuple[str, ...]
) -> None:
    """One warning for the dropped training pairs, by cause; one error when none is left."""
    total, kept = len(src), set(keep)
    blank = [i for i in range(total) if not src[i] or not tgt[i]]
    long = [i for i in range(total) if i not in kept and src[i] and tgt[i]]
    files = " / ".join(names)
    if not keep:
        if not long:
            raise ConfigError(f"all {total} training pairs of {files} have a blank side; nothing to train on")
        need = 1 + min(max(len(src[i]), len(tgt[i])) for i in long)
        raise ConfigError(
            f"dataset.max_positions={max_positions} drops every training pair of {files} ({len(long)} too long, "
            f"{len(blank)} blank); the shortest pair needs dataset.max_positions={need} (its BPE tokens + EOS)"
        )
    if blank or long:
        causes = []
        if blank:
            causes.append(f"{len(blank)} with a blank side ({_lines(blank)})")
        if long:
            causes.append(
                f"{len(long)} with a side of {max_positions} or more BPE tokens (dataset.max_positions="
                f"{max_positions} holds {max_positions - 1} and EOS; {_lines(long)})"
            )
        _report(f"{files}: dropped {len(blank) + len(long)} of {total} training pairs: {'; '.join(causes)}")


def _report_kept(
    split: str, src: list[list[int]], tgt: list[list[int]], max_positions: int, names: tuple[str, ...]
) -> None:
    """One warning for a scored split's blank lines (kept: an empty source is translated, an
    empty reference scored) and for its pairs cut to ``max_positions`` − 1 tokens."""
    notes = []
    for name, side in zip(names, (src, tgt)):
        blank = [i for i, ids in enumerate(side) if not ids]
        if blank:
            notes.append(f"{name}: {len(blank)} of {len(side)} lines blank ({_lines(blank)})")
    cut = [i for i in range(len(src)) if max(len(src[i]), len(tgt[i])) > max_positions - 1]
    if cut:
        notes.append(
            f"{len(cut)} {split} pairs cut to dataset.max_positions-1={max_positions - 1} BPE tokens "
            f"({_lines(cut)}; BLEU keeps the full references)"
        )
    if notes:
        _report(f"{split} pairs are all kept and scored; {'; '.join(notes)}")
