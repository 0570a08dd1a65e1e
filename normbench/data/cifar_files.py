"""The CIFAR-10 python files (``cifar-10-batches-py``), read safely and checked.

The files are pickles (Krizhevsky 2009, "CIFAR-10 python version"): ``data_batch_1`` ...
``data_batch_5`` and ``test_batch`` each hold a dict with ``data`` (uint8 array N x 3072: the
1024 red, then green, then blue values of a 32 x 32 image, row-major) and ``labels`` (N ints in
0..9); ``batches.meta`` holds ``label_names`` (the 10 class names).

A pickle can call any importable function while it loads (a ``__reduce__`` returning
``os.system``), so the files are read with `CifarUnpickler`, whose ``find_class`` admits only
what these files reference: numpy's array reconstruction (``_reconstruct``, ``ndarray``,
``dtype``, ``scalar``; ``_frombuffer`` for protocol 5), ``list`` / ``dict`` / ``bytes`` /
``bytearray``, and ``_codecs.encode`` with latin-1 (how Python 3 writes bytes at protocol 2).
Anything else is refused before it is called. The original files, the shared subset and
`normbench.data.cifar.write_cifar_batches`'s files need nothing more.

Each file is checked as it is read, and every problem is one `DataFileError` naming the file:
not a readable pickle (truncated, garbage, a refused reference), no ``data`` / ``labels``, an
array that is not N x 3072 uint8, a label count that differs from the image count, a label
outside the classes of ``batches.meta``, a ``batches.meta`` that does not name 10 classes.
"""

from __future__ import annotations

import codecs
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from normbench.base.errors import DataFileError, DatasetMissingError

BASE_FOLDER = "cifar-10-batches-py"
META_FILE = "batches.meta"
TRAIN_FILES = [f"data_batch_{k}" for k in range(1, 6)]
TEST_FILES = ["test_batch"]
NUM_CLASSES = 10
IMAGE_VALUES = 3 * 32 * 32


def _latin1_encode(obj: str, encoding: str = "utf-8", errors: str = "strict") -> bytes:
    """``_codecs.encode`` as protocol-2 pickles of bytes call it: latin-1 only."""
    if codecs.lookup(encoding).name != "iso8859-1":
        raise RefusedReference(f"it asks for _codecs.encode with {encoding!r}, not latin-1")
    return codecs.encode(obj, "latin-1", errors)


def _allowed() -> dict[tuple[str, str], Any]:
    try:  # numpy >= 2
        from numpy._core import multiarray, numeric
    except ImportError:  # numpy 1.x
        from numpy.core import multiarray, numeric  # type: ignore[no-redef]

    table: dict[tuple[str, str], Any] = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}
    for package in ("numpy.core", "numpy._core"):  # numpy 1.x writes the first, 2.x the second
        table[(f"{package}.multiarray", "_reconstruct")] = multiarray._reconstruct
        table[(f"{package}.multiarray", "scalar")] = multiarray.scalar
        table[(f"{package}.numeric", "_frombuffer")] = numeric._frombuffer
    for module in ("builtins", "__builtin__"):  # __builtin__: a Python 2 pickle
        for name, obj in (("list", list), ("dict", dict), ("bytes", bytes), ("bytearray", bytearray)):
            table[(module, name)] = obj
    table[("_codecs", "encode")] = _latin1_encode
    return table


class RefusedReference(pickle.UnpicklingError):
    """A pickle asked for a function or class that CIFAR-10 files never reference."""


class CifarUnpickler(pickle.Unpickler):
    """An unpickler that builds numpy arrays, lists, dicts, strings and numbers, and nothing else."""

    def find_class(self, module: str, name: str) -> Any:
        found = _allowed().get((module, name))
        if found is None:
            raise RefusedReference(
                f"it asks for {module}.{name} while it loads, which no CIFAR-10 file needs; refused, nothing was run"
            )
        return found


def _one_line(e: BaseException) -> str:
    text = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {text[:200]}" if text else type(e).__name__


def read_pickle(path: Path) -> dict[str, Any]:
    """The dict pickled in ``path`` (string keys), read with `CifarUnpickler`."""
    try:
        with open(path, "rb") as f:
            obj = CifarUnpickler(f, encoding="latin1").load()
    except RefusedReference as e:
        raise DataFileError(f"{path} is not a CIFAR-10 python file: {e}") from None
    except Exception as e:  # truncated (EOFError), garbage, arrays that do not build
        raise DataFileError(f"{path} is not a readable CIFAR-10 python file ({_one_line(e)})") from None
    if not isinstance(obj, dict):
        raise DataFileError(f"{path} holds a {type(obj).__name__}, not the dict of a CIFAR-10 python file")
    return {k.decode("latin1") if isinstance(k, bytes) else str(k): v for k, v in obj.items()}


def read_meta(path: Path) -> list[str]:
    """The class names of ``batches.meta``: exactly 10 distinct non-empty names."""
    meta = read_pickle(path)
    names = meta.get("label_names")
    if not isinstance(names, (list, tuple)):
        raise DataFileError(f"{path} has no list label_names (keys: {', '.join(sorted(meta)) or 'none'})")
    names = [n.decode("latin1") if isinstance(n, bytes) else n for n in names]
    if len(names) != NUM_CLASSES or len(set(names)) != NUM_CLASSES or not all(isinstance(n, str) and n for n in names):
        shown = ", ".join(map(repr, names[:12])) + (", ..." if len(names) > 12 else "")
        raise DataFileError(f"{path} names {len(names)} classes ({shown}); CIFAR-10 has {NUM_CLASSES} distinct names")
    return names


def read_batch(path: Path, num_classes: int = NUM_CLASSES) -> tuple[np.ndarray, np.ndarray]:
    """One batch file as (uint8 images (N, 3, 32, 32), int64 labels (N,)), checked."""
    batch = read_pickle(path)
    missing = [k for k in ("data", "labels") if k not in batch]
    if missing:
        keys = ", ".join(sorted(batch)) or "none"
        raise DataFileError(f"{path} has no {' and no '.join(missing)} (keys: {keys}); not a CIFAR-10 batch")
    data = batch["data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != IMAGE_VALUES:
        what = f"a {data.dtype} array of shape {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise DataFileError(
            f"{path}: data is {what}; expected uint8 of shape (N, {IMAGE_VALUES}), 3 x 32 x 32 per image"
        )
    try:
        labels = np.asarray(batch["labels"])
    except Exception as e:
        raise DataFileError(f"{path}: labels are not a list of integers ({_one_line(e)})") from None
    if labels.ndim != 1 or (len(labels) and labels.dtype.kind not in "iu"):
        raise DataFileError(f"{path}: labels are {labels.dtype} of shape {labels.shape}; expected N integers")
    if len(labels) != len(data):
        raise DataFileError(f"{path} has {len(labels)} labels for {len(data)} images")
    if len(data) == 0:
        raise DataFileError(f"{path} holds no images (an emptied batch?): every CIFAR-10 batch file holds some; "
                            "restore the original file")  # fmt: skip
    bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
    if len(bad):
        i = int(bad[0])
        raise DataFileError(
            f"{path}: label {int(labels[i])} of image {i} is outside 0..{num_classes - 1} "
            f"({len(bad)} such labels; {META_FILE} names {num_classes} classes)"
        )
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


MD5_DIFFERS = "the MD5 sums differ from the original release"


def _missing_error(root: Path, verify_checksums: bool, reason: str) -> DatasetMissingError:
    """The error for CIFAR-10 files that cannot be used, its cause first: an MD5 mismatch (a
    subset or re-encoded copy), missing files, or a failed download."""
    where = f"dataset.root={str(root)!r}"
    if reason.startswith(MD5_DIFFERS):
        return DatasetMissingError(
            f"CIFAR-10 under {where}: {reason}; a subset or re-encoded copy (such as ../shared/data/cifar10-subset) "
            "needs dataset.verify_checksums=false, the original release dataset.download=true (needs network)"
        )
    hint = "dataset.download=true (needs network)"
    if verify_checksums:
        hint += ", dataset.verify_checksums=false (for a subset or re-encoded copy)"
    return DatasetMissingError(
        f"CIFAR-10 cannot be read under {where} ({reason}; expected {root / BASE_FOLDER}); pass "
        f"dataset.root=<folder holding {BASE_FOLDER}>, {hint}, or dataset=synthetic_images for offline runs"
    )


def check_files(root: Path, names: list[str], download: bool, verify_checksums: bool) -> None:
    """The files are there (downloaded first if asked and absent) and, if ``verify_checksums``,
    have the MD5 sums of the original release (torchvision's list). torchvision (~2 s to import, with
    torch._dynamo) only where a checksum or a download needs it."""
    folder = root / BASE_FOLDER

    def problems() -> list[str]:
        missing = [n for n in names if not (folder / n).is_file()]
        if missing:
            return [f"missing: {', '.join(missing)}"]
        if not verify_checksums:
            return []
        from torchvision.datasets import CIFAR10
        from torchvision.datasets.utils import check_integrity

        md5 = {**dict(CIFAR10.train_list + CIFAR10.test_list), META_FILE: CIFAR10.meta["md5"]}
        changed = [n for n in names if not check_integrity(str(folder / n), md5[n])]
        return [f"{MD5_DIFFERS} for {', '.join(changed)}"] if changed else []

    if download and problems():
        from torchvision.datasets import CIFAR10
        from torchvision.datasets.utils import download_and_extract_archive

        try:
            download_and_extract_archive(CIFAR10.url, str(root), filename=CIFAR10.filename, md5=CIFAR10.tgz_md5)
        except Exception as e:  # no network, a bad archive
            raise _missing_error(root, verify_checksums, f"download failed: {_one_line(e)}") from None
    found = problems()
    if found:
        raise _missing_error(root, verify_checksums, found[0])
