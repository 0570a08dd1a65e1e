"""The CIFAR-10 task: ``dataset.train_limit`` trains on the first N training images only;
``dataset.eval_train`` also evaluates on them (the train–test gap)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from normbench.base.errors import ConfigError
from normbench.data.cifar import write_cifar_batches
from normbench.tasks import build_task


def _cifar(root: Path) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    train = (rng.integers(0, 256, (50, 32, 32, 3), dtype=np.uint8), rng.integers(0, 10, 50))
    test = (rng.integers(0, 256, (20, 32, 32, 3), dtype=np.uint8), rng.integers(0, 10, 20))
    write_cifar_batches(root, train, test)
    return train


def _task(root: Path, limit: int | None, eval_train: bool = False):
    cfg = {"name": "cifar10", "root": str(root), "download": False, "verify_checksums": False, "augment": False,
           "train_limit": limit, "eval_train": eval_train}  # fmt: skip
    return build_task(cfg, torch.device("cpu"), root, batch_size=8, eval_batch_size=10)


def test_train_limit_keeps_the_first_images_and_the_whole_test_split(tmp_path: Path) -> None:
    train = _cifar(tmp_path)
    task = _task(tmp_path, 30)
    assert len(task.train_y) == 30 and len(task.test_y) == 20
    torch.testing.assert_close(task.train_y, torch.as_tensor(train[1][:30]))
    assert torch.equal(task.train_x[0].permute(1, 2, 0), torch.as_tensor(train[0][0]))
    assert len(_task(tmp_path, None).train_y) == 50


def test_a_train_limit_beyond_the_data_is_one_error(tmp_path: Path) -> None:
    _cifar(tmp_path)
    with pytest.raises(ConfigError, match=r"dataset.train_limit=51 must be in 1..50"):
        _task(tmp_path, 51)


def test_eval_train_scores_the_training_images_as_the_test_ones(tmp_path: Path) -> None:
    """A model that answers the label of a pixel's value: accuracy by hand on each split."""
    _cifar(tmp_path)
    task = _task(tmp_path, 30, eval_train=True)

    class PixelModel(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.one_hot((x[:, 0, 0, 0] > 0).long() * 3, 10).float()

    out = task.evaluate(PixelModel())
    for split, images, labels in (("val", task.test_x, task.test_y), ("train_eval", task.train_x, task.train_y)):
        predicted = (task._prepare(images)[:, 0, 0, 0] > 0).long() * 3
        assert out[f"{split}/acc"] == pytest.approx(float((predicted == labels).float().mean()))
    assert "train_eval/acc" not in _task(tmp_path, 30).evaluate(PixelModel())
