"""``normbench resume=true hydra.run.dir=R`` alone resumes the run in ``R`` as it was started.

Hydra composes a config from the command line only, so a run started with overrides
(``experiment=quickstart dataset.root=… norm=gn``) would be resumed with the defaults and refused
as "another configuration". `with_recorded_overrides` puts the run's own overrides, as Hydra
recorded them in ``R/.hydra/overrides.yaml`` (the accepted run's copy in ``.hydra/trained/`` first),
before those of the command line; a key given on the command line wins, a setting of how a segment
runs (the logger, checkpoints, threads: `HOW_IT_RUNS`) is never taken from the record, and the checkpoint's check
(`normbench.resume.checkpoint.config_difference`) refuses every other difference in one line.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import yaml

from normbench.base.errors import ConfigError
from normbench.base.layout import RunDir


def override_key(arg: str) -> str:
    """The key an override sets: ``+a.b=1`` → ``a.b``, ``~x`` → ``x``, ``norm=gn`` → ``norm``."""
    return arg.split("=", 1)[0].lstrip("+~")


HOW_IT_RUNS = ("resume", "logger", "checkpoint", "hardware.num_threads")
"""Settings of how a segment runs, not of what it computes (`normbench.resume.checkpoint`'s
volatile and neutral keys): taken from this command line, never from the record (a segment run with
``logger.local=false`` does not make the next one write no files)."""


def _how_it_runs(key: str) -> bool:
    return any(key == k or key.startswith(f"{k}.") for k in HOW_IT_RUNS)


def how_it_runs(override: str) -> bool:
    """``override`` sets how a segment runs (`HOW_IT_RUNS`: ``resume=True``, ``logger=local``), not a setting."""
    return _how_it_runs(override_key(override))


def _value(args: Sequence[str], key: str) -> str | None:
    found = [a.split("=", 1)[1] for a in args if "=" in a and override_key(a) == key]
    return found[-1] if found else None


def recorded_overrides(run_dir: Path) -> list[str] | None:
    """The overrides ``run_dir``'s run was started with, None when it recorded none."""
    files = RunDir(run_dir)
    for path in (files.trained_overrides, files.hydra_overrides):  # the accepted run's copy first
        if path.is_file():
            try:
                found = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError) as e:
                raise ConfigError(f"resume=true: {path} cannot be read ({type(e).__name__}); "
                                  "give the run's overrides on the command line") from None  # fmt: skip
            if not isinstance(found, list) or not all(isinstance(a, str) for a in found):
                raise ConfigError(f"resume=true: {path} is not a list of overrides; give the run's overrides "
                                  "on the command line")  # fmt: skip
            return found
    return None


def with_recorded_overrides(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """``args`` with the recorded overrides of the run it resumes put first (those whose key the
    command line does not set), and the overrides taken; ``args`` unchanged outside a single run's
    ``resume=true hydra.run.dir=R``."""
    args = list(args)
    if any(a in ("-m", "--multirun") for a in args) or (_value(args, "resume") or "").lower() != "true":
        return args, []
    run_dir = _value(args, "hydra.run.dir")
    recorded = recorded_overrides(Path(run_dir)) if run_dir else None
    if not recorded:
        return args, []
    given = {override_key(a) for a in args if "=" in a or a.startswith("~")}
    taken = [a for a in recorded if override_key(a) not in given and not _how_it_runs(override_key(a))]
    return [*taken, *args], taken


ENDED = ("finished", "diverged")
"""A run that ended with a result: a resume has nothing to continue."""


def ended_run(args: Sequence[str]) -> str | None:
    """For a single run's ``resume=true hydra.run.dir=R`` (no other setting but how it runs) where
    ``R`` holds a run that ended with a result: the line that says so (the command then does
    nothing: no new segment, W&B run or doubled wall time); None otherwise."""
    if any(a in ("-m", "--multirun") for a in args) or (_value(args, "resume") or "").lower() != "true":
        return None
    settings = [a for a in args if "=" in a and override_key(a) not in ("resume", "hydra.run.dir")
                and not _how_it_runs(override_key(a))]  # fmt: skip
    if settings:  # a setting given: the checkpoint's check says whether it is the run's own
        return None
    run_dir = _value(args, "hydra.run.dir")
    try:
        summary = json.loads(RunDir(run_dir).summary.read_text()) if run_dir else None
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or summary.get("status") not in ENDED:
        return None
    step = summary.get("step", "?")
    return (f"[normbench] {run_dir} holds a run that {summary['status']} at step {step}: nothing to resume (its "
            "results stand; start a new run in another hydra.run.dir)")
