"""The second journey of issue 58: a contributor adds a paper preset in three files
(``conf/experiment/<p>.yaml``, ``conf/experiment/<p>_cpu.yaml``, ``normbench/rules/<p>.yaml``), in a
copy of the repository, and the tests that read the presets pass there: the default suite's
preset, data-root, help, sweep, rules and seed tests, and the slow suite's figure check, whose
synthetic runs come from the new rules alone (`tests.analysis.figures.figure_runs.from_rules`). Minutes: slow."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.norms.test_journey import copy_repo, pytest_in

PRESET = "toy_claim"
FULL = """# @package _global_
# Toy claim (a contributor's example): BatchNorm against no norm on ResNet20 / CIFAR-10, final accuracy.
defaults:
  - override /model: resnet20
  - override /dataset: cifar10
  - override /norm: bn
  - override /diagnostics: "off"
  - _self_

epochs: 30
hydra:
  sweeper:
    params:
      norm: none,bn
      seed: 0,1,2,3,4
"""
CPU = """# @package _global_
# toy_claim at CPU scale: ResNet8 on 5,000 subset images, 1 epoch, none / bn x 5 seeds.
defaults:
  - toy_claim
  - recipes/cifar_cpu
  - _self_

model:
  depth: 8
dataset:
  train_limit: 5000
epochs: 1
hydra:
  sweeper:
    params:
      norm: none,bn
      seed: 3000,3001,3002,3003,3004
"""
RULES = """# Toy claim: BN trains ResNet to a higher final validation accuracy than no norm (a contributor's example).
preset: toy_claim
paper_title: "Toy et al. 2026"
alpha: 0.05
family: holm
min_seeds: 5
scale:
  full: {kind: reduced, note: "ResNet20 on CIFAR-10, 30 epochs"}
  cpu: {kind: reduced, note: "ResNet8 on 5,000 CIFAR-10 images, 1 epoch"}
claims:
  - id: bn_above_none
    short: "BN: higher final accuracy"
    figure: toy_claim
    claim: "The final validation accuracy is higher with BN than without a norm"
    paper: "Toy et al. 2026, Table 1"
    measure: {name: final, key: val/acc}
    a: {label: BN, select: {norm.name: bn}}
    b: {label: none, select: {norm.name: none}}
    relation: greater
    better: higher
    test: welch
    effect: {value: 0.02, source: "Toy et al. 2026, Table 1: +2 points"}
learns:
  - id: learns_cifar10
    measure: {name: final, key: val/acc}
    above: 0.2
    why: "above 2x chance: CIFAR-10 has 10 balanced classes"
seeds:
  cpu: {start: 3000, stop: 3100, note: "the toy's confirmatory block"}
  full: {start: 3000, stop: 3100, note: "no full-scale attempt"}
benchmark_family: {method: bh, q: 0.05, note: "Benjamini-Hochberg over every judged claim of every preset"}
figures:
  fetch: '^val/acc$'
  draw:
    - name: toy_claim
      title: "Final validation accuracy per norm"
      arms: {by: norm.name}
      panels:
        - {panel: final_val_acc, kind: bar, value: final_acc, xlabel: norm, ylabel: final validation accuracy}
"""
DEFAULT_TESTS = ["tests/conf/test_presets.py", "tests/test_data_roots.py", "tests/test_help.py",
                 "tests/test_sweep_jobs.py", "tests/analysis/judging/test_rules_schema.py",
                 "tests/analysis/loading/test_fresh_seeds.py", "tests/analysis/figures/test_figure_runs.py",
                 "tests/analysis/figures/test_figure_spec.py"]  # fmt: skip
"""The default-suite tests that read the presets or the rules (each parametrized over them, or listing them)."""


def three_files(repo: Path) -> list[Path]:
    files = {repo / "conf" / "experiment" / f"{PRESET}.yaml": FULL,
             repo / "conf" / "experiment" / f"{PRESET}_cpu.yaml": CPU,
             repo / "normbench" / "rules" / f"{PRESET}.yaml": RULES}  # fmt: skip
    for path, text in files.items():
        path.write_text(text)
    return sorted(files)


@pytest.mark.slow
def test_a_preset_in_three_files_passes_the_tests_that_read_presets(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path)
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    added = three_files(repo)
    after = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    assert sorted(p for p in after if before.get(p) != after[p]) == added
    r = pytest_in(repo, *DEFAULT_TESTS, "-m", "not slow and not e2e")
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    for test in (f"test_presets.py::test_preset_sweep[{PRESET}_cpu] PASSED",
                 f"test_data_roots.py::test_cpu_presets_read_their_data_beside_the_checkout_from_any_directory"
                 f"[{PRESET}_cpu] PASSED",
                 f"test_figure_runs.py::test_every_arm_of_the_rules_gets_its_seeds_and_every_named_key"
                 f"[{PRESET}] PASSED"):
        assert test in r.stdout, test  # fmt: skip
    slow = pytest_in(repo, "tests/analysis/figures/test_figure_checks.py", "-m", "slow", "-k", PRESET)
    assert slow.returncode == 0, slow.stdout[-6000:] + slow.stderr[-3000:]
    assert f"test_every_presets_figures_are_readable[{PRESET}] PASSED" in slow.stdout
