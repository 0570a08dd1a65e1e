"""The raw IWSLT14 de-en release (``de-en.tgz``) → the text fairseq's ``prepare-iwslt14.sh`` makes
before its BPE step, step by step as the script does it:

1. training text (``train.tags.de-en.{de,en}``): lines holding ``<url>``, ``<talkid>`` or
   ``<keywords>`` dropped, the ``<title>`` / ``<description>`` tags removed, Moses-tokenized;
2. cleaned as ``clean-corpus-n.perl -ratio 1.5 … 1 175``: whitespace collapsed, ``|`` removed,
   pairs dropped with an empty side, a side over 175 or under 1 words, a word-count ratio over
   1.5 either way, or a word over 1,000 characters; then lowercased;
3. valid: every 23rd remaining pair (line numbers 23, 46, …); train: the others;
4. test: the ``<seg>`` lines of TED dev2010, TEDX dev2012 and TED tst2010, tst2011, tst2012 (in
   that order), ``’`` → ``'``, Moses-tokenized, lowercased.

Moses's ``tokenizer.perl`` is stood in for by ``sacremoses`` (``pip install sacremoses``, the
``normbench[data]`` extra; its port of the same rules, escaping as the script does), so a few
lines may differ from a Perl run.
"""

from __future__ import annotations

import contextlib
import re
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

from normbench.data.parallel_text import ParallelText, read_lines
from normbench.data.prepare_io import PrepareError, extract_archive

LANGS = ("de", "en")
TRAIN_FILE = "train.tags.de-en.{lang}"
TEST_SETS = ("TED.dev2010", "TEDX.dev2012", "TED.tst2010", "TED.tst2011", "TED.tst2012")
TEST_FILE = "IWSLT14.{name}.de-en.{lang}.xml"
DROP_TAGS = ("<url>", "<talkid>", "<keywords>")
STRIP_TAGS = ("<title>", "</title>", "<description>", "</description>")
RATIO, MIN_WORDS, MAX_WORDS, MAX_WORD_CHARS, VALID_EVERY = 1.5, 1, 175, 1000, 23
_SEG_OPEN = re.compile(r'<seg id="[0-9]*">\s*')
_SEG_CLOSE = re.compile(r"\s*</seg>\s*")

Tokenizer = Callable[[str], Callable[[str], str]]
"""language → (line → tokenized line)."""


def moses(lang: str) -> Callable[[str], str]:
    """sacremoses's port of ``tokenizer.perl -l <lang>`` (escaping on, as the script runs it)."""
    try:
        from sacremoses import MosesTokenizer
    except ImportError:
        raise PrepareError(
            "the raw IWSLT14 release is Moses-tokenized as prepare-iwslt14.sh does it: pip install sacremoses "
            "(or normbench[data]), or pass --from a folder with the script's output instead"
        ) from None
    tok = MosesTokenizer(lang=lang)
    return lambda line: tok.tokenize(line, escape=True, return_str=True)


@contextlib.contextmanager
def release_folder(folder: Path) -> Iterator[Path]:
    """The folder of the release's files: ``folder`` or ``folder/de-en``; or ``de-en.tgz`` there,
    extracted into a temporary folder that is removed afterwards."""
    for candidate in (folder, folder / "de-en"):
        if (candidate / TRAIN_FILE.format(lang="de")).is_file():
            yield candidate
            return
    archive = next((p for p in (folder, folder / "de-en.tgz") if p.is_file() and p.name.endswith(".tgz")), None)
    if archive is None:
        raise PrepareError(
            f"--from {folder}: no IWSLT14 data found (fairseq's {{train,valid,test}}.{{de,en}}, the Hub copy's parquet "
            f"files, {TRAIN_FILE.format(lang='de')} of the raw release, or de-en.tgz)"
        )
    with tempfile.TemporaryDirectory(prefix="normbench-iwslt14-") as scratch:
        extract_archive(archive, Path(scratch))
        found = next((p.parent for p in Path(scratch).rglob(TRAIN_FILE.format(lang="de"))), None)
        if found is None:
            raise PrepareError(f"{archive} holds no {TRAIN_FILE.format(lang='de')}; not the IWSLT14 de-en release")
        yield found


def _read(path: Path) -> list[str]:
    if not path.is_file():
        raise PrepareError(f"{path} missing; not the complete IWSLT14 de-en release")
    return read_lines(path, breaks="space")


def training_lines(lines: list[str], tokenize: Callable[[str], str]) -> list[str]:
    """Step 1 for one language."""
    out = []
    for line in lines:
        if any(tag in line for tag in DROP_TAGS):
            continue
        for tag in STRIP_TAGS:
            line = line.replace(tag, "")
        out.append(tokenize(line))
    return out


def _squeeze(line: str) -> str:
    return " ".join(line.replace("|", "").split())


def clean(src: list[str], tgt: list[str]) -> ParallelText:
    """Step 2's filter (``clean-corpus-n.perl -ratio 1.5 … 1 175``), without the lowercasing."""
    if len(src) != len(tgt):
        raise PrepareError(
            f"the training files hold {len(src)} and {len(tgt)} lines once tags are dropped; not aligned"
        )
    out = ParallelText([], [])
    for f, e in zip(src, tgt):
        f, e = _squeeze(f), _squeeze(e)
        if not f or not e:
            continue
        fc, ec = len(f.split(" ")), len(e.split(" "))
        if not (MIN_WORDS <= fc <= MAX_WORDS and MIN_WORDS <= ec <= MAX_WORDS):
            continue
        if fc / ec > RATIO or ec / fc > RATIO:
            continue
        if any(len(w) > MAX_WORD_CHARS for w in f.split(" ") + e.split(" ")):
            continue
        out.src.append(f)
        out.tgt.append(e)
    return out


def segment_lines(lines: list[str], tokenize: Callable[[str], str]) -> list[str]:
    """Step 4 for one file."""
    segs = [line for line in lines if "<seg id" in line]
    return [tokenize(_SEG_CLOSE.sub("", _SEG_OPEN.sub("", s)).replace("\u2019", "'")).lower() for s in segs]


def process_release(folder: Path, tokenizer: Tokenizer | None = None) -> dict[str, ParallelText]:
    """Steps 1-4 on the release's files in ``folder``: train / valid / test pairs (de → en)."""
    make = tokenizer or moses
    tok = {lang: make(lang) for lang in LANGS}
    de, en = (training_lines(_read(folder / TRAIN_FILE.format(lang=lang)), tok[lang]) for lang in LANGS)
    cleaned = clean(de, en)
    pairs = list(zip((s.lower() for s in cleaned.src), (t.lower() for t in cleaned.tgt)))
    valid = [p for n, p in enumerate(pairs, start=1) if n % VALID_EVERY == 0]
    train = [p for n, p in enumerate(pairs, start=1) if n % VALID_EVERY != 0]
    test: dict[str, list[str]] = {lang: [] for lang in LANGS}
    for name in TEST_SETS:
        for lang in LANGS:
            test[lang] += segment_lines(_read(folder / TEST_FILE.format(name=name, lang=lang)), tok[lang])
    if len(test["de"]) != len(test["en"]):
        raise PrepareError(f"the test sets hold {len(test['de'])} German and {len(test['en'])} English segments")
    return {
        "train": ParallelText([s for s, _ in train], [t for _, t in train]),
        "valid": ParallelText([s for s, _ in valid], [t for _, t in valid]),
        "test": ParallelText(test["de"], test["en"]),
    }
