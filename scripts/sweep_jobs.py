"""The jobs of an experiment preset's sweep, one line each: ``<index> <override> <override> ...``.

Composes ``experiment=<preset>`` as ``normbench -m`` does (Hydra, this checkout's ``conf/``, so a
``_cpu`` preset's sweep inherits the params its full preset declares) and expands its
``hydra.sweeper.params`` and the overrides given after it with the basic sweeper's own code
(`normbench.data.roots.sweep_jobs`): the same jobs in the same order as ``normbench -m
experiment=<preset> <overrides>``, so that ``scripts/reproduce_cpu.sh`` can run them two at a time
on two cores (``xargs -P 2``) instead of one after another.

    python scripts/sweep_jobs.py ln_axes_cpu
    python scripts/sweep_jobs.py leaderboard_cpu 'experiment/arms/leaderboard@_global_=transformer_cpu' norm=ln,rms

Overrides after the preset replace the sweep's values of their keys (or add keys), as they do on
``normbench -m`` 's command line.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's normbench, whatever is pip-installed

CONF = ROOT / "conf"


def jobs(preset: str, overrides: list[str] | None = None) -> list[list[str]]:
    """Every job's overrides (``experiment=<preset>`` first), in the basic sweeper's order."""
    presets = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))
    if preset not in presets:
        raise SystemExit(f"sweep_jobs: unknown preset {preset!r}; valid choices: {', '.join(presets)}")
    for override in overrides or []:
        if "=" not in override:
            raise SystemExit(f"sweep_jobs: override {override!r} is not key=value")
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import open_dict

    from normbench.cli.store import register_configs
    from normbench.data.roots import sweep_jobs

    register_configs()
    experiment = f"experiment={preset}"
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        config = compose(config_name="config", overrides=[experiment], return_hydra_config=True)
    GlobalHydra.instance().clear()
    with open_dict(config):  # the command line of `normbench -m experiment=<preset> <overrides>`
        config.hydra.overrides.task = [experiment, *(overrides or [])]
    return [[experiment, *(o for o in job if o != experiment)] for job in sweep_jobs(config)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset")
    parser.add_argument("overrides", nargs="*", help="key=value (sweeps allowed): replace or add sweep keys")
    args = parser.parse_args(argv)
    lines = "".join(f"{' '.join([str(i), *o])}\n" for i, o in enumerate(jobs(args.preset, args.overrides)))
    try:
        sys.stdout.write(lines)
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
    return 0


if __name__ == "__main__":
    sys.exit(main())
