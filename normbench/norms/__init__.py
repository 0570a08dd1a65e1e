"""Normalization layers, one file per family, all reachable through the registry.

Every module of this package is imported here (`discover`), so a new norm's ``@register_norm``
runs without an import list to edit; then the plugins (`normbench.base.plugins`:
``NORMBENCH_PLUGINS`` and the ``normbench.plugins`` entry points) register theirs.
"""

import importlib
import pkgutil

from normbench.base.plugins import load_plugins
from normbench.norms.base import Norm
from normbench.norms.registry import (
    LAYOUTS,
    NORMS,
    NormConfig,
    build_norm,
    list_norms,
    norm_factory,
    register_norm,
)

__all__ = ["LAYOUTS", "NORMS", "Norm", "NormConfig", "build_norm", "list_norms", "norm_factory", "register_norm"]


def discover() -> list[str]:
    """Import every module of `normbench.norms` (each family's ``@register_norm`` runs); their names."""
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
    for name in names:
        importlib.import_module(f"{__name__}.{name}")
    return names


discover()
load_plugins()  # last: a plugin's ``from normbench.norms import register_norm`` finds every name bound
