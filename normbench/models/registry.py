"""The model registry: `register_model`, `build_model`, `list_models`.

A model builder is ``builder(cfg, norm_layer, **task_kwargs) -> nn.Module`` where ``cfg`` is the
model's config dataclass (``conf/model/<name>.yaml``), ``norm_layer`` the norm factory
(``norm_layer(num_features, layout)``) and ``task_kwargs`` what the data set says about the
task (``num_classes``, vocabulary sizes, ...). Each builder declares the input kind it takes
(``image`` or ``sequence``) so that a model/data set mismatch fails before training.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING
from torch import nn

from normbench.base.registry import Registry
from normbench.norms.registry import NormLayer

ModelBuilder = Callable[..., nn.Module]
MODELS: Registry[ModelBuilder] = Registry("model")
INPUT_KINDS: dict[str, str] = {}


@dataclass
class ModelConfig:
    name: str = MISSING
    """The registered name: filled by the registry (`normbench.base.registry.schema`)."""

    def positions(self) -> int | None:
        """The longest sequence the model's position table holds; None: the model has none."""
        return None

    def stack_norms(self) -> list[Any]:
        """The norm configs the model's own stacks use instead of the run's ``norm`` (a
        transformer's ``encoder_norm`` / ``decoder_norm``: a norm config or a bare name)."""
        return []


def register_model(
    name: str, config: type = ModelConfig, input_kind: str = "image"
) -> Callable[[ModelBuilder], ModelBuilder]:
    INPUT_KINDS[name] = input_kind
    return MODELS.register(name, config)


def list_models() -> list[str]:
    return MODELS.names()


def model_input_kind(name: str) -> str:
    MODELS.entry(name)
    return INPUT_KINDS[name]


def build_model(cfg: ModelConfig | Mapping[str, Any], norm_layer: NormLayer, **task_kwargs: Any) -> nn.Module:
    """Build model ``cfg`` (its config dataclass, or a name and keys: `Registry.typed`) with
    ``norm_layer`` threaded to every norm."""
    typed = MODELS.typed(cfg)
    return MODELS.get(typed.name)(typed, norm_layer, **task_kwargs)
