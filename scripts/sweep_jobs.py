"""The jobs of an experiment preset's sweep, one line each: ``<index> <override> <override> ...``.

Reads ``hydra.sweeper.params`` of ``conf/experiment/<preset>.yaml`` with Hydra's own override
parser and writes their product in Hydra's order (the first key varies slowest), so that
``scripts/reproduce_cpu.sh`` can run the same jobs as ``normbench -m experiment=<preset>``, two at a
time on two cores (``xargs -P 2``) instead of one after another.

    python scripts/sweep_jobs.py ln_axes_cpu
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


def jobs(preset: str) -> list[list[str]]:
    """Every job's overrides (``experiment=<preset>`` first)."""
    parser = OverridesParser.create()
    axes = []
    for key, value in sweep_params(preset).items():
        override = parser.parse_overrides([f"{key}={value}"])[0]
        values = list(override.sweep_string_iterator()) if override.is_sweep_override() else [value]
        axes.append([f"{key}={v}" for v in values])
    return [[f"experiment={preset}", *combo] for combo in itertools.product(*axes)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset")
    args = parser.parse_args(argv)
    for i, overrides in enumerate(jobs(args.preset)):
        print(i, *overrides)
    return 0


if __name__ == "__main__":
    sys.exit(main())
