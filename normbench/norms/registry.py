"""The norm registry: `register_norm`, `build_norm`, `list_norms`, `norm_factory`.

A norm is an `nn.Module` class with the constructor
``Norm(num_features, *, layout, eps, affine, **kw)`` and the forward ``forward(x, mask=None)``.
Models never name a norm type: they receive a factory ``norm_layer(num_features, layout)``
(see `norm_factory`) and call it wherever a norm goes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from torch import nn

from normbench.errors import ConfigError
from normbench.registry import Registry

NORMS: Registry[type[nn.Module]] = Registry("norm")

LAYOUTS = ("NCHW", "NTC")
"""``NCHW``: channels on axis 1 (also N,C and N,C,L); ``NTC``: sequences, channels last."""


@dataclass
class NormConfig:
    """Keys every norm takes (``conf/norm/<name>.yaml``)."""

    name: str = MISSING
    """The registered name: filled by the registry (`normbench.registry.schema`)."""
    eps: float = 1e-5
    affine: bool = True


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


def norm_config(spec: Mapping[str, Any] | str) -> DictConfig:
    """A norm's full config from ``spec`` — a bare name (its registered defaults) or a mapping with
    ``name`` and any of its keys — checked against its schema: an unknown name, an unknown key or a
    wrong type is a one-line `ConfigError` naming the valid choices."""
    if isinstance(spec, str):
        spec = {"name": spec}
    spec = OmegaConf.to_container(spec, resolve=True) if OmegaConf.is_config(spec) else dict(spec)
    if not isinstance(spec.get("name"), str):
        raise ConfigError(f"a norm config needs a name, one of {', '.join(list_norms())}; got {spec!r}")
    entry = NORMS.entry(spec["name"])
    node = entry.defaults()
    unknown = sorted(set(spec) - set(node))
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r} for norm {entry.name!r}; valid keys: {', '.join(node)}")
    try:
        return OmegaConf.merge(node, spec)
    except OmegaConfBaseException as e:
        raise ConfigError(f"norm {entry.name!r}: {str(e).splitlines()[0]}") from None


def norm_factory(cfg: Mapping[str, Any] | str) -> NormLayer:
    """A factory ``f(num_features, layout)`` from a norm config (``cfg.norm``) or a bare name."""
    if isinstance(cfg, str):
        return functools.partial(build_norm, cfg)
    kw = {k: v for k, v in dict(cfg).items() if k != "name"}
    return functools.partial(build_norm, cfg["name"], **kw)
