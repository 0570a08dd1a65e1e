"""The norm registry: `register_norm`, `build_norm`, `list_norms`, `norm_factory`.

A norm is an `nn.Module` class with the constructor
``Norm(num_features, *, layout, eps, affine, **kw)`` and the forward ``forward(x, mask=None)``.
Models never name a norm type: they receive a factory ``norm_layer(num_features, layout)``
(see `norm_factory`) and call it wherever a norm goes. `Norm` (the base class, `normbench.norms.base`)
is importable from here too, beside `register_norm` and `NormConfig`, for a plugin's module.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING
from torch import nn

from normbench.base.errors import ConfigError, require_positive
from normbench.base.registry import Registry
from normbench.norms.base import Norm

__all__ = ["LAYOUTS", "NORMS", "Norm", "NormConfig", "build_norm", "list_norms", "norm_factory", "register_norm"]

NORMS: Registry[type[nn.Module]] = Registry("norm")

LAYOUTS = ("NCHW", "NTC")
"""``NCHW``: channels on axis 1 (also N,C and N,C,L); ``NTC``: sequences, channels last."""


@dataclass
class NormConfig:
    """Keys every norm takes (``conf/norm/<name>.yaml``)."""

    name: str = MISSING
    """The registered name: filled by the registry (`normbench.base.registry.schema`)."""
    eps: float = 1e-5
    affine: bool = True

    def __post_init__(self) -> None:
        """The keys of every norm; a norm's config with more keys checks them in its own
        ``__post_init__`` and calls this one (``super().__post_init__()``)."""
        require_positive("norm.eps", self.eps)  # 0 divides by a zero variance; NaN poisons every output

    def syncs_statistics(self) -> bool:
        """Whether the norm all-reduces its statistics across processes (a synchronized batch
        norm: ``norm.sync=true``); a norm without batch statistics never does."""
        return False


NormLayer = Callable[..., nn.Module]


def register_norm(name: str, config: type = NormConfig) -> Callable[[type[nn.Module]], type[nn.Module]]:
    """Class decorator: make ``name`` buildable through `build_norm` and ``norm=<name>``."""
    return NORMS.register(name, config)


def list_norms() -> list[str]:
    return NORMS.names()


def build_norm(name: str, num_features: int, layout: str = "NCHW", **kw: Any) -> nn.Module:
    """Build norm ``name`` over ``num_features`` channels for ``layout`` (``NCHW`` or ``NTC``)."""
    cls = NORMS.get(name)
    if layout not in LAYOUTS:
        raise ConfigError(f"unknown layout {layout!r}; valid choices: {', '.join(LAYOUTS)}")
    return cls(num_features, layout=layout, **kw)


def norm_config(spec: NormConfig | Mapping[str, Any] | str) -> NormConfig:
    """A norm's typed config from ``spec``: a bare name (its registered defaults), a mapping with
    ``name`` and any of its keys, or the config itself (`normbench.base.registry.Registry.typed`: an
    unknown name, an unknown key or a wrong type is a one-line `ConfigError`)."""
    return NORMS.typed(spec)


@contextlib.contextmanager
def keys_under(prefix: str) -> Iterator[None]:
    """A `ConfigError` raised inside names the norm's keys under ``prefix`` (a norm config that is
    not the run's ``norm``: ``model.encoder_norm.eps=0.0 is not allowed; ...``)."""
    try:
        yield
    except ConfigError as e:
        raise ConfigError(re.sub(r"(?<![\w.])norm\.", f"{prefix}.", str(e))) from None


def norm_factory(cfg: NormConfig | Mapping[str, Any] | str) -> NormLayer:
    """A factory ``f(num_features, layout)`` from a norm config (``config.norm``) or a bare name."""
    if isinstance(cfg, str):
        return functools.partial(build_norm, cfg)
    typed = norm_config(cfg)
    kw = {f.name: getattr(typed, f.name) for f in dataclasses.fields(typed) if f.name != "name"}
    return functools.partial(build_norm, typed.name, **kw)
