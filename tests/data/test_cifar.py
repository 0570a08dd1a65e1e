"""The CIFAR-10 layout, the synthetic task, augmentation, the real subset, bad files (one line
naming the file, before anything is written) and pickles that try to run code."""

from __future__ import annotations

import os
import pickle
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from normbench.base.errors import ConfigError, DatasetMissingError
from normbench.data.augment import random_crop, random_flip
from normbench.data.cifar import load_cifar10, make_synthetic_images, write_cifar_batches
from tests.conftest import CIFAR_SUBSET
from tests.test_validate import run_cli_inprocess

FOLDER = "cifar-10-batches-py"


def test_written_batches_read_back_identical(tmp_path) -> None:
    train = make_synthetic_images(50, seed=0)
    test = make_synthetic_images(20, seed=1)
    write_cifar_batches(tmp_path, train, test)
    x, y, classes = load_cifar10(tmp_path, train=True, verify_checksums=False)
    np.testing.assert_array_equal(x.permute(0, 2, 3, 1).numpy(), train[0])
    np.testing.assert_array_equal(y.numpy(), train[1])
    xt, yt, _ = load_cifar10(tmp_path, train=False, verify_checksums=False)
    np.testing.assert_array_equal(xt.permute(0, 2, 3, 1).numpy(), test[0])
    assert x.dtype == torch.uint8 and x.shape == (50, 3, 32, 32) and len(classes) == 10


def test_checksums_reject_a_copy_unless_told(tmp_path) -> None:
    write_cifar_batches(tmp_path, make_synthetic_images(10, 0), make_synthetic_images(10, 1))
    with pytest.raises(DatasetMissingError) as e:
        load_cifar10(tmp_path, train=True)
    msg = str(e.value)  # the cause first (the MD5 mismatch), then the remedy; not "missing or unreadable"
    assert "\n" not in msg and "missing" not in msg
    assert msg.index("MD5 sums differ") < msg.index("dataset.verify_checksums=false"), msg
    head = f"CIFAR-10 under dataset.root={str(tmp_path)!r}: the MD5 sums differ from the original release for "
    assert msg.startswith(head + "data_batch_1"), msg


def test_missing_data_names_root_and_remedies(tmp_path) -> None:
    with pytest.raises(DatasetMissingError) as e:
        load_cifar10(tmp_path / "nowhere", train=True)
    msg = str(e.value)
    assert str(tmp_path / "nowhere") in msg and "dataset.download=true" in msg and "dataset=synthetic_images" in msg
    assert msg.index("missing: ") < msg.index("pass dataset.root"), msg  # the cause before the remedies


def test_augmentation_shapes_and_variety() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.arange(64 * 3 * 32 * 32, dtype=torch.int64).remainder(251).to(torch.uint8).view(64, 3, 32, 32)
    x = x[:1].expand(64, -1, -1, -1).contiguous()  # 64 copies of one image
    y = random_flip(random_crop(x, 4, g), g)
    assert y.shape == x.shape and y.dtype == torch.uint8
    distinct = {bytes(img.numpy().tobytes()) for img in y}
    assert len(distinct) > 32  # 81 offsets x 2 flips: copies of one image must come out different


def test_random_crop_is_a_shifted_window() -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randint(1, 255, (16, 3, 32, 32), dtype=torch.uint8)
    y = random_crop(x, 4, g)
    padded = torch.nn.functional.pad(x, (4, 4, 4, 4))
    for i in range(16):  # every crop equals some 32x32 window of the zero-padded image
        assert any(torch.equal(y[i], padded[i, :, a : a + 32, b : b + 32]) for a in range(9) for b in range(9))


def test_synthetic_task_is_balanced_and_deterministic() -> None:
    a, la = make_synthetic_images(100, seed=5)
    b, lb = make_synthetic_images(100, seed=5)
    np.testing.assert_array_equal(a, b)
    assert np.bincount(la, minlength=10).tolist() == [10] * 10


@pytest.mark.skipif(not (CIFAR_SUBSET / "cifar-10-batches-py").is_dir(), reason="shared CIFAR-10 subset absent")
def test_real_subset_loads_with_checksums_off() -> None:
    x, y, classes = load_cifar10(CIFAR_SUBSET, train=True, verify_checksums=False)
    assert x.shape == (10_000, 3, 32, 32) and classes[0] == "airplane"
    assert torch.bincount(y).tolist() == [1000] * 10


@pytest.mark.skipif(not (CIFAR_SUBSET / "cifar-10-batches-py").is_dir(), reason="shared CIFAR-10 subset absent")
def test_real_subset_reads_as_torchvision_reads_it(monkeypatch) -> None:
    """The restricted reader gives torchvision's pixels and labels (its README's recipe: the MD5
    check bypassed)."""
    import torchvision.datasets.cifar as tv_cifar

    monkeypatch.setattr(tv_cifar, "check_integrity", lambda *a, **kw: True)
    for train in (True, False):
        x, y, classes = load_cifar10(CIFAR_SUBSET, train=train, verify_checksums=False)
        ref = tv_cifar.CIFAR10(str(CIFAR_SUBSET), train=train, download=False)
        np.testing.assert_array_equal(x.permute(0, 2, 3, 1).numpy(), ref.data)
        assert y.tolist() == ref.targets and classes == ref.classes


# ---------------------------------------------------------------------------------------------
# Bad files: one line naming the file


def _write_small(root: Path) -> Path:
    """10 training images (5 files of 2) and 4 test images."""
    return write_cifar_batches(root, make_synthetic_images(10, seed=0), make_synthetic_images(4, seed=1))


def _edit(name: str, change: Callable[[dict], None]) -> Callable[[Path], None]:
    def apply(folder: Path) -> None:
        with open(folder / name, "rb") as f:
            batch = pickle.load(f)
        change(batch)
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)

    return apply


def _truncate(name: str) -> Callable[[Path], None]:
    return lambda folder: (folder / name).write_bytes((folder / name).read_bytes()[:300])


BAD_FILES = {
    "fewer-labels": ("data_batch_2", _edit("data_batch_2", lambda b: b["labels"].pop()), "has 1 labels for 2 images"),
    "label-too-large": (
        "data_batch_3",
        _edit("data_batch_3", lambda b: b["labels"].__setitem__(1, 10)),
        "label 10 of image 1 is outside 0..9",
    ),
    "negative-label": (
        "data_batch_1",
        _edit("data_batch_1", lambda b: b["labels"].__setitem__(0, -1)),
        "label -1 of image 0 is outside 0..9",
    ),
    "3-class-meta": (
        "batches.meta",
        _edit("batches.meta", lambda m: m.__setitem__("label_names", ["cat", "dog", "ship"])),
        "names 3 classes ('cat', 'dog', 'ship'); CIFAR-10 has 10",
    ),
    "truncated": ("data_batch_1", _truncate("data_batch_1"), "is not a readable CIFAR-10 python file ("),
    "garbage": (
        "data_batch_5",
        lambda folder: (folder / "data_batch_5").write_bytes(b"<html><body>404 Not Found</body></html>\n"),
        "is not a readable CIFAR-10 python file (UnpicklingError: invalid load key, '<'.)",
    ),
    "wrong-width": (
        "data_batch_4",
        _edit("data_batch_4", lambda b: b.__setitem__("data", b["data"][:, :3000])),
        "data is a uint8 array of shape (2, 3000); expected uint8 of shape (N, 3072)",
    ),
    "float-pixels": (
        "data_batch_4",
        _edit("data_batch_4", lambda b: b.__setitem__("data", b["data"].astype(np.float32))),
        "data is a float32 array",
    ),
    "cifar100-labels": (
        "data_batch_2",
        _edit("data_batch_2", lambda b: b.__setitem__("fine_labels", b.pop("labels"))),
        "has no labels (keys: batch_label, data, filenames, fine_labels)",
    ),
}


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_a_bad_file_is_one_error_naming_it(tmp_path, case: str) -> None:
    name, damage, message = BAD_FILES[case]
    folder = _write_small(tmp_path)
    damage(folder)
    with pytest.raises(ConfigError) as e:
        load_cifar10(tmp_path, train=True, verify_checksums=False)
    text = str(e.value)
    assert str(folder / name) in text and message in text and "\n" not in text


@pytest.mark.parametrize("case", ["fewer-labels", "label-too-large", "3-class-meta", "truncated", "wrong-width"])
def test_a_bad_file_stops_the_run_before_anything_is_written(tmp_path, monkeypatch, capsys, case: str) -> None:
    name, damage, message = BAD_FILES[case]
    data = tmp_path / "data"
    damage(_write_small(data))
    out = tmp_path / "run"
    args = (
        "dataset=cifar10",
        f"dataset.root={data}",
        "dataset.verify_checksums=false",
        "hardware=cpu",
        "batch_size=2",
        "max_steps=1",
        "logger.progress_bar=false",  # W&B stays on (offline): the error comes before its run exists
        f"hydra.run.dir={out}",
    )
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *args)
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("normbench: error: ") and str(data / FOLDER / name) in lines[0]
    assert message in lines[0] and "Traceback" not in stdout + stderr
    assert not out.exists()  # no run directory, no W&B run


# ---------------------------------------------------------------------------------------------
# A pickle that runs code is refused


class _RunsACommand:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("name", ["data_batch_1", "batches.meta"])
def test_a_pickle_that_runs_code_is_refused_and_runs_nothing(tmp_path, name: str) -> None:
    folder = _write_small(tmp_path)
    marker = tmp_path / "ran"
    with open(folder / name, "rb") as f:
        content = pickle.load(f)
    content["label_names" if name == "batches.meta" else "labels"] = _RunsACommand(marker)
    with open(folder / name, "wb") as f:
        pickle.dump(content, f, protocol=2)
    with pytest.raises(ConfigError) as e:
        load_cifar10(tmp_path, train=True, verify_checksums=False)
    assert not marker.exists()  # the command did not run
    text = str(e.value)
    assert "\n" not in text and str(folder / name) in text
    assert f"asks for {os.system.__module__}.system while it loads" in text and "nothing was run" in text


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_arrays_of_every_pickle_protocol_read_back(tmp_path, protocol: int) -> None:
    """What the restricted reader admits covers numpy's writers: protocol 2 (bytes through
    _codecs.encode), 4, and 5 (_frombuffer); keys as bytes (Python 2 files read with bytes)."""
    images, labels = make_synthetic_images(10, seed=3)
    folder = _write_small(tmp_path)
    data = np.ascontiguousarray(images.transpose(0, 3, 1, 2)).reshape(10, -1)
    for k in range(1, 6):
        part = slice(2 * (k - 1), 2 * k)
        batch = {b"data": data[part], b"labels": np.asarray(labels[part]), b"batch_label": b"x"}
        with open(folder / f"data_batch_{k}", "wb") as f:
            pickle.dump(batch, f, protocol=protocol)
    x, y, _ = load_cifar10(tmp_path, train=True, verify_checksums=False)
    np.testing.assert_array_equal(x.permute(0, 2, 3, 1).numpy(), images)
    assert y.tolist() == labels.tolist()


def test_the_shared_subset_copy_still_loads_after_the_checks(tmp_path) -> None:
    if not (CIFAR_SUBSET / FOLDER).is_dir():
        pytest.skip("shared CIFAR-10 subset absent")
    shutil.copytree(CIFAR_SUBSET / FOLDER, tmp_path / FOLDER)
    x, y, classes = load_cifar10(tmp_path, train=False, verify_checksums=False)
    assert x.shape == (2000, 3, 32, 32) and torch.bincount(y).tolist() == [200] * 10 and len(classes) == 10
