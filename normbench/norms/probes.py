"""What a norm does, found by running it: batch statistics, mixed positions, state.

One place answers the questions that validation, the diagnostics and the models ask about a
norm, by behaviour rather than by class or attribute names, so a new norm is classified
correctly without being listed anywhere:

- `uses_batch_statistics`: does a sample's training output depend on the other samples of the
  batch? (BatchNorm, Batch Renorm, PowerNorm, noisy BN: yes; LN, GN, RMSNorm: no.) A batch of
  one sample per device cannot train such a norm, and per-sample gradients do not exist for it.
- `mixes_positions`: does a position's output (a time step's, or a pixel's) depend on the other
  positions? (Batch statistics in training; per-sample statistics over T or H×W.) A decoder
  norm that does lets the decoder see future target tokens.
- `holds_state`: does a training step change the norm's buffers or extra state? (Running
  statistics, PowerNorm's ψ² and its backward EMA.)

Each probe takes a norm factory ``norm_layer(num_features, layout)`` (`norm_factory`) or a built
norm: an `nn.Module` with ``num_features`` and ``layout`` (as `normbench.norms.base.Norm` has),
which is copied and never changed; a module without ``num_features`` is not a norm and answers
False. Probes run on the CPU in float64 under a fixed seed, inside `torch.random.fork_rng`, so
they draw nothing from the caller's random streams; noise-injecting norms draw the same noise in
the two forwards each probe compares.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import ParamSpec

import torch
from torch import Tensor, nn

P = ParamSpec("P")
NormLike = Callable[..., nn.Module] | nn.Module
"""A norm factory ``f(num_features, layout)`` or a built norm module."""


def _on_cpu(probe: Callable[P, bool]) -> Callable[P, bool]:
    """Run ``probe`` with CPU as the default device: a model may be being built on another
    device (config validation builds it on ``meta``) when a probe is asked."""

    @functools.wraps(probe)
    def on_cpu(*args: P.args, **kwargs: P.kwargs) -> bool:
        with torch.device("cpu"):
            return probe(*args, **kwargs)

    return on_cpu


def _fresh(norm: NormLike, num_features: int, layout: str, training: bool) -> nn.Module:
    """A float64 CPU instance to probe: built from the factory, or a copy of the module."""
    probe = copy.deepcopy(norm) if isinstance(norm, nn.Module) else norm(num_features, layout)
    return probe.to(device="cpu", dtype=torch.float64).train(training)


def _size(norm: NormLike, num_features: int, layout: str) -> tuple[int, str] | None:
    """The probe's channels and layout: the module's own, or the ones given with a factory;
    None for a module that is not a norm (no ``num_features``)."""
    if isinstance(norm, nn.Module):
        if not isinstance(getattr(norm, "num_features", None), int):
            return None
        return norm.num_features, str(getattr(norm, "layout", layout))
    return num_features, layout


def _outputs(norm: nn.Module, inputs: list[Tensor], mask: Tensor | None) -> list[Tensor]:
    """``norm`` on each input under the same seed (a fresh copy each, so state cannot leak between them)."""
    outs = []
    for x in inputs:
        layer = copy.deepcopy(norm)
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(0)
            outs.append(layer(x) if mask is None else layer(x, mask))
    return outs


def _input(shape: tuple[int, ...]) -> Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


@_on_cpu
def uses_batch_statistics(norm: NormLike, num_features: int = 8, layout: str = "NCHW") -> bool:
    """Whether the norm's training output for a sample depends on the other samples of the batch.

    Two batches that share their first sample and differ (scaled and shifted) in the others: a
    per-sample norm gives the first sample the same output in both (to 1e-9 relative)."""
    size = _size(norm, num_features, layout)
    if size is None:
        return False
    num_features, layout = size
    x = _input((3, num_features, 3, 3) if layout == "NCHW" else (3, 4, num_features))
    other = x.clone()
    other[1:] = 3 * torch.randn(other[1:].shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype) + 1
    a, b = _outputs(_fresh(norm, num_features, layout, training=True), [x, other], None)
    return not torch.allclose(a[0], b[0], rtol=1e-9, atol=1e-12)


@_on_cpu
def mixes_positions(norm: NormLike, num_features: int = 8, training: bool = False, layout: str = "NTC") -> bool:
    """Whether changing one position's input changes the norm's output at other positions.

    ``NTC``: (B, T, C) = (4, 6, C), every token real (mask all True), the last time step of
    every sequence scaled and shifted; ``NCHW``: (4, C, 2, 3), the last column. The outputs at
    the other positions are compared (to 1e-12). A built norm is probed in its own layout."""
    size = _size(norm, num_features, layout)
    if size is None:
        return False
    num_features, layout = size
    x = _input((4, 6, num_features) if layout == "NTC" else (4, num_features, 2, 3))
    last = (slice(None), -1) if layout == "NTC" else (Ellipsis, -1)
    rest = (slice(None), slice(None, -1)) if layout == "NTC" else (Ellipsis, slice(None, -1))
    x2 = x.clone()
    x2[last] = 3 * x2[last] + 1
    mask = torch.ones(4, 6, dtype=torch.bool) if layout == "NTC" else None
    a, b = _outputs(_fresh(norm, num_features, layout, training=training), [x, x2], mask)
    return not torch.allclose(a[rest], b[rest], rtol=0, atol=1e-12)


@_on_cpu
def holds_state(norm: NormLike, num_features: int = 8, layout: str = "NCHW") -> bool:
    """Whether one training step (forward and backward) changes the norm's buffers or extra state."""
    size = _size(norm, num_features, layout)
    if size is None:
        return False
    num_features, layout = size
    layer = _fresh(norm, num_features, layout, training=True)
    before = copy.deepcopy(layer.state_dict())
    x = _input((3, num_features, 3, 3) if layout == "NCHW" else (3, 4, num_features)).requires_grad_()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer(x).pow(2).sum().backward()
    after = layer.state_dict()
    return before.keys() != after.keys() or any(not _same(before[k], after[k]) for k in before)


def _same(a: object, b: object) -> bool:
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a.shape == b.shape and bool(torch.equal(a, b))
    return a == b
