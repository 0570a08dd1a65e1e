"""Parallel text on disk: the folder layout, its checks, the Hub loader, pre-tokenization.

On disk: the layout of fairseq's ``prepare-iwslt14.sh`` — one folder with ``train``, ``valid`` and
``test`` files per language (``train.de``, ``train.en``, ...), one sentence a line, the n-th lines
of the two languages aligned, UTF-8. The files are checked first (present, not empty, no NUL
byte, UTF-8: each fault one line naming the file, and the line for bad bytes), then read through
``datasets`` (its ``text`` builder, universal newlines; a cache it cannot write is one line
naming ``HF_DATASETS_CACHE``), then the two languages of a split are checked to have as many lines.

Pre-tokenization (``pretokenize``), as fairseq does for IWSLT14: optional lowercasing, then
``none`` splits on whitespace only, for text that is already tokenized (fairseq's IWSLT14 files
went through the Moses tokenizer); ``punct`` also splits every run of punctuation from the words
around it (``"bushes."`` → ``"bushes ."``, ``"don't"`` → ``"don ' t"``), a small stand-in for
Moses on raw text such as the Multi30k subset. The pre-tokenized, lowercased text is what BLEU is
computed on (``tokenize="none"``).
"""

from __future__ import annotations

import errno
import os
import re
from dataclasses import dataclass
from pathlib import Path

from normbench.errors import ConfigError, DataFileError, DatasetMissingError

SPLITS = ("train", "valid", "test")
PRETOKENIZERS = ("none", "punct")

_PUNCT = re.compile(r"\w+|[^\w\s]+")


def pretokenize(line: str, mode: str = "none", lowercase: bool = True) -> str:
    """One line as space-separated tokens (see the module docstring for ``mode``)."""
    if lowercase:
        line = line.lower()
    if mode == "none":
        return " ".join(line.split())
    if mode == "punct":
        return " ".join(_PUNCT.findall(line))
    raise ConfigError(f"dataset.pretokenize={mode!r}; valid choices: {', '.join(PRETOKENIZERS)}")


@dataclass
class ParallelText:
    """Aligned sentence pairs of one split (raw lines, as read)."""

    src: list[str]
    tgt: list[str]


def split_files(root: Path, split: str, src_lang: str, tgt_lang: str) -> tuple[Path, Path]:
    """``<root>/<split>.<src_lang>``, ``<root>/<split>.<tgt_lang>``."""
    return root / f"{split}.{src_lang}", root / f"{split}.{tgt_lang}"


def check_text_file(path: Path) -> None:
    """Raise `DataFileError` naming ``path`` when it is empty, holds a NUL byte (a binary file, or
    one cut short by a crash: text has none, and ``datasets`` fails on it with a traceback) or is
    not UTF-8 (with the line, 1-based as an editor numbers them, and the column of the first bad
    byte)."""
    if path.stat().st_size == 0:
        raise DataFileError(f"{path} is empty; every split needs at least one sentence pair")
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            if b"\0" in raw:
                raise DataFileError(
                    f"{path} line {number}: a NUL byte (0x00) at column {raw.index(0) + 1}; the data files must be "
                    f"UTF-8 text, which holds no NUL bytes (is it a binary file, or one a crash filled with zeros?)"
                )
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataFileError(
                    f"{path} line {number}: byte 0x{raw[e.start]:02x} at column {e.start + 1} is not UTF-8; "
                    f"the data files must be UTF-8 text (re-encode it, e.g. iconv -f latin1 -t utf-8)"
                ) from None


def check_parallel_folder(root: Path, src_lang: str, tgt_lang: str) -> None:
    """Every split's two files present, non-empty and UTF-8: one `DatasetMissingError` listing the
    missing files, or one `DataFileError` naming a bad one."""
    missing = [p for s in SPLITS for p in split_files(root, s, src_lang, tgt_lang) if not p.is_file()]
    if missing:
        raise DatasetMissingError(
            f"parallel text missing under dataset.root={str(root)!r}: {', '.join(p.name for p in missing)} not found; "
            f"pass dataset.root=<folder with {{train,valid,test}}.{{{src_lang},{tgt_lang}}}> "
            f"(the layout of fairseq's prepare-iwslt14.sh), dataset.hub=<Hub data set> when online, "
            f"or dataset=synthetic_translation for offline runs"
        )
    for split in SPLITS:
        for path in split_files(root, split, src_lang, tgt_lang):
            check_text_file(path)


def load_parallel_folder(root: str | Path, src_lang: str, tgt_lang: str) -> dict[str, ParallelText]:
    """Check, then read ``{train,valid,test}.{src_lang,tgt_lang}`` under ``root`` through ``datasets``."""
    root = Path(root).expanduser()
    check_parallel_folder(root, src_lang, tgt_lang)
    import datasets

    datasets.disable_progress_bars()
    files = {
        f"{s}.{lang}": str(p)
        for s in SPLITS
        for lang, p in zip((src_lang, tgt_lang), split_files(root, s, src_lang, tgt_lang))
    }
    try:
        loaded = datasets.load_dataset("text", data_files=files)
    except OSError as e:
        raise cache_error(e, Path(datasets.config.HF_DATASETS_CACHE)) from None
    out = {}
    for split in SPLITS:
        src, tgt = list(loaded[f"{split}.{src_lang}"]["text"]), list(loaded[f"{split}.{tgt_lang}"]["text"])
        if len(src) != len(tgt):
            raise DataFileError(
                f"{root / f'{split}.{src_lang}'} has {len(src)} lines but {root / f'{split}.{tgt_lang}'} has "
                f"{len(tgt)}; the two files of a split must be aligned line by line"
            )
        out[split] = ParallelText(src, tgt)
    return out


def cache_error(e: OSError, cache: Path) -> OSError | ConfigError:
    """What ``datasets`` failing to write its cache (``HF_DATASETS_CACHE``, by default under
    ``~/.cache``) is reported as: a folder it may not write (an unwritable ``HOME``) is one line
    naming the folder and the variable that moves it; a full disk (or an error elsewhere) stays the
    ``OSError`` it is."""
    where = Path(e.filename) if isinstance(e.filename, str) else None
    refused = e.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EEXIST)
    if not refused or where is None or not (cache.is_relative_to(where) or where.is_relative_to(cache)):
        return e
    return ConfigError(
        f"the datasets cache {cache} cannot be written ({where}: {e.strerror}, errno {e.errno}); "
        "set HF_DATASETS_CACHE=<a writable folder> (or HF_HOME) to keep it elsewhere"
    )


def load_parallel_hub(name: str, src_lang: str, tgt_lang: str, revision: str | None) -> dict[str, ParallelText]:
    """A Hub data set with a ``translation`` column of ``{lang: text}`` rows (parquet files;
    loading scripts do not run in ``datasets`` ≥ 4). Needs the network; not covered by tests."""
    import datasets

    try:
        loaded = datasets.load_dataset(name, revision=revision)
    except Exception as e:  # noqa: BLE001  (offline, unknown name, ...: one line for the user)
        raise DatasetMissingError(
            f"could not load dataset.hub={name!r} (revision {revision!r}): {type(e).__name__}: {e}; "
            f"pass dataset.root=<local folder> instead, or dataset=synthetic_translation"
        ) from None
    names = {"train": "train", "valid": "validation", "test": "test"}
    out = {}
    for split, hub_split in names.items():
        rows = loaded[hub_split]["translation"]
        out[split] = ParallelText([r[src_lang] for r in rows], [r[tgt_lang] for r in rows])
    return out


def write_parallel_folder(root: str | Path, splits: dict[str, ParallelText], src_lang: str, tgt_lang: str) -> Path:
    """Write ``{split}.{lang}`` files, one sentence a line (each file replaced atomically)."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    for split, pt in splits.items():
        for lang, lines in ((src_lang, pt.src), (tgt_lang, pt.tgt)):
            path = root / f"{split}.{lang}"
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tmp.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
            os.replace(tmp, path)
    return root
