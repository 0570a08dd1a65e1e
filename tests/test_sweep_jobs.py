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
    [
        ([], 45),
        (["experiment/arms/leaderboard@_global_=transformer_enc_cpu", "norm=bn,gn,pn"], 15),
        (["norm=ln,rms", "seed=7"], 2),
    ],
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


@pytest.mark.parametrize("preset", ["rmsnorm_speed_cpu", "rmsnorm_time_cpu"])
def test_timed_presets_interleave_their_arms(preset: str) -> None:
    """In the presets that judge speed on the 2-core machine the seed varies slowest, so the jobs
    reproduce_cpu.sh runs side by side (2i, 2i+1) are runs of one seed and each norm meets the same
    kind of neighbour; with the norm outermost (the rmsnorm_speed_cpu runs of 2026-12-02) the eager
    ln runs met each other and the eager rms runs met compiled ln runs."""
    listed = load_script().jobs(preset)
    seeds = [next(o for o in job if o.startswith("seed=")) for job in listed]
    assert seeds == sorted(seeds, key=lambda s: int(s.split("=")[1]))
    arms = [tuple(o for o in job if not o.startswith("seed=")) for job in listed]
    per_seed = len(set(arms))
    assert len(listed) == 5 * per_seed and per_seed > 1
    assert all(len(set(arms[i : i + per_seed])) == per_seed for i in range(0, len(arms), per_seed))
