"""scripts/sweep_jobs.py: a preset's sweep as Hydra's basic sweeper expands it, with overrides that
replace or add sweep keys (how scripts/reproduce_cpu.sh lists leaderboard_cpu's three sweeps)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from hydra.core.global_hydra import GlobalHydra
from omegaconf import open_dict

from normbench.data_roots import sweep_jobs
from tests.conftest import REPO
from tests.test_data_roots import compose_cfg


def load_script():
    spec = importlib.util.spec_from_file_location("sweep_jobs_script", REPO / "scripts" / "sweep_jobs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("overrides", "count"),
    [([], 45), (["experiment/arms/leaderboard@_global_=transformer_enc_cpu", "norm=bn,gn,pn"], 15),
     (["norm=ln,rms", "seed=7"], 2)],
)
def test_jobs_are_the_basic_sweepers_jobs(overrides: list[str], count: int) -> None:
    """The same jobs, in the same order, as ``normbench -m experiment=leaderboard_cpu <overrides>``."""
    script = load_script()
    listed = [sorted(job) for job in script.jobs("leaderboard_cpu", overrides)]
    config = compose_cfg(["experiment=leaderboard_cpu"], hydra=True)
    GlobalHydra.instance().clear()
    with open_dict(config):  # the command line of `normbench -m experiment=leaderboard_cpu <overrides>`
        config.hydra.overrides.task = ["experiment=leaderboard_cpu", *overrides]
    expected = [sorted(job) for job in sweep_jobs(config)]
    assert listed == expected and len(listed) == count


def test_an_override_without_a_value_is_refused() -> None:
    with pytest.raises(SystemExit, match="'norm' is not key=value"):
        load_script().jobs("leaderboard_cpu", ["norm"])
