"""The journey of issue 58: a contributor adds a norm with exactly three edits (the class with its
config, ``conf/norm/<name>.yaml``, one row of tests/norms/specs.py), in a copy of the repository,
and the default suite of tests/norms, tests/conf and tests/test_registry.py passes there (minutes:
slow; `tests/norms/test_specs.py` checks discovery and coverage in the default suite)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

COPIED = ("normbench", "conf", "tests", "scripts", "hydra_plugins", "docs")
COPIED_FILES = ("pyproject.toml", "README.md", "INVARIANCES.md", "ARCHITECTURE.md")

NORM_MODULE = '''"""``scale``: y = γ·x per channel, no statistics (a toy norm)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from normbench.norms import functional as NF
from normbench.norms.base import Norm
from normbench.norms.registry import NormConfig, register_norm


@dataclass
class ScaleConfig(NormConfig):
    """``affine`` is the scale γ; nothing else."""


@register_norm("scale", ScaleConfig)
class Scale(Norm):
    """x·γ per channel (train and eval alike); no β, no eps used."""

    NORMALIZES_OVER = {"NCHW": "nothing", "NTC": "nothing"}

    def __init__(self, num_features: int, **kw) -> None:
        super().__init__(num_features, **kw, bias=False)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        return NF.channel_affine(x, self.weight, None, self.layout).to(x.dtype)  # bf16 in, bf16 out
'''
CONFIG = """# scale: y = gamma * x per channel, no statistics (a toy norm).
defaults:
  - /schema/norm@_here_: scale
  - _self_
"""
SPEC_ROW = """    "scale": Spec(  # y = γ·x: no statistics, so nothing is undone
        nchw=lambda x, m: affine(x, m),
        ntc=lambda x, mask, m: affine(x[mask], m, -1),
        invariances=both(NOTHING),
    ),
"""


def copy_repo(dest: Path) -> Path:
    """The files the tests read, without .git, results/ or caches; ``shared/`` (the data subsets)
    linked beside it as it sits beside the checkout."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    repo = dest / "repo"
    for name in COPIED:
        shutil.copytree(REPO / name, repo / name, ignore=ignore)
    for name in COPIED_FILES:
        shutil.copy2(REPO / name, repo / name)
    if (REPO.parent / "shared").exists():
        (dest / "shared").symlink_to(REPO.parent / "shared")
    return repo


def copy_env(repo: Path) -> dict[str, str]:
    """The environment a process in the copy runs under: the copy's package first, W&B offline, no
    plugins of the checkout's."""
    env = {**os.environ, "PYTHONPATH": str(repo), "WANDB_MODE": "offline", "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("NORMBENCH_PLUGINS", None)
    return env


def pytest_in(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``pytest <args>`` run in the copy (`copy_env`), verbose, its output captured."""
    return subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:randomly", "-p", "no:cacheprovider", "-v"],
                          cwd=repo, env=copy_env(repo), capture_output=True, text=True, timeout=1800,
                          check=False)  # fmt: skip


def three_edits(repo: Path) -> list[Path]:
    """The contributor's edits: a new module, a new config file, one row added to the table."""
    (repo / "normbench" / "norms" / "scale.py").write_text(NORM_MODULE)
    (repo / "conf" / "norm" / "scale.yaml").write_text(CONFIG)
    specs = repo / "tests" / "norms" / "specs.py"
    text = specs.read_text()
    head, sep, tail = text.partition("SPECS: dict[str, Spec] = {\n")
    end = tail.index("\n}\n") + 1  # the table's closing brace
    specs.write_text(head + sep + tail[:end] + SPEC_ROW + tail[end:])
    return [repo / "normbench" / "norms" / "scale.py", repo / "conf" / "norm" / "scale.yaml", specs]


@pytest.mark.slow
def test_a_norm_in_three_edits_passes_the_default_suite(tmp_path: Path) -> None:
    repo = copy_repo(tmp_path)
    before = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    edited = three_edits(repo)
    after = {p: p.read_bytes() for p in repo.rglob("*") if p.is_file()}
    assert sorted(p for p in after if before.get(p) != after[p]) == sorted(edited)
    env = copy_env(repo)
    r = pytest_in(repo, "tests/norms", "tests/conf", "tests/test_registry.py", "-m", "not slow and not e2e")
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    for test in (
        "test_registry.py::test_matches_formula_and_torch_float64[scale] PASSED",
        "test_sequences.py::test_matches_reference_on_real_tokens[scale] PASSED",
        "test_invariance.py::test_measurement_runs_is_deterministic_and_matches_the_maths"
        "[scale-NTC-weight_matrix_rescaling] PASSED",
        "test_compose.py::test_every_group_option_composes[norm=scale] PASSED",
        "test_registry.py::test_the_registered_name_is_the_only_place_the_name_is_written[norm=scale] PASSED",
    ):
        assert test in r.stdout, test
    where = subprocess.run(
        [sys.executable, "-c", "import normbench; print(normbench.__file__)"],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert where.stdout.startswith(f"{repo}/normbench/"), where.stdout  # the copy's package ran, not the checkout's
