"""``normbench-data``, offline: on fake CIFAR-10 pickles and fake Multi30k / IWSLT rows written
here. The subset rule, its layout and determinism; the project's own loaders read what is
written; without a network one line, exit 1 and nothing left behind; an existing folder is
never touched."""

from __future__ import annotations

import json
import pickle
import socket
from pathlib import Path

import numpy as np
import pytest

from normbench.data import cifar_prepare, text_prepare
from normbench.data.cifar import LABEL_NAMES, load_cifar10
from normbench.data.iwslt_release import clean, process_release
from normbench.data.parallel_text import load_parallel_folder
from normbench.data.prepare import main
from normbench.data.prepare_io import CHECKSUMS_FILE, sha256
from tests.faults import fault

PER_CLASS = 20  # fake originals: 20 images per class in the training files, 10 in the test file


def write_fake_release(root: Path, per_class: int = PER_CLASS, test_per_class: int = 10) -> Path:
    """A tiny ``cifar-10-batches-py``: image i's pixels all equal i % 251, labels in a fixed shuffle."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(123)

    def batch(name: str, labels: np.ndarray, start: int) -> None:
        data = np.repeat(((start + np.arange(len(labels))) % 251).astype(np.uint8)[:, None], 3072, axis=1)
        files = [f"{name}_img{start + i}.png" for i in range(len(labels))]
        with open(folder / name, "wb") as f:
            pickle.dump({"batch_label": name, "labels": labels.tolist(), "data": data, "filenames": files}, f, 2)

    train = rng.permutation(np.repeat(np.arange(10), per_class))
    for k, part in enumerate(np.array_split(train, 5), start=1):
        batch(f"data_batch_{k}", part, 1000 * k)
    batch("test_batch", rng.permutation(np.repeat(np.arange(10), test_per_class)), 9000)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": LABEL_NAMES, "num_cases_per_batch": 2 * per_class, "num_vis": 3072}, f, 2)
    return folder


def file_order(folder: Path, names: list[str]) -> tuple[list[int], list[str]]:
    labels: list[int] = []
    files: list[str] = []
    for name in names:
        with open(folder / name, "rb") as f:
            b = pickle.load(f, encoding="latin1")
        labels += b["labels"]
        files += b["filenames"]
    return labels, files


def test_subset_follows_its_rule_and_the_loader_reads_it(tmp_path) -> None:
    original = write_fake_release(tmp_path / "orig")
    report = cifar_prepare.build_subset(original, tmp_path / "a", train_per_class=10, test_per_class=4)
    assert report.counts == {"train": 100, "test": 40}
    x, y, classes = load_cifar10(tmp_path / "a", train=True, verify_checksums=False)
    assert x.shape == (100, 3, 32, 32) and classes == LABEL_NAMES
    assert np.bincount(y.numpy()).tolist() == [10] * 10
    xt, yt, _ = load_cifar10(tmp_path / "a", train=False, verify_checksums=False)
    assert np.bincount(yt.numpy()).tolist() == [4] * 10

    labels, files = file_order(original, [f"data_batch_{k}" for k in range(1, 6)])
    first = {c: [f for f, lab in zip(files, labels) if lab == c][:10] for c in range(10)}
    for k in range(1, 6):  # batch k: the images (k-1)*2 .. k*2-1 of every class, shuffled
        got_labels, got_files = file_order(tmp_path / "a" / "cifar-10-batches-py", [f"data_batch_{k}"])
        assert sorted(got_files) == sorted(f for c in range(10) for f in first[c][(k - 1) * 2 : k * 2])
        assert got_labels != sorted(got_labels)  # mixed
    _, test_files = file_order(tmp_path / "a" / "cifar-10-batches-py", ["test_batch"])
    test_labels, all_test = file_order(original, ["test_batch"])
    assert sorted(test_files) == sorted(
        f for c in range(10) for f in [f for f, lab in zip(all_test, test_labels) if lab == c][:4]
    )
    with open(tmp_path / "a" / "cifar-10-batches-py" / "data_batch_3", "rb") as f:
        written = pickle.load(f, encoding="latin1")
    for name, row in zip(written["filenames"], written["data"]):  # pixels travel with their names
        assert (row == int(name.rsplit("img", 1)[1].removesuffix(".png")) % 251).all()

    cifar_prepare.build_subset(original, tmp_path / "b", train_per_class=10, test_per_class=4)
    for name in ["data_batch_1", "data_batch_5", "test_batch", "batches.meta", "../README.md"]:
        a, b = (tmp_path / d / "cifar-10-batches-py" / name for d in ("a", "b"))
        assert a.read_bytes() == b.read_bytes(), name
    assert "first 10 training images of each class" in (tmp_path / "a" / "README.md").read_text()


def test_subset_refuses_originals_with_too_few_images_of_a_class(tmp_path) -> None:
    original = write_fake_release(tmp_path / "orig")
    with pytest.raises(cifar_prepare.PrepareError, match="hold 20 images of class 0; the subset needs 1000"):
        cifar_prepare.build_subset(original, tmp_path / "out")


def fake_md5s(monkeypatch, folder: Path) -> None:
    digests = {p.name: cifar_prepare.md5(p) for p in folder.iterdir()}
    monkeypatch.setattr(cifar_prepare, "release_md5s", lambda: digests)


def test_the_command_makes_cifar10_then_the_subset_from_it(tmp_path, monkeypatch, capsys) -> None:
    original = write_fake_release(tmp_path / "download")
    fake_md5s(monkeypatch, original)
    monkeypatch.setattr(cifar_prepare, "TRAIN_PER_CLASS", 10)
    monkeypatch.setattr(cifar_prepare, "TEST_PER_CLASS", 4)
    root = tmp_path / "data"
    assert main(["cifar10", "--root", str(root), "--from", str(tmp_path / "download")]) == 0
    assert main(["cifar10-subset", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    subset = root / "cifar10-subset"
    assert f"cifar10-subset: wrote {subset} (train 100, test 40)" in out and "rule: the first 10" in out
    assert "decoded from JPEGs" in out and f"export NORMBENCH_DATA={root}" in out
    sums = (subset / CHECKSUMS_FILE).read_text().splitlines()
    assert f"{sha256(subset / 'cifar-10-batches-py' / 'test_batch')}  cifar-10-batches-py/test_batch" in sums
    assert sha256(subset / "cifar-10-batches-py" / "test_batch") in out
    assert load_cifar10(root / "cifar10", train=False, verify_checksums=False)[0].shape[0] == 100
    assert not list(root.glob(".*partial*"))

    (subset / "mine.txt").write_text("the user's")  # an existing folder is left alone ...
    assert main(["cifar10-subset", "--root", str(root)]) == 0
    assert "exists; left alone" in capsys.readouterr().out and (subset / "mine.txt").exists()
    assert main(["cifar10-subset", "--root", str(root), "--force"]) == 0  # ... or moved aside
    (aside,) = root.glob("cifar10-subset.replaced-*")
    assert (aside / "mine.txt").read_text() == "the user's" and not (subset / "mine.txt").exists()


def no_network(monkeypatch) -> list[tuple[str, int]]:
    asked: list[tuple[str, int]] = []

    def refuse(address, timeout=None, *a, **k):
        asked.append(address)
        raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", refuse)
    for var in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HF_HUB_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    return asked


@pytest.mark.parametrize(
    ("name", "host", "folder", "what"),
    [
        ("cifar10", "www.cs.toronto.edu", "cifar10", "cifar-10-python.tar.gz"),
        ("cifar10-subset", "www.cs.toronto.edu", "cifar10-subset", "cifar-10-python.tar.gz"),
        ("de-en-subset", "huggingface.co", "de-en-subset", "bentrevett/multi30k"),
        ("iwslt14", "huggingface.co", "iwslt14.tokenized.de-en", "de-en.tgz"),
    ],
)
def test_without_network_one_line_and_nothing_left(tmp_path, monkeypatch, capsys, name, host, folder, what) -> None:
    asked = no_network(monkeypatch)
    root = tmp_path / "data"
    assert main([name, "--root", str(root)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"normbench-data {name}: no network: cannot reach {host}:443")
    assert what in err[0] and "by hand" in err[0] and str(root) in err[0]
    assert asked == [(host, 443)]
    assert not root.exists()  # no target, no partial folder, not even the root it would have made


def test_all_stops_at_the_first_failure(tmp_path, monkeypatch, capsys) -> None:
    no_network(monkeypatch)
    assert main(["--root", str(tmp_path)]) == 1  # an existing root is kept, and holds nothing new
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def test_multi30k_from_the_hub_copys_files(tmp_path, monkeypatch, capsys) -> None:
    src = tmp_path / "m30k"
    src.mkdir()
    sizes = {"train.jsonl": 25, "val.jsonl": 3, "test.jsonl": 5}
    for f, n in sizes.items():
        write_jsonl(
            src / f, [{"en": f"A dog {i} runs.", "de": f"Ein Hund {i} läuft.\n(zwei Zeilen)"} for i in range(n)]
        )
    monkeypatch.setattr(text_prepare, "MULTI30K_LIMITS", {"train": 20, "valid": 2, "test": 5})
    assert main(["de-en-subset", "--root", str(tmp_path / "data"), "--from", str(src)]) == 0
    folder = tmp_path / "data" / "de-en-subset"
    text = load_parallel_folder(folder, "de", "en")  # the project's translation loader
    assert [len(text[s].src) for s in ("train", "valid", "test")] == [20, 2, 5]
    assert text["train"].src[3] == "Ein Hund 3 läuft. (zwei Zeilen)" and text["train"].tgt[3] == "A dog 3 runs."
    out = capsys.readouterr().out
    assert "the first 20 of 25 train pairs" in out and "the first 5 of 5 test pairs" in out


@fault("normbench-data de-en-subset --from a source smaller than the subset, or a row without both languages"
       " (issue 59)",
       "one line naming the split or the row; nothing written",
       "one-line")  # fmt: skip
@pytest.mark.parametrize(
    ("rows", "needle"),
    [({"test.jsonl": 2}, "holds 2 test pairs, fewer than the 5 that de-en-subset names"),
     ({"row": {"de": "Ein Hund."}}, "row 1 has an empty 'en' text"),  # datasets fills the missing key with None
     ({"row": {"de": "Ein Hund.", "en": ""}}, "row 1 has an empty 'en' text")],
    ids=["too-few-pairs", "no-en", "empty-en"],
)  # fmt: skip
def test_a_multi30k_source_that_cannot_make_the_subset_is_one_line(tmp_path, monkeypatch, capsys, rows, needle) -> None:
    """A 2,000-pair source wrote a 2,000-pair "subset"; a row without "en" became an empty line (issue 59)."""
    src = tmp_path / "m30k"
    src.mkdir()
    sizes = {"train.jsonl": 25, "val.jsonl": 3, "test.jsonl": rows.get("test.jsonl", 5)}
    for f, n in sizes.items():
        write_jsonl(src / f, [{"en": f"A dog {i} runs.", "de": f"Ein Hund {i} läuft."} for i in range(n)])
    if "row" in rows:
        lines = (src / "train.jsonl").read_text().splitlines()
        lines[1] = json.dumps(rows["row"])
        (src / "train.jsonl").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(text_prepare, "MULTI30K_LIMITS", {"train": 20, "valid": 2, "test": 5})
    code = main(["de-en-subset", "--root", str(tmp_path / "data"), "--from", str(src)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and needle in err[0], err
    assert not (tmp_path / "data" / "de-en-subset").exists()


def test_multi30k_from_the_official_raw_files(tmp_path, monkeypatch) -> None:
    import gzip

    src = tmp_path / "raw"
    src.mkdir()
    for stem, n in (("train", 4), ("val", 2), ("test_2016_flickr", 2)):
        for lang in ("de", "en"):
            with gzip.open(src / f"{stem}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.write("".join(f"{lang} {stem} {i} \n" for i in range(n)))  # a trailing space is kept
    monkeypatch.setattr(text_prepare, "MULTI30K_LIMITS", {"train": 4, "valid": 2, "test": 2})
    report = text_prepare.prepare_multi30k(tmp_path / "out", src, tmp_path / "out")
    assert report.counts == {"train": 4, "valid": 2, "test": 2}
    assert (tmp_path / "out" / "valid.de").read_text() == "de val 0 \nde val 1 \n"


def test_iwslt14_from_hub_rows_through_the_same_path(tmp_path, monkeypatch, capsys) -> None:
    asked = []
    monkeypatch.setattr(
        socket, "create_connection", lambda address, timeout=None: asked.append(address) or socket.socket()
    )
    rows = {
        "train": [{"translation": {"de": "wir ver@@ stehen das .", "en": "we under@@ stand that ."}}] * 3,
        "validation": [{"translation": {"de": "ja .", "en": "yes ."}}],
        "test": [{"translation": {"de": "nein .", "en": "no ."}}] * 2,
    }

    def fake_load(name, revision, data_files=None):
        assert (name, revision) == ("bbaaaa/iwslt14-de-en-preprocess", "refs/convert/parquet")
        return rows

    monkeypatch.setattr(text_prepare, "load_rows", fake_load)
    assert main(["iwslt14", "--root", str(tmp_path)]) == 0
    text = load_parallel_folder(tmp_path / "iwslt14.tokenized.de-en", "de", "en")
    assert text["train"].src == ["wir verstehen das ."] * 3 and text["test"].tgt == ["no .", "no ."]
    out = capsys.readouterr().out
    assert "joins undone on 6 lines" in out and "differ from prepare-iwslt14.sh's" in out
    assert asked == [("huggingface.co", 443)]


def test_iwslt14_from_parquet_files(tmp_path) -> None:
    pd = pytest.importorskip("pandas")
    for split in ("train", "validation", "test"):
        (tmp_path / "p" / "de-en" / split).mkdir(parents=True)
        frame = pd.DataFrame({"translation": [{"de": f"{split} de {i}", "en": f"{split} en {i}"} for i in range(3)]})
        frame.to_parquet(tmp_path / "p" / "de-en" / split / "0000.parquet")
    report = text_prepare.prepare_iwslt14(tmp_path / "out", tmp_path / "p", tmp_path / "out")
    assert report.counts == {"train": 3, "valid": 3, "test": 3}
    assert (tmp_path / "out" / "valid.en").read_text().splitlines()[0] == "validation en 0"


def write_raw_release(folder: Path, n: int = 50) -> None:
    folder.mkdir(parents=True)
    for lang in ("de", "en"):
        lines = [f"<url>http://ted.com/{lang}</url>", f"<title>Title {lang}</title>"]
        lines += [f"Sentence {i} in {lang}" + (" word" * 10 if i == 7 and lang == "de" else "") for i in range(n)]
        (folder / f"train.tags.de-en.{lang}").write_text("\n".join(lines) + "\n", encoding="utf-8")
        for name in ("TED.dev2010", "TEDX.dev2012", "TED.tst2010", "TED.tst2011", "TED.tst2012"):
            segs = f'<doc>\n<seg id="1"> It’s {name} {lang} </seg>\n</doc>\n'
            (folder / f"IWSLT14.{name}.de-en.{lang}.xml").write_text(segs, encoding="utf-8")


def test_iwslt14_from_the_raw_release_follows_prepare_iwslt14(tmp_path) -> None:
    write_raw_release(tmp_path / "de-en")
    text = process_release(tmp_path / "de-en", tokenizer=lambda lang: str)
    # 1 title line + 50 sentences; pair 8 (ratio 14/4 > 1.5) dropped by the cleaner: 50 pairs;
    # every 23rd (the 23rd and 46th) is valid
    assert len(text["train"].src) == 48 and len(text["valid"].src) == 2
    assert text["train"].src[0] == "title de" and text["valid"].src[0] == "sentence 22 in de"
    assert text["test"].src == [
        f"it's {n} de" for n in ("ted.dev2010", "tedx.dev2012", "ted.tst2010", "ted.tst2011", "ted.tst2012")
    ]
    assert clean(["a | b", "x " * 200, ""], ["a b", "y", "z"]).src == ["a b"]


def test_hub_offline_setting_fails_at_once(tmp_path, monkeypatch, capsys) -> None:
    asked = no_network(monkeypatch)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["de-en-subset", "--root", str(tmp_path)]) == 1
    assert "HF_HUB_OFFLINE is set" in capsys.readouterr().err and asked == []


def test_from_needs_one_name(capsys) -> None:
    assert main(["cifar10", "iwslt14", "--from", "x"]) == 2  # returned, one line (tests/data/test_prepare_cli.py)
    assert "--from makes one data set" in capsys.readouterr().err
