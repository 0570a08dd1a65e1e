"""The joint BPE of a translation corpus: training (deterministic), the on-disk cache, the vocabulary.

One BPE over the source and target training text together (``tokenizers``; ``vocab_size`` counts
every entry of the joint vocabulary: the four specials, the alphabet and the merges), words marked
with an end-of-word suffix so that decoding is lossless on the training text. Ties between equally
frequent pairs are broken by a fixed order of the symbols, so the same text gives the same BPE
file in every process (``train_bpe``).

The BPE file is cached as ``.normbench_bpe/<key>.json`` next to the data, or under ``cache_dir``
when the data folder is read-only; ``<key>`` hashes the training files and every setting that
changes the BPE, so it is trained once per data set and settings. A cached file that cannot be
read as a BPE (cut short, garbage) is trained again and replaced, with one warning naming it.
The file is written atomically (`save_bpe`): a write that fails leaves neither a temporary file
nor a folder it made. A folder that refuses the write (read-only, not permitted: an unwritable
``HOME`` for the default ``~/.cache/normbench/bpe``) passes to the next place, and when none is
left the run stops with one line naming the folders and ``dataset.cache_dir``; a full disk stops
it at once, naming the file (exit code 1, as every write of a run that finds no room).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from normbench.base.errors import ConfigError

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
WORD_END = "</w>"
BPE_FORMAT = 3
"""Bumped when the cached BPE files change meaning; part of the cache key. 3: merges learned with the
deterministic tie-break of ``train_bpe`` (a file of format 2 may hold the merges in another order)."""


# --- the cache ---------------------------------------------------------------------------------


def file_digest(paths: Sequence[Path]) -> str:
    """SHA-256 of the files' bytes, one after the other."""
    h = hashlib.sha256()
    for p in paths:
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def bpe_cache_key(data_digest: str, vocab_size: int, lowercase: bool, pretokenize_mode: str) -> str:
    settings = json.dumps([BPE_FORMAT, vocab_size, lowercase, pretokenize_mode])
    return hashlib.sha256(f"{data_digest}|{settings}".encode()).hexdigest()[:16]


def writable_dir(path: Path) -> bool:
    """Whether ``path`` may be written: the process has access *and* the folder has a write bit
    (a folder marked read-only, such as shared data, is left alone even by root)."""
    try:
        return os.access(path, os.W_OK) and bool(path.stat().st_mode & 0o222)
    except OSError:
        return False


def bpe_cache_path(root: Path | None, key: str, cache_dir: str | Path | None) -> Path:
    """``<root>/.normbench_bpe/<key>.json`` when ``root`` is writable, else under ``cache_dir``."""
    if root is not None and writable_dir(root):
        return root / ".normbench_bpe" / f"{key}.json"
    return default_cache_dir(cache_dir) / f"{key}.json"


def default_cache_dir(cache_dir: str | Path | None) -> Path:
    return Path(cache_dir).expanduser() if cache_dir else Path.home() / ".cache" / "normbench" / "bpe"


# --- training ----------------------------------------------------------------------------------


def initial_symbols(lines: Iterable[str]) -> list[str]:
    """The symbols the words of ``lines`` start as, sorted: every character, and the end-of-word form
    ``c</w>`` of every character that ends a word (``a`` < ``a</w>`` < ``b``). Words are split by
    the tokenizer's own pre-tokenizer, so the set is exactly the one the trainer builds."""
    from tokenizers import pre_tokenizers

    split = pre_tokenizers.WhitespaceSplit()
    chars: set[str] = set()
    ends: set[str] = set()
    for line in lines:
        for word, _ in split.pre_tokenize_str(line):
            chars.update(word)
            ends.add(word[-1])
    return sorted([*chars, *(c + WORD_END for c in ends)])


def train_bpe(lines: Iterable[str], vocab_size: int):  # -> tokenizers.Tokenizer
    """A joint BPE over pre-tokenized lines: whitespace pre-splitting, ``</w>`` on word ends.

    The same lines give the same file in every process. ``tokenizers``' trainer merges the most
    frequent pair and breaks a tie by the ids of the two symbols (the smaller pair first). Left to
    itself it numbers the end-of-word symbols ``c</w>`` as it meets them in a hash map of the
    words, whose order Rust draws at random in each process (``PYTHONHASHSEED`` has no say), so
    tied pairs such as ``(p, e</w>)`` and ``(p, u</w>)`` were merged in one order here and in the
    other there; the later merges, the ids and the segmentation followed. Here every initial
    symbol is handed to the trainer, sorted, ahead of training (as special tokens, which it
    numbers first), so every id is fixed before the first merge and a tie goes to the pair whose
    first symbol, then second, comes first: initial symbols in character order, then merged
    symbols in the order they were made. Rayon's threads only add counts and unite position
    sets, which does not depend on their schedule. One case stays with the library: a symbol made
    by two different merges can leave two queue entries for one pair, and which of two equal
    entries comes out first is then the hash map's; no such symbol came out of the de-en subset
    (10k vocabulary) nor of 1,800 random small corpora of repeated letters.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    lines = list(lines)
    tok = Tokenizer(models.BPE(unk_token=UNK, end_of_word_suffix=WORD_END))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.BPEDecoder(suffix=WORD_END)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[*SPECIALS, *initial_symbols(lines)],
        end_of_word_suffix=WORD_END,
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer=trainer)
    return canonical_ids(tok)


def canonical_ids(tok):  # -> tokenizers.Tokenizer
    """The BPE with the ids laid out as ``train_bpe`` makes them, and only ``SPECIALS`` as added
    tokens (the initial symbols that ``train_bpe`` reserved through the trainer's special tokens
    are plain vocabulary: they must not be matched in the text before the BPE). Ids: specials
    first, keeping their order; then the tokens no merge produces, sorted; then each merge's
    result, in merge order. The merge order itself is the trainer's (see ``train_bpe``)."""
    from tokenizers import Tokenizer

    spec = json.loads(tok.to_str())
    vocab: dict[str, int] = spec["model"]["vocab"]
    merges = [m.split(" ") if isinstance(m, str) else m for m in spec["model"]["merges"]]
    merged = list(dict.fromkeys(a + b for a, b in merges))
    specials = sorted((t for t in vocab if t in SPECIALS), key=vocab.__getitem__)
    initial = sorted(t for t in vocab if t not in SPECIALS and t not in set(merged))
    order = specials + initial + [t for t in merged if t in vocab and t not in SPECIALS]
    if sorted(order) != sorted(vocab):
        raise RuntimeError("BPE vocabulary and merges disagree")
    ids = {t: i for i, t in enumerate(order)}
    spec["model"]["vocab"] = ids
    spec["added_tokens"] = [
        {**added, "id": ids[added["content"]]} for added in spec["added_tokens"] if added["content"] in SPECIALS
    ]
    return Tokenizer.from_str(json.dumps(spec))


FULL_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})
"""A disk with no room (or a broken one): the run stops there rather than trying the next folder."""


def load_or_train_bpe(paths: Sequence[Path], lines: Sequence[str], vocab_size: int):  # -> (Tokenizer, Path)
    """The first cached BPE among ``paths``; else train one and save it at the first path that
    can be written (a read-only mount fails there and falls through to the next). A full disk
    raises its ``OSError`` (naming the file); no path that can be written is a `ConfigError`."""
    for path in paths:
        if os.path.isfile(path):  # False, not an error, for a name too long
            cached = read_cached_bpe(path)
            if cached is not None:
                return cached, path
    tok = train_bpe(lines, vocab_size)
    refused = []
    for path in paths:
        try:
            save_bpe(tok, path)
            return tok, path
        except OSError as e:
            if e.errno in FULL_DISK_ERRNOS:
                e.filename = str(path)  # the cache file, not the temporary one that is gone
                raise
            refused.append(f"{path.parent} cannot be written ({e.strerror or e}, errno {e.errno})")
    raise ConfigError(f"cannot cache the BPE: {'; '.join(refused)}; pass dataset.cache_dir=<a writable folder>")


def read_cached_bpe(path: Path):  # -> tokenizers.Tokenizer | None
    """The BPE cached in ``path``; None, with one warning naming the file, when it cannot be read
    as one (cut short, garbage, another JSON file, a BPE without the special tokens): the cache is
    a cache, so the caller trains the BPE again and writes it over the damaged file."""
    from tokenizers import Tokenizer

    from normbench.base.output import warn

    try:
        tok = Tokenizer.from_file(str(path))
        missing = [t for t in SPECIALS if tok.token_to_id(t) is None]
        if missing:
            raise ValueError(f"no special token {', '.join(missing)}")
    except Exception as e:  # noqa: BLE001  (tokenizers raises plain Exceptions for bad JSON)
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        warn(f"the cached BPE {path} cannot be read ({reason}); training it again and replacing the file")
        return None
    return tok


def save_bpe(tok, path: Path) -> None:  # tok: tokenizers.Tokenizer
    """``tok`` as ``path``, atomically: a temporary file beside it (named for this process, as two
    runs may train the same BPE at once), flushed to disk, then ``os.replace``. A write that fails
    removes the temporary file and the folders it made for it (``.normbench_bpe/`` in a data
    folder), and raises."""
    made = path.parent
    while not os.path.isdir(made.parent) and made.parent != made:
        made = made.parent  # the outermost folder that mkdir will make
    made_any = not os.path.isdir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(tok.to_str(pretty=True))  # the bytes of tok.save(path)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        folder = path.parent
        while made_any and folder.is_relative_to(made):
            try:
                folder.rmdir()  # only if empty: another process may have cached its BPE there meanwhile
            except OSError as e:
                if e.errno not in (errno.ENOENT, errno.ENAMETOOLONG):  # those were never made
                    break
            folder = folder.parent
        raise


# --- the vocabulary ----------------------------------------------------------------------------


class Vocabulary:
    """The joint BPE and its special ids; ``encode`` / ``decode`` between text and ids."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.pad, self.bos, self.eos, self.unk = (tokenizer.token_to_id(t) for t in SPECIALS)
        self.specials = {self.pad, self.bos, self.eos}

    def __len__(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, lines: Sequence[str]) -> list[list[int]]:
        """Pre-tokenized lines → BPE ids (no BOS/EOS)."""
        return [e.ids for e in self.tokenizer.encode_batch(list(lines))]

    def decode(self, ids: Sequence[int]) -> str:
        """BPE ids → the pre-tokenized line (BPE removed); stops at EOS, drops PAD/BOS."""
        out = []
        for i in ids:
            if i == self.eos:
                break
            if i not in self.specials:
                out.append(int(i))
        return self.tokenizer.decode(out, skip_special_tokens=False).strip()
