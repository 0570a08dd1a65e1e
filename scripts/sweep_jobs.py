"""The jobs of an experiment preset's sweep, one line each: ``<index> <override> <override> ...``.

Reads ``hydra.sweeper.params`` of ``conf/experiment/<preset>.yaml`` with Hydra's own override
parser and writes their product in Hydra's order (the first key varies slowest), so that
``scripts/reproduce_cpu.sh`` can run the same jobs as ``normbench -m experiment=<preset>``, two at a
time on two cores (``xargs -P 2``) instead of one after another.

    python scripts/sweep_jobs.py ln_axes_cpu
    python scripts/sweep_jobs.py leaderboard_cpu 'experiment/arms/leaderboard@_global_=transformer_cpu' norm=ln,rms

Overrides after the preset replace the sweep's values of their keys (or add keys), as they do on
``normbench -m`` 's command line.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import yaml
from hydra.core.override_parser.overrides_parser import OverridesParser

CONF = Path(__file__).resolve().parent.parent / "conf" / "experiment"


def sweep_params(preset: str) -> dict[str, str]:
    path = CONF / f"{preset}.yaml"
    if not path.is_file():
        valid = ", ".join(sorted(p.stem for p in CONF.glob("*.yaml")))
        raise SystemExit(f"sweep_jobs: unknown preset {preset!r}; valid choices: {valid}")
    params = ((yaml.safe_load(path.read_text()) or {}).get("hydra") or {}).get("sweeper", {}).get("params") or {}
    return {str(k): str(v) for k, v in params.items()}


def jobs(preset: str, overrides: list[str] | None = None) -> list[list[str]]:
    """Every job's overrides (``experiment=<preset>`` first); ``overrides`` (``key=value``, sweeps
    allowed) replace the preset's sweep values of their keys or add keys, in the given order."""
    parser = OverridesParser.create()
    params = sweep_params(preset)
    for override in overrides or []:
        key, sep, value = override.partition("=")
        if not sep:
            raise SystemExit(f"sweep_jobs: override {override!r} is not key=value")
        params[key] = value
    axes = []
    for key, value in params.items():
        override = parser.parse_overrides([f"{key}={value}"])[0]
        values = list(override.sweep_string_iterator()) if override.is_sweep_override() else [value]
        axes.append([f"{key}={v}" for v in values])
    return [[f"experiment={preset}", *combo] for combo in itertools.product(*axes)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset")
    parser.add_argument("overrides", nargs="*", help="key=value (sweeps allowed): replace or add sweep keys")
    args = parser.parse_args(argv)
    for i, overrides in enumerate(jobs(args.preset, args.overrides)):
        print(i, *overrides)
    return 0


if __name__ == "__main__":
    sys.exit(main())
