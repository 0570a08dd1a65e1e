"""Diagnostics: the papers' measurements, each a pure function plus a thin hook."""

from normbench.diagnostics.registry import (
    DIAGNOSTICS,
    CadenceConfig,
    DiagContext,
    Hook,
    build_diagnostics,
    is_due,
    list_diagnostics,
    register_diagnostic,
)

__all__ = [
    "DIAGNOSTICS",
    "CadenceConfig",
    "DiagContext",
    "Hook",
    "build_diagnostics",
    "is_due",
    "list_diagnostics",
    "register_diagnostic",
]
