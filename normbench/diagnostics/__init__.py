"""Diagnostics: the papers' measurements, each a pure function plus a thin hook.

One module per measurement (registered on import): ``landscape``, ``predictiveness`` and
``beta_smoothness`` (sharing the gradient-step probe of ``probe``), ``ics``, ``hessian``,
``grad_variance``, ``bn_stats``, ``activations``, ``saturation``, ``token_scale`` and
``val_loss``. ``registry`` holds the hook protocol, the typed config and `run_hooks`; ``state``
the exact save/restore of the training state.
"""

from normbench.diagnostics import (  # noqa: F401  (registration)
    activations,
    beta_smoothness,
    bn_stats,
    grad_variance,
    hessian,
    ics,
    landscape,
    predictiveness,
    saturation,
    token_scale,
    val_loss,
)
from normbench.diagnostics.registry import (
    DIAGNOSTICS,
    CadenceConfig,
    DiagContext,
    DiagnosticHook,
    Hook,
    build_diagnostics,
    diagnostics_config,
    list_diagnostics,
    register_diagnostic,
    run_hooks,
)
from normbench.diagnostics.state import RngState, TrainingState

__all__ = [
    "DIAGNOSTICS",
    "CadenceConfig",
    "DiagContext",
    "DiagnosticHook",
    "Hook",
    "RngState",
    "TrainingState",
    "build_diagnostics",
    "diagnostics_config",
    "list_diagnostics",
    "register_diagnostic",
    "run_hooks",
]
