r"""Parallel text on disk: the folder layout, its checks, the Hub loader, pre-tokenization.

On disk: the layout of fairseq's ``prepare-iwslt14.sh`` — one folder with ``train``, ``valid`` and
``test`` files per language (``train.de``, ``train.en``, ...), one sentence a line, the n-th lines
of the two languages aligned, UTF-8. The files are checked first (present, not empty, no NUL
byte, UTF-8, no line break but ``\n`` / ``\r\n`` at a line's end, as many lines in the two
languages of a split: each fault one line naming the file, and the line for bad bytes), then read
through ``datasets`` (its ``text`` builder, universal newlines; a cache it cannot write is one
line naming ``HF_DATASETS_CACHE``), whose line count must equal the check's. `read_lines` is the
one rule of what a line is, for this check and for `normbench-data`'s preparation.

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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from normbench.base.errors import ConfigError, DataFileError, DatasetMissingError

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


LINE_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
r"""The characters other than ``\n`` that some reader ends a line at: ``str.splitlines`` at every
one, the ``datasets`` text reader (universal newlines) at ``\r``. Inside a line they would make the
readers disagree on which line is which, and so misalign the pairs: `read_lines` is the one rule."""
_BREAK = re.compile(f"[{re.escape(LINE_BREAKS)}]")
BREAK_POLICIES = ("refuse", "space")


_BREAK_NAMES = dict(zip(LINE_BREAKS, ("carriage return", "vertical tab", "form feed", "file separator",
                                      "group separator", "record separator", "next line", "line separator",
                                      "paragraph separator")))  # fmt: skip


def _break_name(char: str) -> str:
    return f"U+{ord(char):04X} {_BREAK_NAMES[char]}"


BOM = "\ufeff"
"""The byte order mark some editors put at the start of a UTF-8 file: removed by every reader alike
(`read_lines`, `without_bom` after ``datasets``), never a token of the vocabulary or a reference."""


def without_bom(lines: list[str]) -> list[str]:
    """``lines`` with a byte order mark at the start of the first removed (``datasets`` keeps it)."""
    return [lines[0].removeprefix(BOM), *lines[1:]] if lines else lines


def _open_lines(path: Path) -> Iterator[bytes]:
    r"""The raw lines of ``path`` (split at ``\n`` only; ``.gz`` read through gzip); a `DataFileError`
    naming the file for a ``.gz`` that is not gzip or is cut short."""
    import gzip
    import zlib

    if path.suffix != ".gz":
        with open(path, "rb") as f:
            yield from f
        return
    try:
        with gzip.open(path, "rb") as f:
            yield from f
    except (EOFError, gzip.BadGzipFile, zlib.error) as e:
        reason = "it is cut short" if isinstance(e, EOFError) else f"not gzip data ({e})"
        raise DataFileError(f"{path} cannot be read: {reason}; fetch it again") from None


def read_lines(path: Path, breaks: str = "refuse") -> list[str]:
    r"""The lines of a UTF-8 text file, by the one rule every parallel-text reader follows (the
    check before loading, `normbench-data`'s preparation): a line ends at ``\n`` (``\r\n`` too,
    the ``\r`` dropped); a NUL byte or bytes that are not UTF-8 are a `DataFileError` naming the
    file, line and column; any other line break (`LINE_BREAKS`) inside a line is refused the same
    way (``breaks="refuse"``) or becomes one space (``"space"``, what preparation does, as it does
    to the line breaks inside a Hub row's text)."""
    if breaks not in BREAK_POLICIES:
        raise ValueError(f"breaks={breaks!r}; one of {', '.join(BREAK_POLICIES)}")
    out = []
    for number, raw in enumerate(_open_lines(path), start=1):
        raw = raw[:-2] if raw.endswith(b"\r\n") else raw.removesuffix(b"\n")
        if number == 1:
            raw = raw.removeprefix(BOM.encode())  # an editor's byte order mark: not text (`without_bom`)
        if b"\0" in raw:
            raise DataFileError(
                f"{path} line {number}: a NUL byte (0x00) at column {raw.index(0) + 1}; the data files must be "
                f"UTF-8 text, which holds no NUL bytes (is it a binary file, or one a crash filled with zeros?)"
            )
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise DataFileError(
                f"{path} line {number}: byte 0x{raw[e.start]:02x} at column {e.start + 1} is not UTF-8; "
                f"the data files must be UTF-8 text (re-encode it, e.g. iconv -f latin1 -t utf-8)"
            ) from None
        found = _BREAK.search(line)
        if found and breaks == "refuse":
            raise DataFileError(
                f"{path} line {number}: a line break ({_break_name(found.group())}) at column {found.start() + 1} "
                "inside the line, which some readers split on and others do not, misaligning the pairs; "
                "replace it by a space (a line ends at \\n only)"
            )
        out.append(_BREAK.sub(" ", line) if found else line)
    return out


def check_text_file(path: Path) -> int:
    """Raise `DataFileError` naming ``path`` when it is empty, holds a NUL byte (a binary file, or
    one cut short by a crash: text has none, and ``datasets`` fails on it with a traceback), is
    not UTF-8 (with the line, 1-based as an editor numbers them, and the column of the first bad
    byte) or holds a line break inside a line (`read_lines`). Its number of lines."""
    if path.stat().st_size == 0:
        raise DataFileError(f"{path} is empty; every split needs at least one sentence pair")
    return len(read_lines(path))


def check_parallel_folder(root: Path, src_lang: str, tgt_lang: str) -> dict[str, int]:
    """Every split's two files present, non-empty, UTF-8 (`read_lines`) and of as many lines: one
    `DatasetMissingError` listing the missing files, or one `DataFileError` naming a bad one. The
    number of lines (pairs) per split."""
    missing = [p for s in SPLITS for p in split_files(root, s, src_lang, tgt_lang) if not p.is_file()]
    if missing:
        raise DatasetMissingError(
            f"parallel text missing under dataset.root={str(root)!r}: {', '.join(p.name for p in missing)} not found; "
            f"pass dataset.root=<folder with {{train,valid,test}}.{{{src_lang},{tgt_lang}}}> "
            f"(the layout of fairseq's prepare-iwslt14.sh), dataset.hub=<Hub data set> when online, "
            f"or dataset=synthetic_translation for offline runs"
        )
    counts = {}
    for split in SPLITS:
        src, tgt = split_files(root, split, src_lang, tgt_lang)
        counts[split] = check_aligned(src, check_text_file(src), tgt, check_text_file(tgt))
    return counts


def check_aligned(src: Path, src_lines: int, tgt: Path, tgt_lines: int) -> int:
    """``src_lines`` when the two files of a split have as many lines, else a `DataFileError` naming both."""
    if src_lines != tgt_lines:
        raise DataFileError(
            f"{src} has {src_lines} lines but {tgt} has {tgt_lines}; the two files of a split must be aligned "
            "line by line"
        )
    return src_lines


def load_parallel_folder(root: str | Path, src_lang: str, tgt_lang: str) -> dict[str, ParallelText]:
    """Check, then read ``{train,valid,test}.{src_lang,tgt_lang}`` under ``root`` through ``datasets``."""
    root = Path(root).expanduser()
    counts = check_parallel_folder(root, src_lang, tgt_lang)
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
        src, tgt = (without_bom(list(loaded[f"{split}.{lang}"]["text"])) for lang in (src_lang, tgt_lang))
        if len(src) != counts[split] or len(tgt) != counts[split]:  # the check's rule and datasets' must agree
            raise DataFileError(
                f"{root / f'{split}.{src_lang}'}: datasets read {len(src)} / {len(tgt)} lines where the check "
                f"counted {counts[split]}; refusing to guess which lines are pairs"
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
