"""scripts/sweep_jobs.py: a preset's sweep as Hydra's basic sweeper expands it, with overrides that
replace or add sweep keys (how scripts/reproduce_cpu.sh lists leaderboard_cpu's three sweeps)."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from hydra.core.global_hydra import GlobalHydra
from omegaconf import open_dict

from normbench.data.roots import sweep_jobs
from tests.conftest import REPO, load_script
from tests.test_data_roots import CPU_PRESETS, compose_cfg


def load_sweep_jobs():
    return load_script("sweep_jobs")


LEADERBOARD_ARM = "experiment/arms/leaderboard@_global_"
LEADERBOARD_CPU_NORMS = ["bn", "brn", "gn", "in", "ln", "ln_sample", "pn", "rms", "none"]  # its yaml's sweep
_LEADERBOARD_SWEEP = yaml.safe_load((REPO / "conf/experiment/leaderboard_cpu.yaml").read_text())["hydra"]["sweeper"]
LEADERBOARD_CPU_SEEDS = [int(s) for s in _LEADERBOARD_SWEEP["params"]["seed"].split(",")]  # the confirmatory seeds


def product_jobs(arms: list[str], norms: list[str], seeds: list[int]) -> set[frozenset[str]]:
    """The jobs expected by hand: every (arm, norm, seed), each job a set of its overrides."""
    return {
        frozenset({"experiment=leaderboard_cpu", f"{LEADERBOARD_ARM}={arm}", f"norm={norm}", f"seed={seed}"})
        for arm, norm, seed in itertools.product(arms, norms, seeds)
    }


SWEEPS = [  # (overrides after experiment=leaderboard_cpu, the jobs they give)
    ([], product_jobs(["resnet8_cpu"], LEADERBOARD_CPU_NORMS, LEADERBOARD_CPU_SEEDS)),
    (
        [f"{LEADERBOARD_ARM}=transformer_enc_cpu", "norm=bn,gn,pn"],
        product_jobs(["transformer_enc_cpu"], ["bn", "gn", "pn"], LEADERBOARD_CPU_SEEDS),
    ),
    (["norm=ln,rms", "seed=7"], product_jobs(["resnet8_cpu"], ["ln", "rms"], [7])),
]


@pytest.mark.parametrize(("overrides", "expected"), SWEEPS)
def test_jobs_are_the_sweeps_product(overrides: list[str], expected: set[frozenset[str]]) -> None:
    """Each job once, and exactly the product of the preset's sweep with the overrides replacing
    its keys' values, written out by hand (45, 15 and 2 jobs)."""
    listed = load_sweep_jobs().jobs("leaderboard_cpu", overrides)
    assert len(listed) == len(expected)
    assert {frozenset(job) for job in listed} == expected


@pytest.mark.parametrize("overrides", [overrides for overrides, _ in SWEEPS])
def test_jobs_are_in_the_basic_sweepers_order(overrides: list[str]) -> None:
    """The same order as ``normbench -m experiment=leaderboard_cpu <overrides>``: Hydra's basic
    sweeper expanding the composed config (``normbench.data.roots.sweep_jobs``)."""
    listed = [sorted(job) for job in load_sweep_jobs().jobs("leaderboard_cpu", overrides)]
    config = compose_cfg(["experiment=leaderboard_cpu"], hydra=True)
    GlobalHydra.instance().clear()
    with open_dict(config):  # the command line of `normbench -m experiment=leaderboard_cpu <overrides>`
        config.hydra.overrides.task = ["experiment=leaderboard_cpu", *overrides]
    assert listed == [sorted(job) for job in sweep_jobs(config)]


def test_an_override_without_a_value_is_refused() -> None:
    with pytest.raises(SystemExit, match="'norm' is not key=value"):
        load_sweep_jobs().jobs("leaderboard_cpu", ["norm"])


def shell(call: str, stdin: str = "") -> list[list[str]]:
    """``call`` run by bash after scripts/reproduce_cpu.sh's ``seed_major`` and ``jobs_of``, with
    this venv's python first on PATH; its output's lines, split."""
    script = (REPO / "scripts" / "reproduce_cpu.sh").read_text()
    functions = ""
    for name in ("seed_major", "jobs_of"):
        start = script.index(f"{name}() {{")
        functions += script[start : script.index("\n}\n", start) + 3]
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    listed = subprocess.run(
        ["bash", "-c", functions + call],
        cwd=REPO,
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PATH": path},
    ).stdout.splitlines()
    return [line.split() for line in listed]


def seed_of(job: list[str]) -> int:
    return int(next(o for o in job if o.startswith("seed=")).split("=")[1])


def arm_of(job: list[str]) -> str:
    """A job's overrides but its seed, sorted: the arm it runs."""
    return " ".join(sorted(o for o in job if not o.startswith("seed=")))


@pytest.mark.e2e
@pytest.mark.parametrize("preset", CPU_PRESETS)
def test_reproduce_cpu_runs_each_preset_seed_by_seed(preset: str) -> None:
    """reproduce_cpu.sh runs a preset's jobs two at a time in list order, so the list goes seed by
    seed: the two jobs side by side are two arms of one seed, and no arm meets systematically
    different neighbours on the two cores (the 2026-12-02 rmsnorm_speed_cpu run, in sweep order with
    the norm outermost, had eager ln beside eager ln and eager rms beside compiled ln). The jobs are
    exactly the sweep's, each once (seed_major on the sweep's list; jobs_of numbers them)."""
    listed = load_sweep_jobs().jobs(preset)  # in this process: one Hydra import for all presets
    rows = shell("seed_major", "".join(f"{i} {' '.join(job)}\n" for i, job in enumerate(listed)))
    swept = sorted(" ".join(sorted(job)) for job in listed)
    assert sorted(" ".join(sorted(row)) for row in rows) == swept
    seeds = [seed_of(row) for row in rows]
    assert seeds == sorted(seeds) and len(set(seeds)) >= 5
    per_seed = len({arm_of(row) for row in rows})
    assert len(rows) == len(set(seeds)) * per_seed  # every arm once per seed


@pytest.mark.e2e
def test_reproduce_cpu_lists_leaderboard_cpu_seed_by_seed() -> None:
    """leaderboard_cpu: the 25 translation jobs first (the long ones), its encoder-norm and full-stack
    sweeps merged seed by seed, then the 45 image jobs seed by seed; numbered 0..69, every job once."""
    rows = shell("jobs_of leaderboard_cpu")
    assert [int(row[0]) for row in rows] == list(range(70))
    seeds = [seed_of(row) for row in rows]
    cells = [next(o for o in row if o.startswith("experiment/arms/")).split("=")[1] for row in rows]
    assert set(cells[:25]) == {"transformer_enc_cpu", "transformer_cpu"} and set(cells[25:]) == {"resnet8_cpu"}
    assert seeds[:25] == sorted(seeds[:25]) and seeds[25:] == sorted(seeds[25:])
    for seed in LEADERBOARD_CPU_SEEDS:  # each seed's translation jobs hold both sweeps' norms
        norms = {next(o for o in row if o.startswith("norm=")) for row, s in zip(rows[:25], seeds[:25]) if s == seed}
        assert norms == {f"norm={n}" for n in ("bn", "gn", "pn", "ln", "rms")}
    assert len({" ".join(sorted(row[1:])) for row in rows}) == 70


@pytest.mark.e2e
def test_a_reader_that_stops_early_gets_no_traceback() -> None:
    """``sweep_jobs.py gn_batch_size_cpu | head -1``: the first job, exit 0, nothing on stderr (a
    BrokenPipeError traceback before)."""
    script = REPO / "scripts" / "sweep_jobs.py"
    proc = subprocess.run(
        f"{sys.executable} {script} gn_batch_size_cpu | head -1; exit ${{PIPESTATUS[0]}}",
        shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith("0 experiment=gn_batch_size_cpu ") and proc.stdout.count("\n") == 1


@pytest.mark.e2e
def test_reproduce_cpu_pilot_runs_the_sweep_at_the_rules_pilot_seeds() -> None:
    """``reproduce_cpu.sh --pilot``: every arm of the sweep, once per pilot seed of the rules, seed by
    seed; the confirmatory seeds none of them."""
    from normbench.analysis.judging.rules_schema import load_rules

    pilot = load_rules("gn_groups_cpu").pilot_seeds
    rows = shell("pilot=1; jobs_of gn_groups_cpu")
    confirmatory = [[o for o in job if o.startswith("seed=")] for job in load_sweep_jobs().jobs("gn_groups_cpu")]
    assert [seed_of(row[1:]) for row in rows] == sorted(seed_of(row[1:]) for row in rows)
    assert {seed_of(row[1:]) for row in rows} == set(pilot)
    assert not {seed_of(row[1:]) for row in rows} & {int(s[0].split("=")[1]) for s in confirmatory}
    arms = {arm_of(row[1:]) for row in rows}
    assert len(rows) == len(arms) * len(pilot) and [int(row[0]) for row in rows] == list(range(len(rows)))


@pytest.mark.e2e
def test_reproduce_cpu_pilot_lists_leaderboard_cpu_at_the_rules_pilot_seeds() -> None:
    """``reproduce_cpu.sh --pilot leaderboard_cpu``: its three sweeps (the 70 confirmatory jobs' arms)
    at the leaderboard rules' pilot seeds: 14 arms x 3 seeds, translation first, numbered 0..41."""
    from normbench.analysis.judging.rules_schema import load_rules

    pilot = load_rules("leaderboard_cpu").pilot_seeds
    rows = shell("pilot=1; jobs_of leaderboard_cpu")
    assert [int(row[0]) for row in rows] == list(range(14 * len(pilot)))
    assert {seed_of(row[1:]) for row in rows} == set(pilot) and not set(pilot) & set(range(5))
    cells = [next(o for o in row if o.startswith("experiment/arms/")).split("=")[1] for row in rows]
    n_translation = 5 * len(pilot)
    assert set(cells[:n_translation]) == {"transformer_enc_cpu", "transformer_cpu"}
    assert set(cells[n_translation:]) == {"resnet8_cpu"}
    assert {arm_of(row[1:]) for row in rows} == {arm_of(row[1:]) for row in shell("jobs_of leaderboard_cpu")}


def script_function(name: str) -> str:
    script = (REPO / "scripts" / "reproduce_cpu.sh").read_text()
    start = script.index(f"{name}() {{")
    return script[start : script.index("\n}\n", start) + 3]


def test_reproduce_cpu_prints_each_finished_job_with_an_eta(tmp_path: Path) -> None:
    """`[k/N] job … in s; … so far, about … to go`: one line per finished job, counted across the parallel jobs."""
    env = {**os.environ, "REPRO_T0": str(int(time.time()) - 60), "REPRO_N": "4", "REPRO_PRESET": "gn_groups_cpu"}
    call = (script_function("progress") + f"progress {tmp_path} 0 0 $(( $(date +%s) - 20 )); "
            f"progress {tmp_path} 3 1 $(( $(date +%s) - 30 )); echo rc=$?")  # fmt: skip
    out = subprocess.run(["bash", "-c", call], capture_output=True, text=True, env=env, check=True).stdout.splitlines()
    assert re.fullmatch(r"\[reproduce\] gn_groups_cpu \[1/4\] job 0 finished in 2\d s; 1 min 0\d s so far, about "
                        r"3 min 0\d s to go", out[0]), out  # fmt: skip
    assert out[1].startswith(f"[reproduce] gn_groups_cpu [2/4] job 3 failed (exit 1, see {tmp_path}/3.log) in 3")
    assert re.search(r"about 1 min 0\d s to go$", out[1]) and out[2] == "rc=1"


def test_reproduce_cpu_reads_its_presets_from_the_rules() -> None:
    """Every rules preset with a `_cpu` variant, the leaderboard aside: no hand list to keep."""
    from normbench.rules import list_rule_presets

    listed = subprocess.run(["bash", "-c", script_function("cpu_presets") + "cpu_presets"], cwd=REPO,
                            capture_output=True, text=True, check=True,
                            env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
                            ).stdout.split()  # fmt: skip
    expected = [f"{p}_cpu" for p in list_rule_presets() if p != "leaderboard"]
    assert listed == expected and len(listed) >= 17
