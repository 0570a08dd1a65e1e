"""Which tree the runs behind a figure or a leaderboard were made from, and the rule that keeps
``results/`` honest.

Each run's ``summary.json`` records its tree (``git``: ``commit``, ``dirty_files``, ``diff_hash``;
`normbench.sinks.files.git_state`). Outputs written into the checkout's ``results/`` folder must come
from runs of one commit whose tree differed, if at all, only under ``results/`` (`check_provenance`
refuses the rest in one line); outputs written anywhere else only get one warning.
`provenance_text` says the same in a paragraph for a README or a ``RUN.txt``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from normbench.analysis.loading.runs import Run
from normbench.base.errors import ConfigError
from normbench.base.output import warn

RESULTS = "results"
CHECKOUT = Path(__file__).resolve().parents[3]
MAX_FILES = 3
"""Changed files named in a refusal or a warning (the rest are counted)."""


def results_root() -> Path:
    """The checkout's ``results/`` folder (where the committed figures and tables live)."""
    return CHECKOUT / RESULTS


def inside(out: str | Path, root: str | Path) -> bool:
    """Whether ``out`` is ``root`` or lies under it (links resolved; neither need exist)."""
    return Path(out).expanduser().resolve().is_relative_to(Path(root).expanduser().resolve())


def git_record(run: Run) -> Mapping[str, Any] | None:
    """The run's recorded tree (``summary.json``: ``git``); None when it has none."""
    git = run.summary.get("git")
    return git if isinstance(git, Mapping) and git.get("commit") else None


def under_results(path: str) -> bool:
    """Whether a changed file (relative to the checkout's top folder) lies under ``results/``."""
    return path == RESULTS or path.startswith(f"{RESULTS}/")


def changed_outside_results(run: Run) -> list[str]:
    """The run's changed files outside ``results/`` ([] for a clean tree or no record)."""
    git = git_record(run) or {}
    return [f for f in git.get("dirty_files") or [] if not under_results(str(f))]


def _folder(run: Run) -> str:
    return run.source or run.name


def _some(files: Sequence[str], n: int = MAX_FILES) -> str:
    more = f" and {len(files) - n} more" if len(files) > n else ""
    return ", ".join(files[:n]) + more


def provenance_problem(runs: Sequence[Run]) -> str | None:
    """Why ``runs`` cannot go into ``results/`` (the first reason, one line), or None: a run
    without a git record, a run whose tree differed outside ``results/``, runs of several commits."""
    for run in runs:
        if git_record(run) is None:
            return (
                f"run {_folder(run)} has no git record (summary.json: git; made outside a git checkout "
                "or by a normbench that did not record its tree)"
            )
        if outside := changed_outside_results(run):
            return f"run {_folder(run)} was made from a tree that differed outside {RESULTS}/: {_some(outside)}"
    commits = list(dict.fromkeys(str(git["commit"]) for r in runs if (git := git_record(r)) is not None))
    if len(commits) > 1:
        other = next(r for r in runs if str((git_record(r) or {}).get("commit")) != commits[0])
        return (
            f"the runs come from {len(commits)} commits: run {_folder(other)} was made at {commits[1][:12]}, "
            f"run {_folder(runs[0])} at {commits[0][:12]}"
        )
    return None


def check_provenance(runs: Sequence[Run], out: str | Path, results: str | Path | None = None) -> None:
    """Call before writing outputs of ``runs`` into ``out``. Into the checkout's ``results/``
    folder (``results``: another one, for tests): `ConfigError` (one line) unless every run was
    made at one commit from a tree that differed, if at all, only under ``results/``. Anywhere
    else: the same finding as one warning, and the outputs are written."""
    problem = provenance_problem(runs)
    if problem is None:
        return
    if inside(out, results if results is not None else results_root()):
        raise ConfigError(
            f"refusing to write {out} (inside {RESULTS}/): {problem}; commit the changes and rerun the runs, "
            f"or write the outputs elsewhere (--out)"
        )
    warn(f"{out}: {problem} (outputs outside {RESULTS}/ are written all the same)")


def provenance_text(runs: Sequence[Run]) -> str:
    """One paragraph on the runs' trees: the commit(s), and whether each tree was clean or which
    files differed from the commit (with the distinct diff hashes)."""
    if not runs:
        return "Provenance: no runs."
    records = [git_record(r) for r in runs]
    known = [g for g in records if g is not None]
    commits = list(dict.fromkeys(str(g["commit"]) for g in known))
    dirty = [g for g in known if g.get("dirty_files")]
    n = len(runs)
    parts = [f"Provenance: {n} run{'s' if n != 1 else ''}"]
    if commits:
        parts.append(f"made at commit{'s' if len(commits) > 1 else ''} " + ", ".join(f"`{c[:12]}`" for c in commits))
    text = " ".join(parts) + "."
    if known and not dirty:
        text += f" {'All' if len(known) == n else len(known)} from a clean tree."
    elif dirty:
        files = sorted({str(f) for g in dirty for f in g["dirty_files"]})
        hashes = sorted({str(g.get("diff_hash"))[:12] for g in dirty})
        text += (
            f" {len(known) - len(dirty)} from a clean tree, {len(dirty)} from a tree that differed from its commit in "
            f"{_some(files, 10)} (diff hash{'es' if len(hashes) > 1 else ''} {', '.join(f'`{h}`' for h in hashes)})."
        )
        if not any(f for g in dirty for f in g["dirty_files"] if not under_results(str(f))):
            text += f" Only files under {RESULTS}/ differed."
    if len(known) < n:
        text += f" {n - len(known)} run{'s' if n - len(known) != 1 else ''} recorded no git tree."
    return text
