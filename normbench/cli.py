"""``normbench`` / ``python -m normbench``: the Hydra entry point."""

from __future__ import annotations

import json
import os
import shutil
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

    from normbench.train import run

    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    try:
        return run(cfg, run_dir)
    except ConfigError as e:
        if full_error():
            raise
        message = f"normbench: error: {e}"
        if hc.mode == RunMode.MULTIRUN:  # this job fails alone; the sweep goes on
            from normbench.output import atomic_write_text

            print(message, file=sys.stderr, flush=True)
            if not (run_dir / "summary.json").exists():
                atomic_write_text(run_dir / "summary.json", json.dumps({"status": "failed", "error": str(e)}) + "\n")
            return {"status": "failed", "error": str(e)}
        if only_hydra_files(run_dir):
            shutil.rmtree(run_dir, ignore_errors=True)  # nothing there that could pass for a result
        print(message, file=sys.stderr, flush=True)
        sys.exit(2)


def full_error() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def only_hydra_files(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds only what Hydra wrote for this job (``.hydra/``, its log file):
    a directory of an earlier run (checkpoints, metrics) is never removed."""
    if not run_dir.is_dir():
        return False
    return all(p.name == ".hydra" or p.suffix == ".log" for p in run_dir.iterdir())


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
    return main()


if __name__ == "__main__":
    cli()
