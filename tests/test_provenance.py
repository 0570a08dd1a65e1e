"""Provenance: the tree a run was made from (``summary.json``: ``git``, ``git_commit``), the rules
hash of its preset (``rules``), and the refusal to write ``results/`` from runs of a changed tree."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from normbench.analysis.loading.provenance import check_provenance, provenance_problem, provenance_text
from normbench.analysis.loading.runs import Run
from normbench.base.errors import ConfigError
from normbench.rules import rules_hash
from normbench.sinks.files import commit_label, git_state
from tests.conftest import TINY_RUN, run_cli

SHA_A, SHA_B = "a" * 40, "b" * 40


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real git repository with one commit (``normbench/model.py``, ``results/README.md``), git
    kept from the user's own config and from any repository above ``tmp_path``."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    root = tmp_path / "checkout"
    (root / "normbench").mkdir(parents=True)
    (root / "results").mkdir()
    (root / "normbench" / "model.py").write_text("x = 1\n")
    (root / "results" / "README.md").write_text("results\n")
    (root / ".gitignore").write_text("outputs/\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", "."], cwd=root, check=True)
    subprocess.run([*git, "commit", "-qm", "first"], cwd=root, check=True)
    return root


def head(root: Path) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()


def test_git_state_of_a_clean_then_changed_tree(repo: Path) -> None:
    sha = head(repo)
    assert git_state(repo) == {"commit": sha, "dirty_files": [], "diff_hash": None, "untracked_elsewhere": 0}
    assert commit_label(git_state(repo)) == sha
    assert commit_label(git_state(repo / "normbench")) == sha  # from a subfolder too
    (repo / "normbench" / "model.py").write_text("x = 2\n")
    (repo / "normbench" / "new.py").write_text("y = 1\n")  # untracked, not ignored
    (repo / "outputs").mkdir()
    (repo / "outputs" / "run.log").write_text("ignored\n")  # ignored: not part of the tree
    state = git_state(repo)
    assert state is not None
    assert state["commit"] == sha
    assert state["dirty_files"] == ["normbench/model.py", "normbench/new.py"]
    assert re.fullmatch(r"[0-9a-f]{64}", state["diff_hash"])
    assert commit_label(state) == f"{sha}+dirty"
    assert git_state(repo / "normbench") == state


def test_untracked_files_outside_the_code_are_counted_not_listed(repo: Path) -> None:
    """A venv or notes inside the checkout (not ignored) neither dirty the tree nor enter the record."""
    sha = head(repo)
    venv = repo / "myenv" / "lib"
    venv.mkdir(parents=True)
    for i in range(50):
        (venv / f"m{i}.py").write_text(f"v = {i}\n")
    (repo / "notes.txt").write_text("mine\n")
    state = git_state(repo)
    assert state == {"commit": sha, "dirty_files": [], "diff_hash": None, "untracked_elsewhere": 51}
    assert commit_label(state) == sha
    (repo / "conf").mkdir(exist_ok=True)
    (repo / "conf" / "new.yaml").write_text("a: 1\n")  # where it can change a run: listed and hashed
    state = git_state(repo)
    assert state is not None and state["dirty_files"] == ["conf/new.yaml"] and state["untracked_elsewhere"] == 51
    assert len(json.dumps(state)) < 300


def test_gitignore_covers_venvs_and_caches() -> None:
    """The checkout's own .gitignore keeps the usual venv and cache folders out of a run's record."""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run(["git", "check-ignore", "--no-index", ".venv/bin/python", "venv/x", "env/x", ".tox/x",
                          "outputs/x", "multirun/x", ".mypy_cache/x", "site/index.html"],
                         cwd=root, capture_output=True, text=True)  # fmt: skip
    assert out.stdout.split() == [".venv/bin/python", "venv/x", "env/x", ".tox/x", "outputs/x", "multirun/x",
                                  ".mypy_cache/x", "site/index.html"]  # fmt: skip


def test_diff_hash_changes_with_the_diff_and_only_then(repo: Path) -> None:
    model, new = repo / "normbench" / "model.py", repo / "normbench" / "new.py"
    model.write_text("x = 2\n")
    first = git_state(repo)["diff_hash"]  # type: ignore[index]
    assert git_state(repo)["diff_hash"] == first  # type: ignore[index]  # stable
    subprocess.run(["git", "add", "normbench/model.py"], cwd=repo, check=True)
    assert git_state(repo)["diff_hash"] == first  # type: ignore[index]  # staged or not: the same diff
    model.write_text("x = 3\n")
    second = git_state(repo)["diff_hash"]  # type: ignore[index]
    assert second != first
    new.write_text("y = 1\n")
    third = git_state(repo)["diff_hash"]  # type: ignore[index]
    assert third != second
    new.write_text("y = 2\n")  # an untracked file's bytes count too
    assert git_state(repo)["diff_hash"] not in (second, third)  # type: ignore[index]
    new.write_text("y = 1\n")
    assert git_state(repo)["diff_hash"] == third  # type: ignore[index]


def test_no_repository_no_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert git_state(tmp_path) is None and commit_label(git_state(tmp_path)) is None
    monkeypatch.setenv("PATH", str(tmp_path))  # no git program at all: no record, no error
    assert git_state() is None and commit_label(git_state()) is None


def run(folder: str, commit: str | None = SHA_A, dirty: list[str] | None = None) -> Run:
    summary: dict[str, Any] = {"status": "finished"}
    if commit is not None:
        summary["git"] = {"commit": commit, "dirty_files": dirty or [], "diff_hash": "d" * 64 if dirty else None}
    return Run(name=folder.rsplit("/", 1)[-1], config={}, history=[], summary=summary, source=folder)


def test_results_accepts_clean_runs_and_runs_dirty_only_under_results(tmp_path: Path) -> None:
    results = tmp_path / "results"
    runs = [run("sweep/0"), run("sweep/1", dirty=["results/README.md", "results/x/claims.csv"])]
    check_provenance(runs, results / "santurkar_vgg", results=results)
    assert provenance_problem(runs) is None
    text = provenance_text(runs)
    assert f"`{SHA_A[:12]}`" in text and "1 from a clean tree" in text and "Only files under results/" in text
    assert provenance_text(runs[:1]) == f"Provenance: 1 run made at commit `{SHA_A[:12]}`. All from a clean tree."


@pytest.mark.parametrize(
    ("runs", "needles"),
    [
        (
            [run("sweep/0"), run("sweep/1", dirty=["normbench/a.py", "normbench/b.py", "conf/c.yaml", "d.py"])],
            ["run sweep/1", "outside results/", "normbench/a.py, normbench/b.py, conf/c.yaml and 1 more"],
        ),
        ([run("sweep/0"), run("sweep/1", commit=SHA_B)], ["2 commits", "run sweep/1", SHA_B[:12], SHA_A[:12]]),
        ([run("sweep/0"), run("sweep/1", commit=None)], ["run sweep/1", "no git record"]),
    ],
    ids=["dirty-outside-results", "two-commits", "no-record"],
)
def test_results_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], runs: list[Run], needles: list[str]
) -> None:
    results = tmp_path / "results"
    with pytest.raises(ConfigError) as e:
        check_provenance(runs, results / "leaderboard_cpu", results=results)
    message = str(e.value)
    assert "\n" not in message and "refusing to write" in message
    assert all(n in message for n in needles), message
    check_provenance(runs, tmp_path / "mine", results=results)  # elsewhere: one warning, no error
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("normbench: warning:") and needles[0] in err[0]


def test_provenance_text_names_the_changed_files() -> None:
    runs = [run("s/0", dirty=["normbench/a.py"]), run("s/1", commit=SHA_B), run("s/2", commit=None)]
    text = provenance_text(runs)
    assert "\n" not in text
    assert f"`{SHA_A[:12]}`, `{SHA_B[:12]}`" in text and "normbench/a.py" in text and "`dddddddddddd`" in text
    assert "1 run recorded no git tree" in text


@pytest.mark.e2e
def test_a_run_records_its_tree_and_rules(tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = run_cli(*TINY_RUN, "dataset.num_train=64", "dataset.num_test=32", f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    git = summary["git"]
    assert re.fullmatch(r"[0-9a-f]{40}", git["commit"])
    assert isinstance(git["dirty_files"], list) and (git["diff_hash"] is None) == (not git["dirty_files"])
    assert summary["git_commit"] == commit_label(git)
    assert summary["rules"] == {"preset": "quickstart", "hash": rules_hash("quickstart")}
