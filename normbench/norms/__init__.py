"""Normalization layers, one file per family, all reachable through the registry."""

from normbench.norms import batch, group, identity, layer, lp_batch, noisy, power  # noqa: F401  (registration)
from normbench.norms.registry import (
    LAYOUTS,
    NORMS,
    NormConfig,
    build_norm,
    list_norms,
    norm_factory,
    register_norm,
)

__all__ = ["LAYOUTS", "NORMS", "NormConfig", "build_norm", "list_norms", "norm_factory", "register_norm"]
