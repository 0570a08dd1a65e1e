"""Data files at the edges users reach (issue 47): a line break inside a line, under one reader
rule for checking, preparing and loading; ``normbench-data --from`` on an archive cut short or
not gzip, a ``.gz`` cut short, a line that is not UTF-8, two files of a split not aligned: one
line each, exit 2, nothing half-written."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest

from normbench.data.parallel_text import LINE_BREAKS, DataFileError, load_parallel_folder, read_lines
from normbench.data.prepare import main as data_main
from tests.data.test_prepare import write_raw_release
from tests.data.test_translation import run_cli_inprocess, write_files
from tests.faults import fault

BREAK_IDS = [f"U+{ord(c):04X}" for c in LINE_BREAKS]


def folder_with(root: Path, name: str, lines: list[str]) -> Path:
    """A parallel-text folder (`write_files`) whose ``name`` holds ``lines`` (written as they are)."""
    return write_files(root, {name: "".join(line + "\n" for line in lines).encode()})


def listing(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


# ---------------------------------------------------------------------------------------------
# Line ends: one rule


@pytest.mark.parametrize("char", list(LINE_BREAKS), ids=BREAK_IDS)
@fault(
    "a line break other than \\n inside a line of parallel text (\\r, \\v, \\f, \\x1c-\\x1e, \\x85, U+2028, U+2029)",
    "one error naming the file, line and character; never pairs shifted",
    "one-line",
)
def test_a_line_break_inside_a_line_is_refused_naming_file_and_line(tmp_path, char) -> None:
    """The ``datasets`` reader splits at ``\\r``, ``str.splitlines`` at all of them: a file with
    one inside line 3 and its partner with one inside line 7 count the same lines by ``\\n`` and
    would be read shifted between the two. Refused before any reader disagrees."""
    lines = [f"satz {i}" for i in range(6)]
    lines[2] = f"ein kleines{char}mädchen"
    root = folder_with(tmp_path / "data", "train.de", lines)
    with pytest.raises(DataFileError) as e:
        load_parallel_folder(root, "de", "en")
    message = str(e.value)
    assert message.startswith(f"{root / 'train.de'} line 3: a line break (U+{ord(char):04X} ")
    assert "at column 12 inside the line" in message and "\n" not in message


@fault(
    "a carriage return inside a line of training text, through the command",
    "one line naming the file and line, exit 2; nothing made",
    "one-line",
)
def test_a_carriage_return_through_the_command_is_one_line(tmp_path, monkeypatch, capsys) -> None:
    from tests.test_file_faults import MT, one_error

    root = write_files(tmp_path / "data", {"train.de": b"ein\rkleines\nx y\n", "train.en": b"a\nb\n"})
    before = listing(tmp_path)
    code, err = run_cli_inprocess(monkeypatch, capsys, *MT, f"dataset.root={root}", f"hydra.run.dir={tmp_path / 'r'}")
    assert one_error(code, err, 2).startswith(
        f"normbench: error: {root / 'train.de'} line 1: a line break (U+000D carriage return) at column 4"
    )
    assert listing(tmp_path) == before


def test_windows_line_ends_are_line_ends_for_every_reader(tmp_path) -> None:
    root = write_files(tmp_path / "data", {"train.de": b"a b\r\nc d\r\n", "train.en": b"x y\nz w\n"})
    assert read_lines(root / "train.de") == ["a b", "c d"]
    assert load_parallel_folder(root, "de", "en")["train"].src == ["a b", "c d"]  # datasets agrees


@fault(
    "a line break inside a line of a file normbench-data prepares from",
    "made a space, as in a Hub row; the pairs stay aligned",
    "result",
)
def test_preparation_makes_a_line_break_inside_a_line_a_space(tmp_path, capsys, monkeypatch) -> None:
    from normbench.data import text_prepare

    monkeypatch.setattr(text_prepare, "MULTI30K_LIMITS", {"train": 9, "valid": 2, "test": 2})  # the source's size
    src = tmp_path / "raw"
    src.mkdir()
    for stem, n in (("train", 9), ("val", 2), ("test_2016_flickr", 2)):
        for lang in ("de", "en"):
            lines = [f"{lang} {stem} {i}" for i in range(n)]
            if stem == "train":  # a \r inside German line 3 and English line 7
                k = 2 if lang == "de" else 6
                lines[k] = lines[k].replace(" ", "\r", 1)
            (src / f"{stem}.{lang}").write_text("".join(x + "\n" for x in lines), encoding="utf-8", newline="")
    assert data_main(["de-en-subset", "--root", str(tmp_path / "data"), "--from", str(src)]) == 0
    text = load_parallel_folder(tmp_path / "data" / "de-en-subset", "de", "en")
    assert text["train"].src[2] == "de train 2" and text["train"].tgt[2] == "en train 2"
    assert text["train"].src[6] == "de train 6" and text["train"].tgt[6] == "en train 6"
    assert all(s.split()[2] == t.split()[2] for s, t in zip(text["train"].src, text["train"].tgt))


# ---------------------------------------------------------------------------------------------
# normbench-data --from: bad files are one line, exit 2, nothing half-written


def _tgz(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _release_tgz(tmp_path: Path) -> bytes:
    write_raw_release(tmp_path / "release" / "de-en")
    files = {f"de-en/{p.name}": p.read_bytes() for p in sorted((tmp_path / "release" / "de-en").iterdir())}
    return _tgz(files)


def _bad_source(tmp_path: Path, case: str) -> tuple[str, Path, str]:
    """(data set name, --from folder, the start of the expected message) for a bad input ``case``."""
    src = tmp_path / "src"
    src.mkdir()
    if case in ("archive cut short", "archive not gzip"):
        data = _release_tgz(tmp_path)
        (src / "de-en.tgz").write_bytes(data[: len(data) // 2] if case == "archive cut short" else b"<html>" * 50)
        return "iwslt14", src, f"{src / 'de-en.tgz'} is not a whole .tar.gz archive ("
    if case == "cifar archive cut short":
        data = _tgz({"cifar-10-batches-py/batches.meta": bytes(range(256)) * 400})
        (src / "cifar-10-python.tar.gz").write_bytes(data[: len(data) // 2])
        return "cifar10", src, f"{src / 'cifar-10-python.tar.gz'} is not a whole .tar.gz archive ("
    for stem, n in (("train", 4), ("val", 2), ("test_2016_flickr", 2)):
        for lang in ("de", "en"):
            data = "".join(f"{lang} {stem} {i}\n" for i in range(n)).encode()
            if stem == "train" and lang == "en" and case == "not UTF-8":
                data = data.replace(b"en train 1", b"en tr\xe4in 1")
            if stem == "train" and lang == "en" and case == "misaligned":
                data = data[: data.rindex(b"en train 3")]
            path = src / f"{stem}.{lang}.gz"
            path.write_bytes(gzip.compress(data))
            if stem == "train" and lang == "de" and case == ".gz cut short":
                path.write_bytes(path.read_bytes()[:-12])
    where = src / "train.en.gz"
    expected = {
        "not UTF-8": f"{where} line 2: byte 0xe4 at column 6 is not UTF-8",
        "misaligned": f"{src / 'train.de.gz'} has 4 lines but {where} has 3; the two files of a split must be aligned",
        ".gz cut short": f"{src / 'train.de.gz'} cannot be read: it is cut short",
    }[case]
    return "de-en-subset", src, expected


@pytest.mark.parametrize(
    "case", ["archive cut short", "archive not gzip", "cifar archive cut short", "not UTF-8", ".gz cut short",
             "misaligned"],
)  # fmt: skip
@fault(
    "normbench-data --from a bad file (an archive cut short or not gzip, a .gz cut short, text not UTF-8, "
    "a split misaligned)",
    "one line naming the file, exit 2; nothing written",
    "one-line",
)
def test_a_bad_source_file_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, case) -> None:
    name, src, expected = _bad_source(tmp_path, case)
    root = tmp_path / "data"
    assert data_main([name, "--root", str(root), "--from", str(src)]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in captured.err, captured.err
    assert err[0].startswith(f"normbench-data {name}: {expected}"), err[0]
    assert not root.exists()  # no target, no partial folder, not even the root


@fault(
    "normbench-data iwslt14 --from fairseq's files with train.en one line short",
    "refused at preparation: one line naming both files, exit 2; nothing written",
    "one-line",
)
def test_a_misaligned_prepared_folder_is_refused_at_preparation(tmp_path, capsys) -> None:
    src = tmp_path / "fairseq"
    src.mkdir()
    for split in ("train", "valid", "test"):
        for lang in ("de", "en"):
            n = 4 if (split, lang) == ("train", "en") else 5
            (src / f"{split}.{lang}").write_text("".join(f"{lang} {i} .\n" for i in range(n)))
    root = tmp_path / "data"
    assert data_main(["iwslt14", "--root", str(root), "--from", str(src)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"normbench-data iwslt14: {src / 'train.de'} has 5 lines but {src / 'train.en'} has 4; "
        "the two files of a split must be aligned line by line"
    )
    assert not root.exists()


# ---------------------------------------------------------------------------------------------
# CIFAR-10 files swapped or copied: checked whatever dataset.verify_checksums says


def _cifar(root: Path) -> Path:
    from normbench.data.cifar import make_synthetic_images, write_cifar_batches

    return write_cifar_batches(root, make_synthetic_images(50, seed=0), make_synthetic_images(20, seed=1))


def _copy(src: str, dst: str):
    return lambda folder: (folder / dst).write_bytes((folder / src).read_bytes())


def _swap(a: str, b: str):
    def apply(folder: Path) -> None:
        x, y = (folder / a).read_bytes(), (folder / b).read_bytes()
        (folder / a).write_bytes(y)
        (folder / b).write_bytes(x)

    return apply


def _test_from_training_images(folder: Path) -> None:
    """test_batch re-pickled from training images: no file is a copy, the images are."""
    import pickle

    with open(folder / "data_batch_1", "rb") as f:
        batch = pickle.load(f)
    batch["batch_label"] = "testing batch 1 of 1"
    with open(folder / "test_batch", "wb") as f:
        pickle.dump(batch, f, protocol=2)


def _relabelled_copy(folder: Path) -> None:
    """data_batch_2 re-pickled from data_batch_1's images with other labels: no file is a copy, every
    image of the two batches has two labels."""
    import pickle

    with open(folder / "data_batch_1", "rb") as f:
        batch = pickle.load(f)
    batch["batch_label"], batch["labels"] = "training batch 2 of 5", [(v + 1) % 10 for v in batch["labels"]]
    with open(folder / "data_batch_2", "wb") as f:
        pickle.dump(batch, f, protocol=2)


def _emptied(folder: Path) -> None:
    import pickle

    with open(folder / "data_batch_3", "rb") as f:
        batch = pickle.load(f)
    batch["data"], batch["labels"], batch["filenames"] = batch["data"][:0], [], []
    with open(folder / "data_batch_3", "wb") as f:
        pickle.dump(batch, f, protocol=2)


def _with_sums(change):
    """normbench-data's SHA256SUMS beside the folder, then ``change``."""

    def apply(folder: Path) -> None:
        from normbench.data.prepare_io import write_checksums

        write_checksums(folder.parent)
        change(folder)

    return apply


CIFAR_FAULTS = {
    "test_batch a copy of data_batch_1": (
        _copy("data_batch_1", "test_batch"),
        "{f}/test_batch is byte for byte {f}/data_batch_1: a batch copied",
    ),
    "two training batches the same": (
        _copy("data_batch_2", "data_batch_4"),
        "{f}/data_batch_4 is byte for byte {f}/data_batch_2: a batch copied",
    ),
    "test_batch made of training images": (
        _test_from_training_images,
        "10 of 10 test images are also training images (test_batch and data_batch_1",
    ),
    "a training batch made of another's images with other labels": (
        _relabelled_copy,
        "10 training images in {f} carry two labels (e.g. image 0 (data_batch_1) and image 10 (data_batch_2)",
    ),
    "a training batch with no images": (_emptied, "{f}/data_batch_3 holds no images"),
    "two batches swapped, SHA256SUMS written by normbench-data": (
        _with_sums(_swap("data_batch_2", "data_batch_3")),
        "{f}/data_batch_2, {f}/data_batch_3: SHA-256 differs from {f}/../SHA256SUMS",
    ),
}


@pytest.mark.parametrize("case", list(CIFAR_FAULTS))
@fault(
    "CIFAR-10 files swapped or copied with dataset.verify_checksums=false (test = a training batch, two batches "
    "the same, a file changed since SHA256SUMS; issue 59: a training batch of another's images with other labels, "
    "a batch with no images)",
    "one error naming the files; never a test split of training images",
    "one-line",
)
def test_cifar_files_swapped_or_copied_are_refused_without_checksums(tmp_path, case) -> None:
    from normbench.data.cifar import load_cifar10_splits

    damage, expected = CIFAR_FAULTS[case]
    folder = _cifar(tmp_path / "data")
    damage(folder)
    with pytest.raises(DataFileError) as e:
        load_cifar10_splits(tmp_path / "data", verify_checksums=False)
    message = str(e.value)
    expected = expected.format(f=folder).replace(f"{folder}/../", f"{folder.parent}/")
    assert expected in message and "\n" not in message, message


def test_intact_cifar_files_pass_the_identity_checks_with_and_without_sums(tmp_path) -> None:
    from normbench.data.cifar import load_cifar10_splits
    from normbench.data.prepare_io import write_checksums

    folder = _cifar(tmp_path / "data")
    (train, _, _), (test, _, _) = load_cifar10_splits(tmp_path / "data", verify_checksums=False)
    assert len(train) == 50 and len(test) == 20
    write_checksums(folder.parent)
    load_cifar10_splits(tmp_path / "data", verify_checksums=False)


@fault(
    "CIFAR-10 test_batch a copy of a training batch, through the command (verify_checksums=false)",
    "one line naming both files, exit 2; nothing written",
    "one-line",
)
def test_a_copied_cifar_batch_stops_the_run_before_anything_is_written(tmp_path, monkeypatch, capsys) -> None:
    from tests.test_validate import run_cli_inprocess as run_normbench

    folder = _cifar(tmp_path / "data")
    _copy("data_batch_3", "test_batch")(folder)
    out = tmp_path / "run"
    args = ("dataset=cifar10", f"dataset.root={tmp_path / 'data'}", "dataset.verify_checksums=false",
            "hardware=cpu", "batch_size=2", "max_steps=1", "logger=local", "logger.progress_bar=false",
            f"hydra.run.dir={out}")  # fmt: skip
    code, stdout, stderr = run_normbench(monkeypatch, capsys, *args)
    assert code == 2 and "Traceback" not in stdout + stderr, stderr
    assert stderr.strip().splitlines() == [
        f"normbench: error: {folder}/test_batch is byte for byte {folder}/data_batch_3: a batch copied over another; "
        "restore the original files"
    ]
    assert not out.exists()


# ---------------------------------------------------------------------------------------------
# The BPE cache is a cache


DAMAGED_CACHE = {
    "cut short": lambda b: b[: len(b) // 2],
    "garbage": lambda b: b"\x00\xff" * 100,
    "another JSON file": lambda b: b'{"vocab": [1, 2]}',
    "empty": lambda b: b"",
}


@pytest.mark.parametrize("damage", list(DAMAGED_CACHE))
@fault(
    "a corrupted BPE cache file (cut short, garbage, another JSON file, empty)",
    "one warning naming the file; the BPE trained again and the file replaced",
    "result",
)
def test_a_corrupted_bpe_cache_is_rebuilt_with_one_warning(tmp_path, capsys, damage) -> None:
    from tests.data.test_translation import prepare, write_small

    root = tmp_path / "data"
    text = write_small(root)
    first = prepare(root, text)
    path, good = first.bpe_path, first.bpe_path.read_bytes()
    path.write_bytes(DAMAGED_CACHE[damage](good))
    capsys.readouterr()
    again = prepare(root, text)
    assert again.bpe_path == path and path.read_bytes() == good and again.splits == first.splits
    (warning,) = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert warning.startswith(f"normbench: warning: the cached BPE {path} cannot be read (")
    assert warning.endswith("); training it again and replacing the file")
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary file left


@fault(
    "a corrupted BPE cache file, through the command",
    "the run goes on: one warning naming the file, status finished",
    "result",
)
def test_a_corrupted_bpe_cache_does_not_stop_the_run(tmp_path, monkeypatch, capsys) -> None:
    from tests.test_file_faults import MT

    root = write_files(tmp_path / "data", {})
    args = (*MT, "max_steps=1", f"dataset.root={root}")
    code, err = run_cli_inprocess(monkeypatch, capsys, *args, f"hydra.run.dir={tmp_path / 'first'}")
    assert code == 0, err
    (cache,) = (root / ".normbench_bpe").glob("*.json")
    cache.write_bytes(cache.read_bytes()[:100])
    code, err = run_cli_inprocess(monkeypatch, capsys, *args, f"hydra.run.dir={tmp_path / 'second'}")
    assert code == 0 and "Traceback" not in err, err
    assert [line for line in err.splitlines() if "warning" in line and str(cache) in line] == [
        line for line in err.splitlines() if line.startswith(f"normbench: warning: the cached BPE {cache} cannot be")
    ]
    assert f"normbench: warning: the cached BPE {cache} cannot be read (" in err
    assert '"status": "finished"' in (tmp_path / "second" / "summary.json").read_text()


# ---------------------------------------------------------------------------------------------
# normbench-data's offline hint names the folder the command reads


@fault(
    "normbench-data cifar10-subset offline, NORMBENCH_DATA unset (the release and the subset in different roots)",
    "one line naming the folder the command reads the release from; doing what it says works",
    "one-line",
)
def test_the_offline_hint_names_the_folder_the_command_reads(tmp_path, monkeypatch, capsys) -> None:
    from normbench.data import cifar_prepare
    from normbench.data import prepare as prepare_module
    from tests.data.test_prepare import fake_md5s, no_network, write_fake_release

    checkout = tmp_path / "checkout"
    monkeypatch.setattr(prepare_module, "from_checkout", lambda rel: str((checkout / rel).resolve()))
    monkeypatch.delenv("NORMBENCH_DATA", raising=False)
    no_network(monkeypatch)
    assert data_main(["cifar10-subset"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    release = checkout / "data" / "cifar10" / "cifar-10-batches-py"
    assert f"extract it so that {release} holds data_batch_1..5" in line, line
    assert str(tmp_path / "shared") not in line

    fake_md5s(monkeypatch, write_fake_release(checkout / "data" / "cifar10"))  # what the line says to do
    monkeypatch.setattr(cifar_prepare, "TRAIN_PER_CLASS", 10)
    monkeypatch.setattr(cifar_prepare, "TEST_PER_CLASS", 4)
    assert data_main(["cifar10-subset"]) == 0
    assert f"cifar10-subset: made from {release}" in capsys.readouterr().out
    assert (tmp_path / "shared" / "data" / "cifar10-subset" / "cifar-10-batches-py" / "test_batch").is_file()


# ---------------------------------------------------------------------------------------------
# The blank-pair warning, once


@fault(
    "blank translation pairs in a sweep of two jobs on the same files",
    "the warning once, not once per job",
    "result",
)
def test_the_blank_pair_warning_is_printed_once_in_a_sweep(tmp_path, monkeypatch, capsys) -> None:
    from tests.test_file_faults import MT

    root = write_files(tmp_path / "data", {"train.de": "ab cd\n\nef gh\n", "train.en": "x y\nz w\nv u\n"})
    args = ("-m", *MT, "max_steps=1", f"dataset.root={root}", "seed=0,1", f"hydra.sweep.dir={tmp_path / 'sweep'}")
    code, err = run_cli_inprocess(monkeypatch, capsys, *args)
    assert code == 0, err
    blank = [line for line in err.splitlines() if "with a blank side" in line]
    assert blank == [
        f"normbench: warning: {root / 'train.de'} / {root / 'train.en'}: dropped 1 of 3 training pairs: 1 with a "
        "blank side (line 2)"
    ]
