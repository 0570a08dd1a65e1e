"""Small models, tasks and contexts shared by the diagnostics tests."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

import normbench.data  # noqa: F401  (before normbench.tasks.classification: they import each other)
from normbench.diagnostics import DiagContext
from normbench.norms import build_norm
from normbench.tasks.classification import ImageClassificationTask


class Quadratic(nn.Module):
    """L(θ) = ½·θᵀAθ with a known symmetric A."""

    def __init__(self, a: Tensor, theta: Tensor) -> None:
        super().__init__()
        self.a = a
        self.theta = nn.Parameter(theta.clone())


def quadratic_loss(model: nn.Module, batch: Any) -> Tensor:
    return 0.5 * model.theta @ model.a @ model.theta


def spd_matrix(eigenvalues: list[float], seed: int = 0) -> Tensor:
    """Q·diag(λ)·Qᵀ with a random orthogonal Q (float64)."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(len(eigenvalues), len(eigenvalues), generator=g, dtype=torch.float64))
    return q @ torch.diag(torch.tensor(eigenvalues, dtype=torch.float64)) @ q.T


class TinyNet(nn.Module):
    """conv → norm → ReLU → mean pool → dropout → linear: batch statistics and RNG draws in one step."""

    def __init__(self, norm: str = "bn", dropout: float = 0.2) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.norm1 = build_norm(norm, 8)
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(8, 10)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.norm1(self.conv(x)))  # (B, 8, H, W)
        return self.fc(self.drop(x.mean(dim=(2, 3))))


def tiny_task(num_train: int = 64, batch_size: int = 16, seed: int = 0) -> ImageClassificationTask:
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (num_train, 3, 8, 8), generator=g, dtype=torch.uint8)
    labels = torch.randint(0, 10, (num_train,), generator=g)
    return ImageClassificationTask(
        images, labels, images[:16], labels[:16], 10, batch_size, 16, True, torch.device("cpu")
    )


def task_loss(task: ImageClassificationTask):
    return lambda model, batch: task.forward_loss(model, batch).loss


def context(model: nn.Module, batch: Any, loss_fn, optimizer=None, step: int = 0, lr: float = 0.1, task=None):
    optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=lr)
    return DiagContext(model, batch, loss_fn, optimizer, step, 0, lr, task=task)
