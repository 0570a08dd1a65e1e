"""The run folder's layout (`normbench.base.layout.RunDir`): its paths, and each file name spelt in
one module of the package (read with `ast`: string constants, docstrings and comments aside)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import normbench
from normbench.base.layout import RunDir, conf_dir

PACKAGE = Path(normbench.__file__).resolve().parent
NAMES = (
    RunDir.METRICS,
    RunDir.SUMMARY,
    RunDir.CONFIG,
    RunDir.CHECKPOINTS,
    RunDir.LOCK,
    RunDir.TRACEBACK,
    RunDir.RESTARTS,
    RunDir.HYDRA,
    RunDir.TRAINED,
    *RunDir.HYDRA_FILES,
)
"""The names a literal may spell once (``wandb`` aside: W&B's own folders under HOME and the
logger's name spell it too)."""


def docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that stand alone as statements (docstrings, attribute docs)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    }


def named_files(source: str, names: tuple[str, ...] = NAMES) -> set[str]:
    """The ``names`` that a string constant of ``source`` spells: the whole constant, or a part of
    a path written as one (``".hydra/overrides.yaml"``); prose that mentions a name is not one."""
    tree = ast.parse(source)
    skip = docstrings(tree)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            found |= set(node.value.split("/")) & set(names)
    return found


def modules_naming() -> dict[str, set[str]]:
    where: dict[str, set[str]] = defaultdict(set)
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in named_files(path.read_text()):
            where[name].add(str(path.relative_to(PACKAGE.parent)))
    return where


def test_the_finder_sees_paths_and_not_prose_or_docstrings():
    source = '''"""A module that writes summary.json."""
def f(run_dir):
    """Reads ``metrics.jsonl``."""
    message = "no summary.json here"  # a mention, for a person
    glob = f"*/.hydra/{x}"
    return run_dir / "config.yaml", run_dir / "checkpoints/step-1.pt", glob
'''
    assert named_files(source) == {"config.yaml", "checkpoints", ".hydra"}


def test_each_run_folder_name_is_spelt_in_one_module():
    where = modules_naming()
    twice = {name: sorted(modules) for name, modules in where.items() if len(modules) > 1}
    assert not twice, f"run-folder names spelt in more than one module (use normbench.base.layout.RunDir): {twice}"
    assert {name for name, modules in where.items() if modules == {"normbench/base/layout.py"}} == set(NAMES)


def test_a_run_dirs_paths_are_the_files_a_run_writes(tmp_path):
    files = RunDir(tmp_path)
    assert files.metrics == tmp_path / "metrics.jsonl"
    assert files.summary == tmp_path / "summary.json"
    assert files.config == tmp_path / "config.yaml"
    assert files.checkpoints == tmp_path / "checkpoints"
    assert files.lock == tmp_path / ".normbench.lock"
    assert files.wandb == tmp_path / "wandb"
    assert files.restarts == tmp_path / "restarts"
    assert files.traceback == tmp_path / "traceback.txt"
    assert files.hydra_config == tmp_path / ".hydra" / "config.yaml"
    assert files.hydra_overrides == tmp_path / ".hydra" / "overrides.yaml"
    assert files.trained_overrides == tmp_path / ".hydra" / "trained" / "overrides.yaml"
    assert RunDir(str(tmp_path)) == files  # a str is taken as its Path
    with pytest.raises(AttributeError):
        files.path = tmp_path / "other"  # type: ignore[misc]


def test_the_records_a_run_writes_are_its_results_and_config():
    assert set(RunDir.RECORDS) == {"metrics.jsonl", "summary.json", "config.yaml"}
    assert set(RunDir.RESULTS) == {"metrics.jsonl", "summary.json", "checkpoints", "wandb"}
    assert set(RunDir.NOT_RUNS) == {"wandb", ".hydra", "checkpoints"}


def test_conf_dir_is_the_checkouts_conf():
    assert conf_dir() == PACKAGE.parent / "conf"
    assert (conf_dir() / "config.yaml").is_file()
