"""CIFAR-10 for `normbench-data`: the original release, and the class-balanced subset of the CPU presets.

``cifar10``: torchvision's download (``https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz``,
checked against torchvision's MD5 of the archive, then of every extracted file), or a copy of the
release the user has (``--from``: a folder holding ``cifar-10-batches-py/``, that folder itself,
or ``cifar-10-python.tar.gz``), into ``<root>/cifar10/cifar-10-batches-py`` (the full presets'
``dataset.root`` is ``<root>/cifar10``).

``cifar10-subset`` (`build_subset`), made deterministically from the original python files:

- Selection: the first 1,000 training images of each class in file order (``data_batch_1`` to
  ``data_batch_5``, each file from its first image), and the first 200 test images of each class
  in ``test_batch``'s order: 10,000 / 2,000 images, 1,000 / 200 per class.
- Batches: ``data_batch_k`` (k = 1..5) holds the selected images ``(k-1)*200`` to ``k*200-1`` of
  every class (200 per class); each batch, then ``test_batch``, is shuffled with one
  ``numpy.random.default_rng(0)`` drawn in that order, so labels are mixed.
- Files: the ``cifar-10-batches-py`` pickles (protocol 2; ``data`` uint8 N x 3072, ``labels``,
  ``filenames`` as in the original, ``batch_label``) and ``batches.meta``, the layout
  `normbench.data.cifar.load_cifar10` and torchvision read; MD5s differ from the release, so the
  presets read it with ``dataset.verify_checksums=false``. The same input gives the same bytes.

The copy in ``../shared/data/cifar10-subset`` follows the same counts and batch rule but was
decoded from JPEG re-encodings of CIFAR-10 (another source, other images per class), so its pixels
and its numbers differ slightly from a subset made here.
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from normbench.data.cifar_files import (
    BASE_FOLDER,
    META_FILE,
    TEST_FILES,
    TRAIN_FILES,
    read_batch,
    read_meta,
    read_pickle,
)
from normbench.data.prepare_io import PrepareError, Report, download_errors, extract_archive, md5, require_network

URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
ARCHIVE = "cifar-10-python.tar.gz"
ARCHIVE_MD5 = "c58f30108f718f92721af3b95e74349a"
TRAIN_PER_CLASS = 1000
TEST_PER_CLASS = 200
NUM_BATCHES = 5
SHUFFLE_SEED = 0
RULE = (
    "the first {train} training images of each class in file order (data_batch_1..5) and the first {test} "
    "test images of each class (test_batch); data_batch_k holds images (k-1)*{per}..k*{per}-1 of every "
    "class; each batch, then test_batch, shuffled with numpy.random.default_rng({seed})"
)


def by_hand(release: Path) -> str:
    """What to do without a network (``release``: where ``cifar10`` goes, ``<root>/cifar10``)."""
    return (
        f"fetch {URL} by hand (MD5 {ARCHIVE_MD5}) and extract it so that {release / BASE_FOLDER} holds "
        f"data_batch_1..5, test_batch and batches.meta, or pass --from <the folder holding the archive>"
    )


def release_md5s() -> dict[str, str]:
    """The MD5 of every file of the release, as torchvision lists them."""
    from torchvision.datasets import CIFAR10

    return {**dict(CIFAR10.train_list + CIFAR10.test_list), META_FILE: CIFAR10.meta["md5"]}


def _find_release(source: Path) -> Path:
    """The archive or ``cifar-10-batches-py`` folder in ``source`` (see the module doc)."""
    source = source.expanduser()
    for candidate in (source, source / ARCHIVE, source / BASE_FOLDER):
        if candidate.is_file() and candidate.name.endswith((".tar.gz", ".tgz")):
            return candidate
        if candidate.is_dir() and (candidate / META_FILE).is_file():
            return candidate
    raise PrepareError(
        f"--from {source}: neither {ARCHIVE} nor a {BASE_FOLDER}/ folder with {META_FILE} found there; "
        f"pass the folder that holds one of them"
    )


def _extract(archive: Path, into: Path) -> None:
    extract_archive(archive, into, lambda m: m.name.startswith(f"{BASE_FOLDER}/") and m.isfile())
    if not (into / BASE_FOLDER).is_dir():
        raise PrepareError(f"{archive} holds no {BASE_FOLDER}/ files; not the CIFAR-10 python release")


def fetch_release(into: Path, source: Path | None, target: Path) -> Path:
    """The release's ``cifar-10-batches-py`` under ``into`` (downloaded, or copied / extracted from
    ``source``), every file checked against its MD5; returns that folder."""
    folder = into / BASE_FOLDER
    if source is None:
        require_network(URL, by_hand(target))
        from torchvision.datasets.utils import download_and_extract_archive

        with download_errors(by_hand(target)):
            download_and_extract_archive(URL, str(into), filename=ARCHIVE, md5=ARCHIVE_MD5, remove_finished=True)
    else:
        found = _find_release(source)
        if found.is_file():
            _extract(found, into)
        else:
            shutil.copytree(found, folder, dirs_exist_ok=False)
    check_release(folder)
    return folder


def check_release(folder: Path) -> None:
    """Raise `PrepareError` unless ``folder`` holds every file of the release with its MD5."""
    expected = release_md5s()
    missing = [n for n in expected if not (folder / n).is_file()]
    if missing:
        raise PrepareError(f"{folder}: {', '.join(missing)} missing; not the complete CIFAR-10 python release")
    changed = [n for n, digest in expected.items() if md5(folder / n) != digest]
    if changed:
        raise PrepareError(
            f"{', '.join(changed)} differ from the original release (MD5); the full presets check it "
            f"(dataset.verify_checksums=true): use the original files"
        )


def prepare_cifar10(staging: Path, source: Path | None, target: Path) -> Report:
    """``cifar10`` into ``staging`` (which becomes ``target``)."""
    folder = fetch_release(staging, source, target)
    report = Report("cifar10", staging)
    for split, names in (("train", TRAIN_FILES), ("test", TEST_FILES)):
        report.counts[split] = sum(len(read_batch(folder / n)[1]) for n in names)
    report.notes.append("MD5 of every file equals torchvision's list for the original release")
    return report


# --- the subset --------------------------------------------------------------------------------


def _read_split(folder: Path, names: list[str]) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Images (N, 3072) uint8, labels and file names of ``names`` in file order, each file checked."""
    images, labels, filenames = [], [], []
    for name in names:
        x, y = read_batch(folder / name)
        raw = read_pickle(folder / name).get("filenames")
        files = [f.decode("latin1") if isinstance(f, bytes) else str(f) for f in raw] if raw is not None else []
        if len(files) != len(y):
            files = [f"{name}/{i:05d}" for i in range(len(y))]
        images.append(x.reshape(len(x), -1))
        labels.append(y)
        filenames += files
    return np.concatenate(images), np.concatenate(labels), filenames


def first_per_class(labels: np.ndarray, per_class: int, num_classes: int, what: str) -> list[np.ndarray]:
    """For each class, the indices of its first ``per_class`` images in file order."""
    out = []
    for c in range(num_classes):
        idx = np.flatnonzero(labels == c)[:per_class]
        if len(idx) < per_class:
            raise PrepareError(f"the {what} files hold {len(idx)} images of class {c}; the subset needs {per_class}")
        out.append(idx)
    return out


def _dump(path: Path, batch_label: str, images: np.ndarray, labels: np.ndarray, files: list[str]) -> None:
    batch: dict[str, Any] = {
        "batch_label": batch_label,
        "labels": [int(v) for v in labels],
        "data": np.ascontiguousarray(images, dtype=np.uint8),
        "filenames": files,
    }
    with open(path, "wb") as f:
        pickle.dump(batch, f, protocol=2)


def build_subset(
    original: Path,
    out_root: Path,
    train_per_class: int = TRAIN_PER_CLASS,
    test_per_class: int = TEST_PER_CLASS,
    num_batches: int = NUM_BATCHES,
    seed: int = SHUFFLE_SEED,
) -> Report:
    """Write the class-balanced subset of the ``cifar-10-batches-py`` folder ``original`` into
    ``out_root/cifar-10-batches-py`` (the rule: the module doc and `RULE`)."""
    if train_per_class % num_batches:
        raise PrepareError(f"{train_per_class} training images per class do not split into {num_batches} batches")
    names = read_meta(original / META_FILE)
    classes = len(names)
    folder = out_root / BASE_FOLDER
    folder.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    per = train_per_class // num_batches
    x, y, files = _read_split(original, TRAIN_FILES)
    chosen = first_per_class(y, train_per_class, classes, "training")
    for k in range(num_batches):
        idx = np.concatenate([c[k * per : (k + 1) * per] for c in chosen])
        idx = idx[rng.permutation(len(idx))]
        label = f"training batch {k + 1} of {num_batches} (normbench cifar10-subset)"
        _dump(folder / TRAIN_FILES[k], label, x[idx], y[idx], [files[i] for i in idx])
    x, y, files = _read_split(original, TEST_FILES)
    idx = np.concatenate(first_per_class(y, test_per_class, classes, "test"))
    idx = idx[rng.permutation(len(idx))]
    _dump(
        folder / TEST_FILES[0],
        "testing batch 1 of 1 (normbench cifar10-subset)",
        x[idx],
        y[idx],
        [files[i] for i in idx],
    )
    meta = {"label_names": names, "num_cases_per_batch": per * classes, "num_vis": 3072}
    with open(folder / META_FILE, "wb") as f:
        pickle.dump(meta, f, protocol=2)
    rule = RULE.format(train=train_per_class, test=test_per_class, per=per, seed=seed)
    (out_root / "README.md").write_text(_readme(rule, names, train_per_class, test_per_class), encoding="utf-8")
    report = Report("cifar10-subset", out_root, {"train": train_per_class * classes, "test": test_per_class * classes})
    report.notes += [
        f"rule: {rule}",
        f"per class: {train_per_class:,} train / {test_per_class:,} test; read with dataset.verify_checksums=false",
        "from the original CIFAR-10 pixels: the copy in ../shared/data/cifar10-subset was decoded from JPEGs "
        "(other images, lossy pixels), so numbers from the two differ slightly",
    ]
    return report


def _readme(rule: str, names: list[str], train: int, test: int) -> str:
    rows = "\n".join(f"| {i} | {n} | {train:,} | {test:,} |" for i, n in enumerate(names))
    return f"""# CIFAR-10 subset ({train * len(names):,} train / {test * len(names):,} test, class-balanced)

Made by `normbench-data cifar10-subset` from the original CIFAR-10 python files
(Krizhevsky 2009), in the `cifar-10-batches-py` layout that `normbench.data.cifar.load_cifar10`
and `torchvision.datasets.CIFAR10` read. Deterministic: the same input gives the same bytes
(`SHA256SUMS`).

Rule: {rule}.

The pixels are the original ones. The copy in `../shared/data/cifar10-subset` was decoded from
lossy JPEG re-encodings of CIFAR-10 (another source, other images per class), so results on the
two differ slightly. The MD5s differ from the full release: read it with
`dataset.verify_checksums=false` (the `*_cpu` presets do).

| label | class | train | test |
|------:|-------|------:|-----:|
{rows}
"""


def prepare_subset(
    staging: Path, source: Path | None, release_folder: Path | None, target: Path, release_home: Path
) -> Report:
    """``cifar10-subset`` into ``staging``: from ``release_folder`` (an original
    ``cifar-10-batches-py`` already prepared) when given, else from ``source`` or a download, fetched
    into ``staging/.release`` and removed once the subset is written. ``release_home``: the
    ``cifar10`` folder where `normbench.data.prepare` looks for a prepared release, which the
    offline hint names."""
    if release_folder is None:
        scratch = staging / ".release"
        scratch.mkdir()
        release_folder = fetch_release(scratch, source, release_home)
    report = build_subset(release_folder, staging, TRAIN_PER_CLASS, TEST_PER_CLASS)
    shutil.rmtree(staging / ".release", ignore_errors=True)
    return report
