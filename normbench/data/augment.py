"""Batch-wide image augmentation as pure functions (no per-image PIL work).

Random draws come from a CPU ``torch.Generator`` (a few integers per image), so a run is
repeatable on any device; the pixel work happens on the images' device.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

from normbench.placement.hardware import upload

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


def random_crop(x: Tensor, pad: int, generator: torch.Generator) -> Tensor:
    """Zero-pad each image by ``pad`` pixels and take a random crop of the original size,
    an independent offset per image. ``x``: (B, C, H, W), any dtype."""
    b, c, h, w = x.shape
    padded = F.pad(x, (pad, pad, pad, pad))  # (B, C, H+2p, W+2p)
    dy = upload(torch.randint(0, 2 * pad + 1, (b,), generator=generator), x.device)  # no host sync
    dx = upload(torch.randint(0, 2 * pad + 1, (b,), generator=generator), x.device)
    arange_h, arange_w, batch, chan = crop_grid(b, c, h, w, x.device)
    rows = (dy[:, None] + arange_h)[:, None, :, None]  # (B, 1, H, 1)
    cols = (dx[:, None] + arange_w)[:, None, None, :]  # (B, 1, 1, W)
    return padded[batch, chan, rows, cols]


@functools.lru_cache(maxsize=16)
def crop_grid(b: int, c: int, h: int, w: int, device: torch.device) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """`random_crop`'s index ranges for (B, C, H, W) images on ``device``: 0..H-1, 0..W-1, the batch
    index (B, 1, 1, 1) and the channel index (1, C, 1, 1); made once per shape, not four kernels a
    batch (read only: every use makes new tensors from them)."""
    return (
        torch.arange(h, device=device),
        torch.arange(w, device=device),
        torch.arange(b, device=device)[:, None, None, None],
        torch.arange(c, device=device)[None, :, None, None],
    )


def random_flip(x: Tensor, generator: torch.Generator) -> Tensor:
    """Mirror each image left-right with probability 1/2, independently. ``x``: (B, C, H, W)."""
    flip = upload(torch.rand(x.shape[0], generator=generator).lt(0.5), x.device)
    return torch.where(flip[:, None, None, None], x.flip(-1), x)


def normalize(x: Tensor, mean: Tensor, std: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """uint8 (B, C, H, W) → float, scaled to [0, 1], then (x − mean) / std per channel."""
    x = x.to(dtype).div_(255.0)
    return x.sub_(mean.view(1, -1, 1, 1)).div_(std.view(1, -1, 1, 1))
