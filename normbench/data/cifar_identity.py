"""Which CIFAR-10 files these are: what can always be checked, whatever ``dataset.verify_checksums``.

The MD5 list of the original release (``verify_checksums=true``) says the files are the release's.
A subset or re-encoded copy has no such list (the ``*_cpu`` presets set ``verify_checksums=false``),
and a file swapped or copied there (``test_batch`` a copy of ``data_batch_1``) would make the run
evaluate on training images without a word. So, unless the release's MD5s were verified:

1. a known checksum list: the ``SHA256SUMS`` that ``normbench-data`` writes beside the files
   (``<root>/SHA256SUMS``, lines ``<sha256>  cifar-10-batches-py/<file>``, or one inside the
   folder) is read, and every file it lists must still have its checksum;
2. no two batch files are byte for byte the same;
3. the test split is held out: no test image (its 3072 bytes) is also a training image. Exact
   copies across the splits are refused when they make up at least `OVERLAP_REFUSED` of the
   test images (a batch swapped or copied in); fewer are one warning with the count (a data set
   that holds a few exact duplicates, as collections scraped from the web do);
4. no training image carries two labels: the same 3072 bytes in two places of the training files
   (two batches, or one) with different labels are refused, whatever their number (a batch's
   images copied over another's with that batch's labels: every image then has two labels); the
   shared subset has no duplicate at all, the release none with two labels.

Cost: one SHA-256 pass over the files and one 16-byte hash per image (about 0.2 s for the CPU
subset's 12,000 images); every failure is one `DataFileError` naming the files.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from normbench.base.errors import DataFileError
from normbench.data.cifar_files import META_FILE
from normbench.data.prepare_io import CHECKSUMS_FILE, sha256

OVERLAP_REFUSED = 0.01
"""The fraction of test images found among the training images from which the split is refused."""


def known_checksums(folder: Path) -> tuple[Path, dict[str, str]] | None:
    """The checksum list that covers ``folder``'s files (see the module doc): its path and
    ``{file name: sha256}``; None when there is none. A line that is not ``<sha256>  <path>`` is a
    `DataFileError` naming the list."""
    for sums, prefix in ((folder.parent / CHECKSUMS_FILE, f"{folder.name}/"), (folder / CHECKSUMS_FILE, "")):
        if not sums.is_file():
            continue
        listed = {}
        for number, line in enumerate(sums.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            digest, _, rel = line.partition("  ")
            if len(digest) != 64 or not rel:
                raise DataFileError(f"{sums} line {number} is not '<sha256>  <file>'; restore it or move it aside")
            if rel.startswith(prefix) and "/" not in rel[len(prefix) :]:
                listed[rel[len(prefix) :]] = digest.lower()
        return sums, listed
    return None


def check_checksums(folder: Path, names: list[str], digests: dict[str, str]) -> None:
    """Every file of ``names`` that a known list (`known_checksums`) covers has its checksum."""
    found = known_checksums(folder)
    if found is None:
        return
    sums, listed = found
    changed = [n for n in names if n in listed and digests[n] != listed[n]]
    if changed:
        raise DataFileError(
            f"{', '.join(str(folder / n) for n in changed)}: SHA-256 differs from {sums}; the files were changed or "
            "swapped since they were written: restore them, or prepare them again (normbench-data <name> --force)"
        )


def check_distinct_files(folder: Path, names: list[str], digests: dict[str, str]) -> None:
    """No two of ``names`` are byte for byte the same file."""
    seen: dict[str, str] = {}
    for name in names:
        other = seen.setdefault(digests[name], name)
        if other != name:
            raise DataFileError(
                f"{folder / name} is byte for byte {folder / other}: a batch copied over another; restore the "
                "original files"
            )


def image_hashes(images: np.ndarray) -> list[bytes]:
    """A 16-byte BLAKE2 hash of each image's bytes (images: (N, ...) uint8)."""
    rows = np.ascontiguousarray(images).reshape(len(images), -1)
    return [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in rows]


def held_out(train: np.ndarray, test: np.ndarray) -> int:
    """How many test images are byte for byte a training image."""
    seen = set(image_hashes(train))
    return sum(h in seen for h in image_hashes(test))


def relabelled(images: np.ndarray, labels: np.ndarray) -> list[tuple[int, int]]:
    """(first, later) indices of every image whose bytes appeared earlier with another label."""
    first: dict[bytes, int] = {}
    found = []
    for i, h in enumerate(image_hashes(images)):
        j = first.setdefault(h, i)
        if j != i and labels[j] != labels[i]:
            found.append((j, i))
    return found


def check_one_label_each(folder: Path, train_names: list[str], images: np.ndarray, labels: np.ndarray) -> None:
    """Check 4 of the module doc: a training image with two labels names the files and the count."""
    found = relabelled(images, labels)
    if found:
        per_file = len(images) // max(len(train_names), 1)
        j, i = found[0]
        where = f"image {j} ({train_names[min(j // per_file, len(train_names) - 1)]}) and image {i} " \
                f"({train_names[min(i // per_file, len(train_names) - 1)]})"  # fmt: skip
        raise DataFileError(
            f"{len(found)} training images in {folder} carry two labels (e.g. {where}, labels {labels[j]} and "
            f"{labels[i]}): a batch copied over another with other labels? restore the original files"
        )


def check_identity(
    folder: Path, train_names: list[str], test_names: list[str], train: np.ndarray, test: np.ndarray,
    train_labels: np.ndarray | None = None,
) -> None:  # fmt: skip
    """Checks 1-4 of the module doc on the files of ``folder`` and their images (uint8 arrays;
    ``train_labels``: the training labels, for check 4)."""
    from normbench.base.output import warn

    names = [*train_names, *test_names]
    listed = [*names, META_FILE]
    digests = {n: sha256(folder / n) for n in listed}
    check_checksums(folder, listed, digests)
    check_distinct_files(folder, names, digests)
    shared = held_out(train, test)
    files = f"{', '.join(test_names)} and {', '.join(train_names)} in {folder}"
    if shared and shared >= OVERLAP_REFUSED * len(test):
        raise DataFileError(
            f"{shared} of {len(test)} test images are also training images ({files}): the test split is not "
            "held out (a training batch copied or swapped in?); restore the original files"
        )
    if shared:
        warn(f"{shared} of {len(test)} test images are byte for byte training images too ({files})")
    if train_labels is not None:
        check_one_label_each(folder, train_names, train, train_labels)
