"""Optuna's Hydra sweeper, ending in one line where the search found nothing.

When no trial returned a value (each diverged, failed, or did not report ``optimized_metric``),
the sweeper's ``study.best_trial`` raises ``ValueError: No trials are completed yet.`` after every
trial has trained, and Hydra prints its traceback. `NormbenchOptunaSweeper` says it in one line and
exits 1 (the sweep summary, written on the way out, lists each trial and its status).
``conf/hparams_search/optuna.yaml`` selects it; it needs the ``optuna`` extra.
"""

import os
import sys
from typing import Any

try:
    from hydra_plugins.hydra_optuna_sweeper.optuna_sweeper import OptunaSweeper
except ImportError:  # the optional ``optuna`` extra is absent: Hydra scans this module anyway
    OptunaSweeper = None  # type: ignore[assignment,misc]

NO_TRIAL = "No trials are completed"


if OptunaSweeper is not None:

    class NormbenchOptunaSweeper(OptunaSweeper):  # type: ignore[misc,valid-type]
        """`OptunaSweeper`, whose search without a completed trial ends in one line, exit 1."""

        def sweep(self, arguments: list[str]) -> Any:
            try:
                return super().sweep(arguments)
            except ValueError as e:
                if NO_TRIAL not in str(e) or os.environ.get("HYDRA_FULL_ERROR") == "1":
                    raise
                from normbench.base.output import error_line

                error_line("no trial of the search returned a value (each diverged, failed, or did not report its "
                           "optimized_metric): nothing to optimize; the sweep summary lists each trial")
                sys.exit(1)
