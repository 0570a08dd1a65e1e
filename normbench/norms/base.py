"""`Norm`: the small base that owns the per-channel affine parameters and the layout."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from normbench.base.errors import ConfigError


def check_groups(groups: int, num_features: int) -> None:
    """``norm.groups`` must divide the channels of every layer the norm is built for."""
    if groups <= 0 or num_features % groups:
        raise ConfigError(
            f"norm.groups={groups} does not divide num_features={num_features}; choose a divisor of {num_features}"
        )


class Norm(nn.Module):
    """Base of the normbench norms: ``Norm(num_features, *, layout, eps, affine)``.

    Holds one (γ, β) pair per channel when ``affine`` (β is left out when ``bias=False``),
    initialised to (1, 0) by `reset_parameters`. Subclasses implement ``forward(x, mask=None)``
    and declare ``NORMALIZES_OVER``: what one normalization's statistics are taken over, per
    layout (``NCHW``: images, ``NTC``: sequences), in a few words (`normalizes_over`).
    """

    NORMALIZES_OVER: ClassVar[dict[str, str]] = {}
    COMPILE_ISSUE: ClassVar[str] = ""
    """Non-empty where ``torch.compile`` (inductor) is known to give other results than eager mode
    for this norm (the slow cases of tests/norms/test_compile.py): a run with
    ``hardware.compile=true`` is refused with this reason instead of training on wrong gradients."""

    @classmethod
    def normalizes_over(cls, layout: str) -> str:
        """What the norm's statistics are taken over in ``layout``, e.g. ``"C, per pixel"``."""
        try:
            return cls.NORMALIZES_OVER[layout]
        except KeyError:
            raise NotImplementedError(f"{cls.__name__} does not declare what it normalizes over in {layout}") from None

    def __init__(
        self,
        num_features: int,
        *,
        layout: str = "NCHW",
        eps: float = 1e-5,
        affine: bool = True,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if num_features <= 0:
            raise ValueError(f"num_features must be positive, got {num_features}")
        self.num_features = num_features
        self.layout = layout
        self.eps = eps
        self.affine = affine
        self.weight = nn.Parameter(torch.empty(num_features)) if affine else None
        self.bias = nn.Parameter(torch.empty(num_features)) if affine and bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:  # pragma: no cover
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"{self.num_features}, layout={self.layout}, eps={self.eps}, affine={self.affine}"
