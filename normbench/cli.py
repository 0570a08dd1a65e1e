"""``normbench`` / ``python -m normbench``: the Hydra entry point."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from normbench.config import register_configs
from normbench.errors import ConfigError

PACKAGE_DIR = Path(__file__).resolve().parent


def config_dir() -> str:
    """``conf/`` beside the package in a checkout; the copy packed into the wheel otherwise."""
    for candidate in (PACKAGE_DIR.parent / "conf", PACKAGE_DIR / "_conf"):
        if (candidate / "config.yaml").is_file():
            return str(candidate)
    raise FileNotFoundError(f"normbench's conf/ not found beside {PACKAGE_DIR}")


register_configs()


@hydra.main(version_base="1.3", config_path=config_dir(), config_name="config")
def main(cfg: DictConfig) -> Any:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from normbench import rundir
    from normbench.config import objective
    from normbench.train import run

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    multirun = hc.mode == RunMode.MULTIRUN
    locked_here = False
    try:
        locked_here = rundir.hold(run_dir)  # a single run's lock is already held (RunDirCallback)
        return objective(cfg, run(cfg, run_dir))  # the one number a sweeper optimizes (optimized_metric)
    except ConfigError as e:
        if full_error():
            raise
        message = f"normbench: error: {e}"
        if multirun:  # this job fails alone; the sweep goes on
            from normbench.output import atomic_write_text

            print(message, file=sys.stderr, flush=True)
            busy = isinstance(e, rundir.RunDirError)  # another run's directory, or unwritable: write nothing
            if not busy and not (run_dir / "summary.json").exists():
                atomic_write_text(run_dir / "summary.json", json.dumps({"status": "failed", "error": str(e)}) + "\n")
            return {"status": "failed", "error": str(e)}
        rundir.discard_new(run_dir)  # what this run created; never what was there before
        print(message, file=sys.stderr, flush=True)
        sys.exit(2)
    finally:
        if locked_here:
            rundir.release(run_dir)


def full_error() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


CALLBACK_OVERRIDE = "++hydra.callbacks.normbench_run_dir._target_=normbench.rundir.RunDirCallback"
"""Added to the command line by `cli`: the callback that takes the run directory's lock and
snapshot before Hydra makes the directory (a config file could name it too; this keeps
``conf/`` free of it)."""


def cli() -> Any:
    """The ``normbench`` command: the command line's overrides are checked against ``conf/``
    first (one line and exit 2 on an unknown choice or key), then Hydra runs `main`."""
    from normbench.validate import check_overrides

    try:
        check_overrides(sys.argv[1:], config_dir())
    except ConfigError as e:
        if full_error():
            raise
        print(f"normbench: error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    from normbench import rundir

    argv = sys.argv
    sys.argv = [*argv, CALLBACK_OVERRIDE]
    try:
        return main()
    finally:
        sys.argv = argv
        rundir.release_all()


if __name__ == "__main__":
    cli()
