"""CIFAR-10 files → uint8 tensors; and a synthetic CIFAR-shaped task written in the same on-disk
layout (``cifar-10-batches-py``) and read back through the same loader, so that every synthetic
run exercises the real path (the data sets are registered in `normbench.tasks.classification`).
The files are pickles: they are read with a restricted unpickler and checked file by file
(`normbench.data.cifar_files`)."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

from normbench.data.cifar_files import (
    BASE_FOLDER,
    META_FILE,
    TEST_FILES,
    TRAIN_FILES,
    DataFileError,
    check_files,
    read_batch,
    read_meta,
)
from normbench.data.cifar_identity import check_identity

LABEL_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def load_cifar10(
    root: str | Path, train: bool, download: bool = False, verify_checksums: bool = True
) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """One split as (uint8 images (N, 3, 32, 32), int64 labels (N,), class names), from the
    ``cifar-10-batches-py`` files under ``root``, each read with a restricted unpickler and
    checked (`normbench.data.cifar_files`): a bad file is one error line naming it."""
    root = Path(root).expanduser()
    names = TRAIN_FILES if train else TEST_FILES
    check_files(root, [*names, META_FILE], download, verify_checksums)
    folder = root / BASE_FOLDER
    classes = read_meta(folder / META_FILE)
    parts = [read_batch(folder / name, len(classes)) for name in names]
    images = np.concatenate([x for x, _ in parts])
    labels = np.concatenate([y for _, y in parts])
    if len(images) == 0:
        raise DataFileError(
            f"{folder}: the {'training' if train else 'test'} files ({', '.join(names)}) hold no images"
        )
    return torch.from_numpy(np.ascontiguousarray(images)), torch.from_numpy(labels), classes


def load_cifar10_splits(
    root: str | Path, download: bool = False, verify_checksums: bool = True
) -> tuple[tuple[torch.Tensor, torch.Tensor, list[str]], tuple[torch.Tensor, torch.Tensor, list[str]]]:
    """The train and test splits (`load_cifar10`), and, unless the release's MD5s were verified,
    the checks of which files these are (`normbench.data.cifar_identity`: a known checksum list,
    no two batches the same, the test images held out, no training image with two labels),
    whatever ``verify_checksums`` says."""
    train = load_cifar10(root, True, download, verify_checksums)
    test = load_cifar10(root, False, download, verify_checksums)
    if not verify_checksums:  # verified: the files are the release's
        folder = Path(root).expanduser() / BASE_FOLDER
        check_identity(folder, TRAIN_FILES, TEST_FILES, train[0].numpy(), test[0].numpy(), train[1].numpy())
    return train, test


def write_cifar_batches(
    root: str | Path,
    train: tuple[np.ndarray, np.ndarray],
    test: tuple[np.ndarray, np.ndarray],
    label_names: list[str] = LABEL_NAMES,
    num_train_batches: int = 5,
) -> Path:
    """Write images (N, 32, 32, 3) uint8 and labels in the ``cifar-10-batches-py`` layout."""
    folder = Path(root) / BASE_FOLDER
    folder.mkdir(parents=True, exist_ok=True)

    def dump(name: str, images: np.ndarray, labels: np.ndarray) -> None:
        data = np.ascontiguousarray(images.transpose(0, 3, 1, 2)).reshape(len(images), -1)
        batch = {
            "batch_label": name,
            "labels": [int(v) for v in labels],
            "data": data.astype(np.uint8),
            "filenames": [f"{name}_{i:05d}.png" for i in range(len(images))],
        }
        tmp = folder / f".{name}.tmp"
        with open(tmp, "wb") as f:
            pickle.dump(batch, f, protocol=2)
        tmp.replace(folder / name)

    splits = np.array_split(np.arange(len(train[0])), num_train_batches)
    for k, idx in enumerate(splits, start=1):
        dump(f"data_batch_{k}", train[0][idx], train[1][idx])
    dump("test_batch", *test)
    meta = {"label_names": label_names, "num_cases_per_batch": len(splits[0]), "num_vis": 3072}
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump(meta, f, protocol=2)
    return folder


def make_synthetic_images(
    num: int, seed: int, num_classes: int = 10, noise: float = 48.0, pattern_seed: int = 1234
) -> tuple[np.ndarray, np.ndarray]:
    """A learnable CIFAR-shaped task: each class is a smooth random colour pattern (shared by
    the train and test splits through ``pattern_seed``), shifted by up to ±3 pixels per image,
    under Gaussian pixel noise of std ``noise`` (in 0–255 units). Returns (N, 32, 32, 3) uint8
    images and int64 labels, balanced over classes."""
    patterns = torch.randn(num_classes, 3, 4, 4, generator=torch.Generator().manual_seed(pattern_seed))
    patterns = torch.nn.functional.interpolate(patterns, size=(32, 32), mode="bicubic", align_corners=False)
    g = torch.Generator().manual_seed(seed)
    labels = torch.arange(num) % num_classes
    labels = labels[torch.randperm(num, generator=g)]
    shifts = torch.randint(-3, 4, (num, 2), generator=g)
    images = torch.empty(num, 3, 32, 32)
    for i in range(num):
        images[i] = torch.roll(patterns[labels[i]], shifts=tuple(shifts[i].tolist()), dims=(1, 2))
    images = 128 + 50 * images + noise * torch.randn(images.shape, generator=g)
    images = images.round().clamp(0, 255).to(torch.uint8)
    return images.permute(0, 2, 3, 1).numpy(), labels.numpy()
