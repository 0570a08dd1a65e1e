"""The config's route through the runner (issue 58, item 4): which modules a run's configuration
flows through, in order, and how often the route comes back to a module it had already left.

A tiny run (`tests.conftest.TINY_RUN`, two steps, ``logger=local``) is traced in this process with
`sys.setprofile`. A call counts when a normbench function receives a piece of the configuration
among its arguments: the composed ``DictConfig``, or an instance of one of normbench's typed
config dataclasses (a class whose name ends in ``Config``, e.g. ``RunConfig``, ``HardwareConfig``,
``BatchNormConfig``; ``ConfigError`` aside). A call's module is where its function is defined, except a
method's: a method runs in its object's room, the module of the object's own class (an inherited
``CadenceConfig.check`` on a ``LandscapeConfig`` is the landscape's; ``--by-definition`` counts it
where it is defined, as the issue's first count did). The route is the sequence of those calls'
modules from ``normbench.run.loop.train.run`` on, consecutive repeats merged. Printed: the modules visited, the
moves (module changes), and the returns: moves into a module the route had left before.

    python scripts/config_route.py            # the counts, then the route
    python scripts/config_route.py --quiet    # the counts only
    python scripts/config_route.py --by-definition   # each call at its function's own module
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def is_config(value: Any) -> bool:
    """A piece of the run's configuration: the composed DictConfig or a normbench typed config."""
    kind = type(value)
    if kind.__name__ == "DictConfig":
        return True
    return (
        dataclasses.is_dataclass(value)
        and kind.__module__.startswith("normbench.")
        and kind.__name__.endswith("Config")
    )


def route_of(calls: list[str]) -> dict[str, Any]:
    """The route's counts from the modules of the config-receiving calls, in call order."""
    route = [m for i, m in enumerate(calls) if i == 0 or m != calls[i - 1]]
    left: set[str] = set()
    returns = []
    for before, after in zip(route, route[1:]):
        left.add(before)
        if after in left:
            returns.append(f"{before} -> {after}")
    return {"route": route, "modules": len(set(route)), "moves": len(route) - 1, "returns": returns}


def room_of(frame: Any, by_definition: bool = False) -> str:
    """The module a call runs in: its function's, or for a method (first argument ``self``, an
    instance of a normbench class) its object's class's, unless ``by_definition``."""
    module = frame.f_globals.get("__name__", "")
    code = frame.f_code
    if by_definition or not code.co_argcount or code.co_varnames[0] != "self":
        return module
    owner = type(frame.f_locals.get("self")).__module__
    return owner if owner.startswith("normbench") else module


def trace_tiny_run(run_dir: Path, by_definition: bool = False) -> list[str]:
    """The modules of the config-receiving normbench calls of a two-step tiny run, from `run` on
    (each call's room: `room_of`)."""
    from hydra import compose, initialize_config_dir

    from normbench.cli.main import config_dir
    from normbench.run.loop import train
    from tests.conftest import TINY_RUN

    overrides = [*TINY_RUN, "max_steps=2", "logger=local", "hardware.compile=false"]
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides)
    calls: list[str] = []
    started = False

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal started
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        if not module.startswith("normbench"):
            return
        code = frame.f_code
        if not started:
            started = module == "normbench.run.loop.train" and code.co_name == "run"
        if not started:
            return
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        if any(is_config(frame.f_locals.get(n)) for n in names):
            calls.append(room_of(frame, by_definition))

    sys.setprofile(profile)
    try:
        train.run(cfg, run_dir)
    finally:
        sys.setprofile(None)
    return calls


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quiet", action="store_true", help="the counts only")
    parser.add_argument("--by-definition", action="store_true", help="each call at its function's module")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        found = route_of(trace_tiny_run(Path(tmp) / "run", args.by_definition))
    print(f"[config_route] modules {found['modules']}, moves {found['moves']}, returns {len(found['returns'])}")
    if not args.quiet:
        print("route: " + " -> ".join(m.removeprefix("normbench.") for m in found["route"]))
        print("returns: " + "; ".join(found["returns"]))
    return found


if __name__ == "__main__":
    main()
