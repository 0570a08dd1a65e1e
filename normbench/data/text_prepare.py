"""Parallel text for `normbench-data`: the Multi30k subset of the CPU presets and IWSLT14 de-en.

Both are written in the layout `normbench.data.parallel_text` reads (fairseq's
``prepare-iwslt14.sh`` output): ``{train,valid,test}.{de,en}``, UTF-8, one sentence a line, the
n-th lines of the two languages aligned. A line break inside a sentence (any that
``str.splitlines`` splits on) becomes a space, so the files stay aligned line by line.

``de-en-subset`` (`prepare_multi30k`): Multi30k task 1 (Elliott et al. 2016), de-en, raw text
(cased, untokenized): the first 20,000 / 1,000 / 1,000 pairs of train / valid / test, from the Hub
copy ``bentrevett/multi30k`` (its ``train.jsonl`` / ``val.jsonl`` / ``test.jsonl``, columns ``en``,
``de``) through ``datasets``, or ``--from`` a folder with those jsonl files or with the official
raw files of github.com/multi30k/dataset ``data/task1/raw`` (``train.de.gz``, ``val.de.gz``,
``test_2016_flickr.de.gz`` and the ``.en`` ones, gzipped or not). The copy beside this checkout
(``../shared/data/de-en-subset``) was cut from those official files by the same rule; the Hub copy
fixed a few empty examples, so a few lines may differ from it.

``iwslt14`` (`prepare_iwslt14`): IWSLT14 de-en as ``prepare-iwslt14.sh`` leaves it before its BPE
step (Moses-tokenized, lowercased, cleaned; valid = every 23rd training pair; test = TED
dev2010 + TEDX dev2012 + TED tst2010-2012), since normbench fits its own joint BPE (10,000, the
script's ``BPE_TOKENS``): subword-nmt's ``@@ `` joins, where a copy has them, are undone. From the
Hub copy ``bbaaaa/iwslt14-de-en-preprocess`` (fairseq's preprocessing; 160,239 / 7,283 / 6,750
pairs; read from its parquet conversion, revision ``refs/convert/parquet``, as ``datasets`` ≥ 4
runs no loading scripts), or ``--from`` a folder: fairseq's output (``{train,valid,test}.{de,en}``)
or the raw release (``de-en.tgz`` or its ``de-en/`` folder, processed by
`normbench.data.iwslt_release`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from normbench.data.iwslt_release import process_release, release_folder
from normbench.data.parallel_text import SPLITS, ParallelText, read_lines, write_parallel_folder
from normbench.data.prepare_io import BadSource, PrepareError, Report, download_errors, one_line, require_network

HUB = "https://huggingface.co"
MULTI30K_HUB = "bentrevett/multi30k"
MULTI30K_LIMITS = {"train": 20_000, "valid": 1_000, "test": 1_000}
MULTI30K_JSONL = {"train": "train.jsonl", "valid": "val.jsonl", "test": "test.jsonl"}
MULTI30K_RAW = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
IWSLT_HUB = "bbaaaa/iwslt14-de-en-preprocess"
IWSLT_REVISION = "refs/convert/parquet"
IWSLT_COUNTS = {"train": 160_239, "valid": 7_283, "test": 6_750}
"""What fairseq's ``prepare-iwslt14.sh`` leaves (its published line counts)."""
HUB_SPLITS = {"train": ("train",), "valid": ("validation", "valid", "val"), "test": ("test",)}
LANGS = ("de", "en")
_BPE_JOIN = re.compile(r"@@( |$)")


def one_line_text(text: str) -> str:
    """``text`` without its line breaks (each run of them one space); no trailing newline."""
    parts = text.splitlines()
    return " ".join(parts) if len(parts) > 1 else (parts[0] if parts else "")


def undo_bpe(line: str) -> str:
    """subword-nmt's segmentation undone: ``"ver@@ stehen"`` → ``"verstehen"``."""
    return _BPE_JOIN.sub("", line)


def pairs_from_rows(rows: Iterable[Mapping[str, Any]], src: str, tgt: str, where: str) -> ParallelText:
    """Rows ``{src: …, tgt: …}`` (Multi30k) or ``{"translation": {src: …, tgt: …}}`` (IWSLT) as pairs."""
    out = ParallelText([], [])
    for i, row in enumerate(rows):
        pair = row.get("translation", row)
        if not isinstance(pair, Mapping) or src not in pair or tgt not in pair:
            raise PrepareError(f"{where}: row {i} has no {src!r} and {tgt!r} texts (keys: {', '.join(map(str, row))})")
        texts = [one_line_text(str(pair[lang] or "")) for lang in (src, tgt)]
        if empty := [lang for lang, text in zip((src, tgt), texts, strict=True) if not text.strip()]:
            raise PrepareError(f"{where}: row {i} has an empty {empty[0]!r} text; every row needs both languages "
                               "(an empty line would be a pair of nothing)")  # fmt: skip
        out.src.append(texts[0])
        out.tgt.append(texts[1])
    return out


def _hub_split(loaded: Mapping[str, Any], split: str, where: str) -> Any:
    for name in HUB_SPLITS[split]:
        if name in loaded:
            return loaded[name]
    raise PrepareError(f"{where} has no {split} split (splits: {', '.join(loaded)})")


def load_rows(name: str, revision: str | None, data_files: Mapping[str, str] | None = None) -> Mapping[str, Any]:
    """``datasets.load_dataset``: a Hub data set, or with ``data_files`` local files read by the
    ``name`` builder (``json``, ``parquet``). Split → rows (each a mapping)."""
    import datasets

    datasets.disable_progress_bars()
    if data_files is None:
        return datasets.load_dataset(name, revision=revision)
    try:
        return datasets.load_dataset(name, data_files=dict(data_files))
    except Exception as e:  # noqa: BLE001  (a file cut short, not UTF-8, not json / parquet: one line)
        files = ", ".join(str(f) for f in data_files.values())
        raise BadSource(f"the {name} files {files} cannot be read ({one_line(e)})") from None


def from_hub(
    name: str, revision: str | None, by_hand: str, src: str = "de", tgt: str = "en"
) -> dict[str, ParallelText]:
    """The three splits of a Hub data set, with one `PrepareError` line when it cannot be had."""
    require_network(HUB, by_hand)
    with download_errors(by_hand):
        loaded = load_rows(name, revision)
    where = f"{name} (revision {revision})" if revision else name
    return {split: pairs_from_rows(_hub_split(loaded, split, where), src, tgt, where) for split in SPLITS}


def _read_lines(path: Path) -> list[str]:
    """``path``'s lines by the readers' one rule (`normbench.data.parallel_text.read_lines`), a
    line break inside a line made a space."""
    return read_lines(path, breaks="space")


def _read_pair(src: Path, tgt: Path) -> ParallelText:
    """The two files of a split, refused (`BadSource`, naming both) unless they have as many lines."""
    text = ParallelText(_read_lines(src), _read_lines(tgt))
    if len(text.src) != len(text.tgt):
        raise BadSource(
            f"{src} has {len(text.src)} lines but {tgt} has {len(text.tgt)}; the two files of a split must be "
            "aligned line by line"
        )
    return text


def _find(folder: Path, stem: str) -> Path | None:
    return next((p for p in (folder / stem, folder / f"{stem}.gz") if p.is_file()), None)


def multi30k_from_folder(folder: Path) -> dict[str, ParallelText]:
    """Multi30k from the Hub copy's jsonl files or the official raw files in ``folder``."""
    folder = folder.expanduser()
    if all((folder / f).is_file() for f in MULTI30K_JSONL.values()):
        loaded = load_rows("json", None, {s: str(folder / f) for s, f in MULTI30K_JSONL.items()})
        return {s: pairs_from_rows(loaded[s], "de", "en", str(folder / MULTI30K_JSONL[s])) for s in SPLITS}
    out = {}
    for split, stem in MULTI30K_RAW.items():
        paths = [_find(folder, f"{stem}.{lang}") for lang in LANGS]
        if None in paths:
            raise PrepareError(
                f"--from {folder}: expected {', '.join(MULTI30K_JSONL.values())} (the Hub copy {MULTI30K_HUB}) or "
                f"the official raw files train/val/test_2016_flickr.{{de,en}}[.gz]; {stem}.de or {stem}.en is missing"
            )
        out[split] = _read_pair(*paths)  # type: ignore[arg-type]
    return out


def _count_line(text: Mapping[str, ParallelText]) -> dict[str, int]:
    return {split: len(text[split].src) for split in SPLITS}


def write_text(staging: Path, text: Mapping[str, ParallelText], name: str, notes: Sequence[str], readme: str) -> Report:
    """Write the splits into ``staging`` (``{split}.{de,en}``) and its README; the report."""
    for split in SPLITS:
        if not text[split].src:
            raise PrepareError(f"{name}: the {split} split came out empty; nothing written")
        if len(text[split].src) != len(text[split].tgt):  # whatever the source: never a misaligned data set
            raise BadSource(
                f"{name}: the {split} split came out with {len(text[split].src)} {LANGS[0]} and "
                f"{len(text[split].tgt)} {LANGS[1]} lines; nothing written"
            )
    write_parallel_folder(staging, dict(text), *LANGS)
    (staging / "README.md").write_text(readme, encoding="utf-8")
    return Report(name, staging, _count_line(text), list(notes))


def multi30k_by_hand(target: Path) -> str:
    return (
        f"fetch train.jsonl, val.jsonl and test.jsonl of the Hub data set {MULTI30K_HUB} (or the raw files of "
        f"github.com/multi30k/dataset data/task1/raw) by hand and run normbench-data de-en-subset "
        f"--from <their folder>; it writes {target}"
    )


def prepare_multi30k(staging: Path, source: Path | None, target: Path) -> Report:
    """``de-en-subset`` into ``staging`` (see the module doc)."""
    if source is None:
        text, origin = from_hub(MULTI30K_HUB, None, multi30k_by_hand(target)), f"the Hub copy {MULTI30K_HUB}"
    else:
        text, origin = multi30k_from_folder(source), str(source)
    available = _count_line(text)
    cut = {s: ParallelText(text[s].src[:n], text[s].tgt[:n]) for s, n in MULTI30K_LIMITS.items()}
    rule = ", ".join(f"the first {n:,} of {available[s]:,} {s} pairs" for s, n in MULTI30K_LIMITS.items())
    short = [s for s, n in MULTI30K_LIMITS.items() if available[s] < n]
    if short:
        s = short[0]
        raise PrepareError(f"{origin} holds {available[s]:,} {s} pairs, fewer than the {MULTI30K_LIMITS[s]:,} that "
                           f"de-en-subset names: not the Multi30k release (task 1 has 29,000 / 1,014 / 1,000); pass "
                           "the release's folder")  # fmt: skip
    notes = [f"Multi30k task 1 de-en from {origin}: {rule}; raw text (cased, untokenized)"]
    readme = MULTI30K_README.format(origin=origin, rule=rule)
    return write_text(staging, cut, "de-en-subset", notes, readme)


def iwslt_by_hand(target: Path) -> str:
    return (
        f"fetch the IWSLT14 de-en release (de-en.tgz, as fairseq's prepare-iwslt14.sh downloads it) or the parquet "
        f"files of the Hub data set {IWSLT_HUB} by hand and run normbench-data iwslt14 --from <their folder>; "
        f"it writes {target}"
    )


def _prepared_folder(folder: Path) -> dict[str, ParallelText] | None:
    """fairseq's output in ``folder`` (``{train,valid,test}.{de,en}``), or None."""
    if not all((folder / f"{s}.{lang}").is_file() for s in SPLITS for lang in LANGS):
        return None
    return {s: _read_pair(*(folder / f"{s}.{lang}" for lang in LANGS)) for s in SPLITS}


def iwslt_from_folder(folder: Path, tokenizer: Any = None) -> tuple[dict[str, ParallelText], str]:
    """IWSLT14 from ``folder``: fairseq's output, parquet files of the Hub copy, or the raw release."""
    folder = folder.expanduser()
    prepared = _prepared_folder(folder)
    if prepared is not None:
        return prepared, f"fairseq's prepare-iwslt14.sh output in {folder}"
    found = sorted(folder.rglob("*.parquet"))  # the Hub's parquet branch: <config>/<split>/0000.parquet
    parquet = {s: [p for p in found if names[0] in p.relative_to(folder).as_posix()] for s, names in HUB_SPLITS.items()}
    if all(parquet.values()):
        files = {s: [str(p) for p in ps] for s, ps in parquet.items()}
        loaded = load_rows("parquet", None, files)  # type: ignore[arg-type]
        return {s: pairs_from_rows(loaded[s], *LANGS, str(folder)) for s in SPLITS}, f"the parquet files in {folder}"
    with release_folder(folder) as release:
        return process_release(release, tokenizer), f"the raw IWSLT14 release in {folder}"


def prepare_iwslt14(
    staging: Path, source: Path | None, target: Path, hub: str = IWSLT_HUB, revision: str | None = IWSLT_REVISION
) -> Report:
    """``iwslt14`` into ``staging`` (see the module doc)."""
    if source is None:
        text, origin = from_hub(hub, revision, iwslt_by_hand(target)), f"the Hub copy {hub} (revision {revision})"
    else:
        text, origin = iwslt_from_folder(source)
    joined = sum(1 for s in SPLITS for side in (text[s].src, text[s].tgt) for line in side if "@@" in line)
    if joined:
        text = {s: ParallelText([undo_bpe(x) for x in t.src], [undo_bpe(x) for x in t.tgt]) for s, t in text.items()}
    counts = _count_line(text)
    notes = [f"IWSLT14 de-en from {origin}: tokenized, lowercased text before BPE (normbench fits its own)"]
    if joined:
        notes.append(f"subword-nmt's '@@ ' joins undone on {joined:,} lines")
    if counts != IWSLT_COUNTS:
        expected = ", ".join(f"{s} {n:,}" for s, n in IWSLT_COUNTS.items())
        notes.append(f"the counts differ from prepare-iwslt14.sh's ({expected})")
    readme = IWSLT_README.format(origin=origin)
    return write_text(staging, text, "iwslt14", notes, readme)


MULTI30K_README = """# German-English parallel text subset (Multi30k, task 1)

Made by `normbench-data de-en-subset` from {origin}: {rule}.
Raw text: original casing and punctuation, not tokenized, not lowercased, no BPE (the presets
read it with `dataset.pretokenize=punct`). Layout: `{{train,valid,test}}.{{de,en}}`, UTF-8, one
sentence a line, the n-th lines of `X.de` and `X.en` aligned (fairseq's prepare-iwslt14.sh
layout). Checksums: `SHA256SUMS`.

Multi30k: Elliott, Frank, Sima'an, Specia 2016, "Multi30K: Multilingual English-German Image
Descriptions". The copy in `../shared/data/de-en-subset` was cut by the same rule from the
official raw files (github.com/multi30k/dataset); the Hub copy fixed a few empty examples, so a
few lines may differ from it.
"""

IWSLT_README = """# IWSLT14 German-English (fairseq's prepare-iwslt14.sh layout)

Made by `normbench-data iwslt14` from {origin}. `{{train,valid,test}}.{{de,en}}`: Moses-tokenized,
lowercased text as prepare-iwslt14.sh leaves it before its BPE step (normbench fits its own joint
BPE, `dataset.vocab_size=10000`); valid is every 23rd cleaned training pair, test is TED dev2010,
TEDX dev2012 and TED tst2010-2012. Checksums: `SHA256SUMS`.
"""
