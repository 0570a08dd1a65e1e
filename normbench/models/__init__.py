"""Models, each taking its norm through one factory argument."""

from normbench.models import mlp, resnet, transformer, vgg  # noqa: F401  (registration)
from normbench.models.registry import (
    MODELS,
    ModelConfig,
    build_model,
    list_models,
    model_input_kind,
    register_model,
)

__all__ = ["MODELS", "ModelConfig", "build_model", "list_models", "model_input_kind", "register_model"]
