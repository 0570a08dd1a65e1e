"""Hydra callbacks (``conf/config.yaml``'s ``hydra.callbacks``), which read Hydra's config and hand
plain values to the rooms below.

- `SweepCallback`: before a sweep starts, every job's data root and the sweep directory (its lock, an
  earlier sweep there: `normbench.cli.sweep.open_sweep`); at its end, the sweep summary
  (`normbench.cli.sweep.close_sweep`; after Ctrl-C or a crash, ``normbench.cli.main`` closes it instead).
- `RunDirCallback`: before a single run's directory is made, its snapshot and lock
  (`normbench.records.rundir.take_run_dir`); at its end, the lock's release."""

from __future__ import annotations

import os
import sys
from typing import Any

from omegaconf import DictConfig, OmegaConf

from normbench.base.errors import ConfigError
from normbench.base.output import LOG, use_console
from normbench.cli import sweep
from normbench.data.roots import check_sweep_data_roots
from normbench.records.rundir import release, take_run_dir
from normbench.run.loop.policy import one_line

try:
    from hydra.experimental.callback import Callback
except ImportError:  # pragma: no cover
    Callback = object  # type: ignore[misc,assignment]


class SweepCallback(Callback):
    """Before a sweep makes its directory or starts a job: every job's ``dataset.root`` exists
    (`normbench.data.roots.check_sweep_data_roots`) and the sweep directory is this sweep's
    (`normbench.cli.sweep.open_sweep`); else one ``normbench: error:`` line, exit 2, nothing made.
    At the end: ``sweep_summary.csv`` and its table."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        use_console()  # an earlier job's log file (an earlier sweep in this process) is not this sweep's
        try:
            check_sweep_data_roots(config)
            sweep.open_sweep(config)
        except Exception as e:  # Hydra would only warn and start the sweep without its lock
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            LOG.error(f"normbench: error: {e if isinstance(e, ConfigError) else one_line(e)}")
            sys.exit(2)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        use_console()  # the last job's log file (jobs run in this process) is not the sweep's
        sweep.close_sweep()


class RunDirCallback(Callback):
    """Hydra callback of a single run: before its directory is made, the run directory's snapshot
    and lock (`normbench.records.rundir.take_run_dir`); at its end, the lock's release."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        run_dir = str(OmegaConf.select(config, "hydra.run.dir"))  # as Hydra's run_job resolves it
        resume = bool(OmegaConf.select(config, "resume", default=False))
        take_run_dir(run_dir, resume, list(OmegaConf.select(config, "hydra.overrides.hydra")))

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        release(str(OmegaConf.select(config, "hydra.run.dir")))
