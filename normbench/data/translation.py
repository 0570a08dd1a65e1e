"""Parallel text for translation: loading, pre-tokenization, a joint BPE, token batching.

On disk: the layout of fairseq's ``prepare-iwslt14.sh`` — one folder with ``train``, ``valid`` and
``test`` files per language (``train.de``, ``train.en``, ...), one sentence a line, the n-th lines
of the two languages aligned. The files are read through ``datasets`` (its ``text`` builder).

Preprocessing, as fairseq does for IWSLT14:

1. optional lowercasing (``lowercase: true``, the default);
2. pre-tokenization (``pretokenize``): ``none`` splits on whitespace only, for text that is already
   tokenized (fairseq's IWSLT14 files went through the Moses tokenizer); ``punct`` also splits
   every run of punctuation from the words around it (``"bushes."`` → ``"bushes ."``,
   ``"don't"`` → ``"don ' t"``), a small stand-in for Moses on raw text such as the Multi30k
   subset. The pre-tokenized, lowercased text is what BLEU is computed on (``tokenize="none"``);
3. one BPE over the source and target training text together (``tokenizers``; ``vocab_size``
   counts every entry of the joint vocabulary: the four specials, the alphabet and the merges),
   words marked with an end-of-word suffix so that decoding is lossless on the training text.
   Ties between equally frequent pairs are broken by a fixed order of the symbols, so the same
   text gives the same BPE file in every process (``train_bpe``).

The BPE file is cached as ``.normbench_bpe/<key>.json`` next to the data, or under ``cache_dir``
when the data folder is read-only; ``<key>`` hashes the training files and every setting that
changes the BPE, so it is trained once per data set and settings.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from normbench.data.registry import DatasetConfig, register_dataset
from normbench.errors import ConfigError, DatasetMissingError

SPLITS = ("train", "valid", "test")
PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
WORD_END = "</w>"
PRETOKENIZERS = ("none", "punct")
BPE_FORMAT = 3
"""Bumped when the cached BPE files change meaning; part of the cache key. 3: merges learned with the
deterministic tie-break of ``train_bpe`` (a file of format 2 may hold the merges in another order)."""

_PUNCT = re.compile(r"\w+|[^\w\s]+")


# --- text --------------------------------------------------------------------------------------


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


def _split_files(root: Path, split: str, src_lang: str, tgt_lang: str) -> tuple[Path, Path]:
    return root / f"{split}.{src_lang}", root / f"{split}.{tgt_lang}"


def load_parallel_folder(root: str | Path, src_lang: str, tgt_lang: str) -> dict[str, ParallelText]:
    """Read ``{train,valid,test}.{src_lang,tgt_lang}`` under ``root`` through ``datasets``."""
    root = Path(root).expanduser()
    missing = [p for s in SPLITS for p in _split_files(root, s, src_lang, tgt_lang) if not p.is_file()]
    if missing:
        raise DatasetMissingError(
            f"parallel text missing under dataset.root={str(root)!r}: {', '.join(p.name for p in missing)} not found; "
            f"pass dataset.root=<folder with {{train,valid,test}}.{{{src_lang},{tgt_lang}}}> "
            f"(the layout of fairseq's prepare-iwslt14.sh), dataset.hub=<Hub data set> when online, "
            f"or dataset=synthetic_translation for offline runs"
        )
    import datasets

    datasets.disable_progress_bars()
    files = {
        f"{s}.{lang}": str(p)
        for s in SPLITS
        for lang, p in zip((src_lang, tgt_lang), _split_files(root, s, src_lang, tgt_lang))
    }
    loaded = datasets.load_dataset("text", data_files=files)
    out = {}
    for split in SPLITS:
        src, tgt = list(loaded[f"{split}.{src_lang}"]["text"]), list(loaded[f"{split}.{tgt_lang}"]["text"])
        if len(src) != len(tgt):
            raise DatasetMissingError(
                f"{root / f'{split}.{src_lang}'} has {len(src)} lines but {root / f'{split}.{tgt_lang}'} has "
                f"{len(tgt)}; the two files of a split must be aligned line by line"
            )
        out[split] = ParallelText(src, tgt)
    return out


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


# --- BPE ---------------------------------------------------------------------------------------


def _file_digest(paths: Sequence[Path]) -> str:
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


def load_or_train_bpe(paths: Sequence[Path], lines: Sequence[str], vocab_size: int):  # -> tokenizers.Tokenizer
    """The first cached BPE among ``paths``; else train one and save it at the first path that
    can be written (a read-only mount fails there and falls through to the next)."""
    from tokenizers import Tokenizer

    for path in paths:
        if path.is_file():
            return Tokenizer.from_file(str(path)), path
    tok = train_bpe(lines, vocab_size)
    for path in paths:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            tok.save(str(tmp))
            os.replace(tmp, path)
            return tok, path
        except OSError:
            continue
    raise ConfigError(
        f"cannot write the BPE to any of {', '.join(map(str, paths))}; pass dataset.cache_dir=<writable folder>"
    )


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


# --- token batching ----------------------------------------------------------------------------


@dataclass
class TranslationBatch:
    src: Tensor
    """(B, S) source ids, EOS-terminated, right-padded."""
    tgt_in: Tensor
    """(B, T) decoder input: BOS + target."""
    tgt_out: Tensor
    """(B, T) what the decoder should predict: target + EOS."""
    pad: int
    index: Tensor
    """(B,) positions of the pairs in their split."""

    @property
    def num_tokens(self) -> int:
        return int((self.tgt_out != self.pad).sum())

    def to(self, device: torch.device) -> TranslationBatch:
        return TranslationBatch(
            self.src.to(device, non_blocking=True),
            self.tgt_in.to(device, non_blocking=True),
            self.tgt_out.to(device, non_blocking=True),
            self.pad,
            self.index,
        )


def pad_sequences(seqs: Sequence[Sequence[int]], pad: int) -> Tensor:
    """Right-pad to the longest sequence: (B, max_len) int64."""
    out = torch.full((len(seqs), max(len(s) for s in seqs)), pad, dtype=torch.long)
    for i, s in enumerate(seqs):
        out[i, : len(s)] = torch.as_tensor(s, dtype=torch.long)
    return out


def token_buckets(src_lens: Sequence[int], tgt_lens: Sequence[int], max_tokens: int) -> list[list[int]]:
    """Group pairs into batches of at most ``max_tokens`` padded tokens (as fairseq counts them:
    sentences × the longest source or target in the batch), after sorting by length so that
    pairs of similar length share a batch. Deterministic; order of the batches is the caller's."""
    longest_pair = max((max(s, t) for s, t in zip(src_lens, tgt_lens)), default=0)
    if longest_pair > max_tokens:
        raise ConfigError(
            f"dataset.max_tokens={max_tokens} is smaller than a sentence of {longest_pair} tokens; raise it "
            f"or lower dataset.max_positions"
        )
    order = sorted(range(len(src_lens)), key=lambda i: (tgt_lens[i], src_lens[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        n = max(src_lens[i], tgt_lens[i])
        if current and (len(current) + 1) * max(longest, n) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, n)
    if current:
        batches.append(current)
    return batches


class TokenBatches:
    """The pairs of one split, encoded and bucketed into padded token batches."""

    def __init__(self, src: list[list[int]], tgt: list[list[int]], vocab: Vocabulary, max_tokens: int) -> None:
        self.vocab = vocab
        self.src = [s + [vocab.eos] for s in src]
        self.tgt = tgt
        self.buckets = token_buckets([len(s) for s in self.src], [len(t) + 1 for t in tgt], max_tokens)

    def __len__(self) -> int:
        return len(self.buckets)

    def batch(self, indices: Sequence[int]) -> TranslationBatch:
        v = self.vocab
        return TranslationBatch(
            src=pad_sequences([self.src[i] for i in indices], v.pad),
            tgt_in=pad_sequences([[v.bos, *self.tgt[i]] for i in indices], v.pad),
            tgt_out=pad_sequences([[*self.tgt[i], v.eos] for i in indices], v.pad),
            pad=v.pad,
            index=torch.as_tensor(list(indices)),
        )

    def batches(self, generator: torch.Generator | None = None) -> Iterator[TranslationBatch]:
        """Every bucket once; in a fresh random order when a generator is given."""
        order = (
            range(len(self.buckets))
            if generator is None
            else torch.randperm(len(self.buckets), generator=generator).tolist()
        )
        for b in order:
            yield self.batch(self.buckets[b])


# --- the whole pipeline ------------------------------------------------------------------------


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
) -> TranslationData:
    """Pre-tokenize, fit (or load) the joint BPE on the training text, encode every split."""
    if pretokenize_mode not in PRETOKENIZERS:
        raise ConfigError(f"dataset.pretokenize={pretokenize_mode!r}; valid choices: {', '.join(PRETOKENIZERS)}")
    if vocab_size < len(SPECIALS) + 1:
        raise ConfigError(f"dataset.vocab_size={vocab_size} must exceed the {len(SPECIALS)} special tokens")
    tok = {
        split: ParallelText(
            [pretokenize(s, pretokenize_mode, lowercase) for s in pt.src],
            [pretokenize(t, pretokenize_mode, lowercase) for t in pt.tgt],
        )
        for split, pt in text.items()
    }
    if train_files is not None:
        digest = _file_digest(train_files)
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
            src, tgt = [src[i] for i in keep], [tgt[i] for i in keep]
        else:  # every pair is scored; an over-long source is cut to fit the positions
            src = [s[: max_positions - 1] for s in src]
            tgt = [t[: max_positions - 1] for t in tgt]
        splits[split] = (src, tgt)
    refs = {split: tok[split].tgt for split in ("valid", "test")}
    return TranslationData(vocab, splits, refs, path)


# --- a synthetic parallel corpus ---------------------------------------------------------------


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


# --- registered data sets ----------------------------------------------------------------------


@dataclass
class TranslationConfig(DatasetConfig):
    """Keys shared by the translation data sets: preprocessing, batching and evaluation."""

    name: str = "iwslt14"
    src_lang: str = "de"
    tgt_lang: str = "en"
    lowercase: bool = True
    pretokenize: str = "none"
    """``none``: the text is already tokenized (fairseq's IWSLT14); ``punct``: raw text."""
    vocab_size: int = 10000
    """Size of the joint BPE vocabulary, specials and alphabet included."""
    cache_dir: str | None = None
    """Where the BPE goes when the data folder is read-only; default ``~/.cache/normbench/bpe``."""
    max_tokens: int = 4096
    max_positions: int = 1024
    label_smoothing: float = 0.1
    beam: int = 5
    lenpen: float = 1.0
    max_len_a: float = 1.2
    max_len_b: int = 10
    """Decoding stops at ``max_len_a`` × (longest source in the batch) + ``max_len_b`` tokens."""
    eval_bleu: bool = True
    bleu_max_sentences: int | None = None
    """Score only the first N sentences of valid/test (quick checks); null: all of them."""


@dataclass
class IWSLT14Config(TranslationConfig):
    name: str = "iwslt14"
    root: str | None = "data/iwslt14.tokenized.de-en"
    hub: str | None = None
    """A Hub data set with a ``translation`` column, used instead of ``root`` (needs network)."""
    hub_revision: str | None = "refs/convert/parquet"


@dataclass
class SyntheticTranslationConfig(TranslationConfig):
    name: str = "synthetic_translation"
    root: str | None = None
    """Where to write the files; default ``<run dir>/data``."""
    vocab_size: int = 200
    max_tokens: int = 1024
    num_train: int = 4000
    num_valid: int = 200
    num_test: int = 200
    num_words: int = 40
    min_len: int = 3
    max_len: int = 12
    seed: int = 0


def _build_task(
    text: dict[str, ParallelText], root: Path | None, cfg: Mapping[str, Any], device: torch.device, run_dir: Path
):
    from normbench.tasks.translation import TranslationTask

    src_lang, tgt_lang = cfg["src_lang"], cfg["tgt_lang"]
    train_files = _split_files(root, "train", src_lang, tgt_lang) if root is not None else None
    data = prepare(
        text,
        root=root,
        train_files=train_files,
        vocab_size=int(cfg["vocab_size"]),
        lowercase=bool(cfg["lowercase"]),
        pretokenize_mode=cfg["pretokenize"],
        cache_dir=cfg.get("cache_dir"),
        max_positions=int(cfg["max_positions"]),
    )
    return TranslationTask(data, cfg, device, run_dir)


@register_dataset("iwslt14", IWSLT14Config)
def iwslt14(cfg: Mapping[str, Any], run_cfg: Mapping[str, Any], device: torch.device, run_dir: Path) -> Any:
    """A local folder in fairseq's layout (``dataset.root``) or a Hub data set (``dataset.hub``)."""
    if cfg.get("hub"):
        text = load_parallel_hub(cfg["hub"], cfg["src_lang"], cfg["tgt_lang"], cfg.get("hub_revision"))
        return _build_task(text, None, cfg, device, run_dir)
    if not cfg.get("root"):
        raise DatasetMissingError("dataset=iwslt14 needs dataset.root=<folder> or dataset.hub=<Hub data set>")
    root = Path(cfg["root"]).expanduser()
    return _build_task(load_parallel_folder(root, cfg["src_lang"], cfg["tgt_lang"]), root, cfg, device, run_dir)


def synthetic_translation_root(cfg: Mapping[str, Any], run_dir: Path) -> Path:
    keys = ("num_train", "num_valid", "num_test", "num_words", "min_len", "max_len", "seed", "src_lang", "tgt_lang")
    digest = hashlib.sha1(json.dumps([cfg[k] for k in keys]).encode()).hexdigest()[:10]
    base = Path(cfg["root"]).expanduser() if cfg.get("root") else Path(run_dir) / "data"
    return base / f"synthetic_translation-{digest}"


@register_dataset("synthetic_translation", SyntheticTranslationConfig)
def synthetic_translation(
    cfg: Mapping[str, Any], run_cfg: Mapping[str, Any], device: torch.device, run_dir: Path
) -> Any:
    """Write the synthetic corpus in fairseq's layout (once per settings), then load it as iwslt14."""
    root = synthetic_translation_root(cfg, run_dir)
    src_lang, tgt_lang = cfg["src_lang"], cfg["tgt_lang"]
    if not (root / f"test.{tgt_lang}").is_file():
        seed, kw = int(cfg["seed"]), {k: int(cfg[k]) for k in ("num_words", "min_len", "max_len")}
        splits = {
            split: make_synthetic_parallel(int(cfg[f"num_{split}"]), seed + offset, **kw)
            for offset, split in enumerate(SPLITS)
        }
        write_parallel_folder(root, splits, src_lang, tgt_lang)
    return _build_task(load_parallel_folder(root, src_lang, tgt_lang), root, cfg, device, run_dir)
