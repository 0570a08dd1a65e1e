"""Image classification with the whole split on the training device as uint8."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normbench.base.errors import ConfigError, require, require_in, require_seed
from normbench.data.augment import (
    CIFAR10_MEAN,
    CIFAR10_STD,
    normalize,
    random_crop,
    random_flip,
)
from normbench.data.cifar import BASE_FOLDER, load_cifar10_splits, make_synthetic_images, write_cifar_batches
from normbench.data.registry import DatasetConfig, register_dataset
from normbench.tasks.base import RowSum, StepOutput


def correct_answers(logits: Tensor, labels: Tensor) -> Tensor:
    """Top-1 correct answers among the rows (int64): argmax of each row's logits equal to its label."""
    return (logits.argmax(-1) == labels).sum()


class ImageClassificationTask:
    """Cross-entropy classification; ``val/*`` is measured on the held-out split.

    Training batches: a fresh permutation each epoch (from the runner's CPU generator), the
    last incomplete batch dropped (batch-statistic norms need full batches), augmentation
    (4-pixel pad + random crop, random flip) on the whole batch on its device.
    """

    kind = "image"
    unit = "samples"

    def __init__(
        self,
        train_images: Tensor,
        train_labels: Tensor,
        test_images: Tensor,
        test_labels: Tensor,
        num_classes: int,
        batch_size: int,
        eval_batch_size: int,
        augment: bool,
        device: torch.device,
        mean: tuple[float, ...] = CIFAR10_MEAN,
        std: tuple[float, ...] = CIFAR10_STD,
        memory_format: torch.memory_format = torch.contiguous_format,
        eval_train: bool = False,
    ) -> None:
        if batch_size > len(train_images):
            raise ConfigError(
                f"batch_size={batch_size} exceeds the {len(train_images)} training images; "
                f"choose batch_size <= {len(train_images)}"
            )
        self.train_x = train_images.to(device)
        self.train_y = train_labels.to(device)
        self.test_x = test_images.to(device)
        self.test_y = test_labels.to(device)
        self.num_classes = num_classes
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        self.augment = augment
        self.device = device
        self.mean = torch.tensor(mean, device=device)
        self.std = torch.tensor(std, device=device)
        self.memory_format = memory_format
        self.eval_train = eval_train
        self._counts: dict[tuple[int, torch.device], Tensor] = {}

    def model_kwargs(self) -> dict[str, Any]:
        return {"num_classes": self.num_classes, "image_shape": tuple(self.train_x.shape[1:])}  # (C, H, W)

    def steps_per_epoch(self) -> int:
        return len(self.train_x) // self.batch_size

    def _prepare(self, x: Tensor) -> Tensor:
        return normalize(x, self.mean, self.std).contiguous(memory_format=self.memory_format)

    def train_batches(self, epoch: int, generator: torch.Generator) -> Iterator[tuple[Tensor, Tensor]]:
        perm = torch.randperm(len(self.train_x), generator=generator).to(self.device)
        for i in range(self.steps_per_epoch()):
            idx = perm[i * self.batch_size : (i + 1) * self.batch_size]
            x = self.train_x[idx]  # (B, 3, 32, 32) uint8
            if self.augment:
                x = random_flip(random_crop(x, 4, generator), generator)
            yield self._prepare(x), self.train_y[idx]

    def forward_loss(self, model: nn.Module, batch: tuple[Tensor, Tensor]) -> StepOutput:
        x, y = batch
        logits = model(x)  # (B, classes)
        loss = F.cross_entropy(logits.float(), y)
        n = y.numel()
        stats = {
            "loss_sum": loss.detach() * n,
            # counted when read (`RowSum`): the logits are held until then, so they must be the step's own
            # tensor (torch.compile's default mode allocates each call's outputs; CUDA graphs would not)
            "correct": RowSum(correct_answers, (logits.detach(), y)),
            "count": self._count(n, y.device),
        }
        return StepOutput(loss, stats)

    def _count(self, n: int, device: torch.device) -> Tensor:
        """``n`` as an int64 scalar on ``device``, made once per (n, device): a fill on the device
        (no host copy), not a kernel a step. Never changed in place (sums and reductions copy)."""
        key = (n, device)
        count = self._counts.get(key)
        if count is None:
            count = self._counts[key] = torch.full((), n, device=device)
        return count

    def batch_units(self, batch: tuple[Tensor, Tensor]) -> int:
        return batch[1].numel()

    def summarize(self, sums: dict[str, float], prefix: str) -> dict[str, float]:
        count = max(sums.get("count", 0.0), 1.0)
        return {f"{prefix}/loss": sums["loss_sum"] / count, f"{prefix}/acc": sums["correct"] / count}

    def evaluate(self, model: nn.Module) -> dict[str, float]:
        """``val/loss`` and top-1 ``val/acc`` on the held-out split (and, with ``eval_train``,
        ``train_eval/loss`` and ``train_eval/acc`` on the training images, unaugmented, in the
        same evaluation mode: the train–test gap without dropout's or augmentation's noise);
        call under ``no_grad``."""
        out = self.evaluate_loss(model)
        if self.eval_train:
            out.update(self._evaluate_split(model, self.train_x, self.train_y, "train_eval"))
        return out

    def evaluate_loss(self, model: nn.Module) -> dict[str, float]:
        """``val/loss`` and ``val/acc`` on the held-out split only; call under ``no_grad``."""
        return self._evaluate_split(model, self.test_x, self.test_y, "val")

    def _evaluate_split(self, model: nn.Module, images: Tensor, labels: Tensor, prefix: str) -> dict[str, float]:
        sums = {"loss_sum": 0.0, "correct": 0.0, "count": 0.0}
        for i in range(0, len(images), self.eval_batch_size):
            batch = (self._prepare(images[i : i + self.eval_batch_size]), labels[i : i + self.eval_batch_size])
            out = self.forward_loss(model, batch)
            for k, v in out.stats.items():
                sums[k] += float(v)
        return self.summarize(sums, prefix)


@dataclass
class CIFAR10Config(DatasetConfig):
    root: str = "data/cifar10"
    download: bool = False
    verify_checksums: bool = True
    """False: accept subsets and re-encoded copies (torchvision's MD5 check rejects them)."""
    augment: bool = True
    """4-px pad + random crop, random horizontal flip."""
    train_limit: int | None = None
    """Train on the first N training images only (null: all); the test split stays whole."""
    eval_train: bool = False
    """Also evaluate on the training images (``train_eval/*``: the train–test gap)."""

    def __post_init__(self) -> None:
        limit = self.train_limit
        require(limit is None or limit > 0, "dataset.train_limit", limit, "a positive integer (or null: all)")


@dataclass
class SyntheticImagesConfig(DatasetConfig):
    root: str | None = None
    """Where to write the files; default: ``<run dir>/data``."""
    num_train: int = 2000
    num_test: int = 500
    noise: float = 48.0
    """The pixel noise's standard deviation, in 0-255 units."""
    seed: int = 0
    augment: bool = True
    eval_train: bool = False

    def __post_init__(self) -> None:
        require(self.num_train > 0, "dataset.num_train", self.num_train, "a positive integer")
        require(self.num_test > 0, "dataset.num_test", self.num_test, "a positive integer (val/* needs test images)")
        require_in("dataset.noise", self.noise, "[0, inf)")
        require_seed("dataset.seed", self.seed)


def _task(
    train: tuple[torch.Tensor, torch.Tensor, list[str]],
    test: tuple[torch.Tensor, torch.Tensor, list[str]],
    augment: bool,
    device: torch.device,
    batch_size: int,
    eval_batch_size: int,
    eval_train: bool = False,
) -> ImageClassificationTask:
    return ImageClassificationTask(
        train_images=train[0],
        train_labels=train[1],
        test_images=test[0],
        test_labels=test[1],
        num_classes=len(train[2]),
        batch_size=batch_size,
        eval_batch_size=eval_batch_size,
        augment=augment,
        device=device,
        eval_train=eval_train,
    )


@register_dataset("cifar10", CIFAR10Config, input_kind="image")
def cifar10(
    cfg: CIFAR10Config, device: torch.device, run_dir: Path, *, batch_size: int, eval_batch_size: int
) -> ImageClassificationTask:
    """The CIFAR-10 train split for training and its test split for ``val/*``."""
    train, test = load_cifar10_splits(cfg.root, cfg.download, cfg.verify_checksums)
    limit = cfg.train_limit
    if limit is not None:
        if not 0 < limit <= len(train[1]):
            raise ConfigError(f"dataset.train_limit={limit} must be in 1..{len(train[1])} (the training images there)")
        train = (train[0][:limit], train[1][:limit], train[2])
    return _task(train, test, cfg.augment, device, batch_size, eval_batch_size, cfg.eval_train)


def synthetic_root(cfg: SyntheticImagesConfig, run_dir: Path) -> Path:
    key = f"{cfg.num_train}-{cfg.num_test}-{cfg.noise}-{cfg.seed}"
    digest = hashlib.sha1(key.encode()).hexdigest()[:10]
    base = Path(cfg.root).expanduser() if cfg.root else Path(run_dir) / "data"
    return base / f"synthetic_images-{digest}"


@register_dataset("synthetic_images", SyntheticImagesConfig, input_kind="image")
def synthetic_images(
    cfg: SyntheticImagesConfig, device: torch.device, run_dir: Path, *, batch_size: int, eval_batch_size: int
) -> ImageClassificationTask:
    """Write the synthetic task as CIFAR-10 files (once per settings), then load it as CIFAR-10."""
    root = synthetic_root(cfg, run_dir)
    if not (root / BASE_FOLDER / "test_batch").is_file():
        train = make_synthetic_images(cfg.num_train, cfg.seed, noise=cfg.noise)
        test = make_synthetic_images(cfg.num_test, cfg.seed + 1_000_003, noise=cfg.noise)
        write_cifar_batches(root, train, test)
    train, test = load_cifar10_splits(root, download=False, verify_checksums=False)
    return _task(train, test, cfg.augment, device, batch_size, eval_batch_size, cfg.eval_train)
