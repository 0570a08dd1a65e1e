"""The CIFAR-10 layout, the synthetic task, augmentation, and the real subset."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from normbench.data.augment import random_crop, random_flip
from normbench.data.cifar import load_cifar10, make_synthetic_images, write_cifar_batches
from normbench.errors import DatasetMissingError
from tests.conftest import CIFAR_SUBSET


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
    with pytest.raises(DatasetMissingError, match="verify_checksums=false"):
        load_cifar10(tmp_path, train=True)


def test_missing_data_names_root_and_remedies(tmp_path) -> None:
    with pytest.raises(DatasetMissingError) as e:
        load_cifar10(tmp_path / "nowhere", train=True)
    msg = str(e.value)
    assert str(tmp_path / "nowhere") in msg and "dataset.download=true" in msg and "dataset=synthetic_images" in msg


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
