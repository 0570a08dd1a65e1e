"""Where metrics go: local files in the run directory, and Weights & Biases.

Local: ``metrics.jsonl`` (one JSON object a line: ``step``, ``epoch`` and every metric as logged),
``config.yaml`` (the resolved config) and ``summary.json`` (final metrics, status, wall time,
git commit and tree (`run_provenance`), the preset's rules hash, versions, device), each written
atomically. W&B: `normbench.sinks.wandb_run.WandbSink`
(which imports this module, never the other way round), finished in a ``finally`` so that each
job of a multirun in one process is its own W&B run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normbench.base.errors import RecordsVanished
from normbench.base.hydra_job import hydra_preset
from normbench.base.layout import RunDir
from normbench.base.output import atomic_write_text, warn
from normbench.records.folders import checkout_root
from normbench.records.segments import RecordsWatch
from normbench.rules import rules_hash

if TYPE_CHECKING:
    from normbench.resume.checkpoint import Load


@dataclass
class Histogram:
    """A histogram metric: ``counts[i]`` values fell in [edges[i], edges[i+1]).

    W&B logs it as ``wandb.Histogram``; ``metrics.jsonl`` leaves it out (log its summary numbers
    beside it).
    """

    counts: list[float]
    edges: list[float]


def _jsonable(v: Any) -> Any:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)  # "nan" / "inf": JSON has no literal for them
    return v


GIT_TIMEOUT_S = 10.0
"""Seconds each git call may take; a slower (or missing) git records no tree, it never fails a run."""


def _top(path: Path | None) -> Path | None:
    if path is None:
        return checkout_root()
    path = Path(path).resolve()
    return next((p for p in (path, *path.parents) if (p / ".git").exists()), None)


def _git(top: Path, *args: str) -> bytes | None:
    """``git args`` in ``top`` (its stdout), None when git is missing, slow or fails. No optional
    locks: a run's ``git status`` never takes ``index.lock`` from a commit made meanwhile."""
    try:
        return subprocess.run(
            ["git", "--no-optional-locks", *args], cwd=top, capture_output=True, timeout=GIT_TIMEOUT_S, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None


CODE_ROOTS = ("normbench/", "conf/", "hydra_plugins/", "pyproject.toml")
"""Where an untracked file can change what a run does: the package, its configs, the Hydra plugins.
Untracked files elsewhere (a venv, notes, outputs not yet ignored) are only counted."""


def _status(top: Path) -> tuple[str, list[str], list[str]] | None:
    """(HEAD's sha, tracked files changed against HEAD, untracked files git does not ignore), all
    from one ``git status``; paths relative to ``top``. None: no git, no repository, no commit."""
    out = _git(top, "status", "--porcelain=v2", "--branch", "-z", "--untracked-files=all")
    if out is None:
        return None
    sha, tracked, untracked = None, [], []
    fields = iter(out.decode("utf-8", "surrogateescape").split("\0"))
    for entry in fields:
        kind = entry[:1]
        if entry.startswith("# branch.oid "):
            sha = entry.removeprefix("# branch.oid ")
        elif kind == "?":
            untracked.append(entry[2:])
        elif kind in ("1", "u"):  # changed; unmerged
            tracked.append(entry.split(" ", 8 if kind == "1" else 10)[-1])
        elif kind == "2":  # renamed or copied: the new path, then (its own field) the old one
            tracked += [entry.split(" ", 9)[-1], next(fields, "")]
    if not sha or sha == "(initial)":
        return None
    return sha, sorted(set(tracked) - {""}), sorted(untracked)


def in_code(path: str) -> bool:
    """Whether an untracked file (relative to the checkout's top) lies where it can change a run."""
    return any(path == root or path.startswith(root) for root in CODE_ROOTS)


def _diff_hash(top: Path, untracked: list[str]) -> str | None:
    """SHA-256 of ``git diff HEAD --binary`` (staged and unstaged changes) and of each untracked
    file's path and bytes (a link: its target). None when git cannot give the diff."""
    diff = _git(top, "diff", "HEAD", "--binary", "--no-color", "--no-ext-diff", "--no-renames")
    if diff is None:
        return None
    h = hashlib.sha256(diff)
    for name in untracked:
        h.update(b"\0untracked\0" + name.encode("utf-8", "surrogateescape") + b"\0")
        path = top / name
        try:
            if path.is_symlink():
                h.update(b"link\0" + os.fsencode(os.readlink(path)))
            else:
                with open(path, "rb") as f:
                    for chunk in iter(lambda: f.read(1 << 20), b""):
                        h.update(chunk)
        except OSError:  # gone since ``git status``, or a folder (a nested repository)
            h.update(b"unreadable\0")
    return h.hexdigest()


def git_state(path: Path | None = None) -> dict[str, Any] | None:
    """The tree a run is made from: ``{"commit": sha, "dirty_files": [...], "diff_hash": ...,
    "untracked_elsewhere": n}``.

    ``dirty_files``: the tracked files changed against HEAD (staged or not) and the untracked files
    git does not ignore that lie where they can change a run (`CODE_ROOTS`), relative to the
    checkout's top folder; ``diff_hash``: SHA-256 (hex) of ``git diff HEAD --binary`` and of each of
    those untracked files' path and bytes (`_diff_hash`); ``[]`` and None for a clean tree.
    ``untracked_elsewhere``: how many other untracked files there are (a venv inside the checkout,
    notes): counted, never listed or read, so that the record stays small and fast. One git call
    for a clean tree, two for a dirty one. None outside a git checkout (``path``: a folder in it;
    default: the checkout of this package, if any), without git, or when git does not answer within
    `GIT_TIMEOUT_S`."""
    top = _top(path)
    status = _status(top) if top is not None else None
    if status is None or top is None:
        return None
    sha, tracked, untracked = status
    code = [f for f in untracked if in_code(f)]
    files = sorted(set(tracked) | set(code))
    return {"commit": sha, "dirty_files": files, "diff_hash": _diff_hash(top, code) if files else None,
            "untracked_elsewhere": len(untracked) - len(code)}  # fmt: skip


def commit_label(state: Mapping[str, Any] | None) -> str | None:
    """``sha``, or ``sha+dirty`` when the tree had changed or untracked files (`git_state`)."""
    if not state:
        return None
    return str(state["commit"]) + ("+dirty" if state.get("dirty_files") else "")


def run_provenance() -> dict[str, Any]:
    """What a run's summary records of where it came from: ``git_commit`` (`commit_label`), ``git``
    (`git_state`) and ``rules``: the preset (`hydra_preset`) and the hash of its rules
    (`normbench.rules.rules_hash`; None for a preset without a rules file)."""
    git = git_state()
    preset = hydra_preset()
    return {"git_commit": commit_label(git), "git": git, "rules": {"preset": preset, "hash": rules_hash(preset)}}


class LocalSink:
    """``metrics.jsonl`` appended line by line; ``config.yaml`` and ``summary.json`` atomically.

    ``metrics.jsonl`` is only ever appended to, or cut back to ``resume_offset``: its byte length
    at the checkpoint a run resumes from (what was written after it, steps that will be trained
    again or a half-written line, goes). A resume from a checkpoint that knows no offset (every
    segment so far ran with ``logger.local=false``) appends to whatever is there; nothing a
    segment logged is ever rewritten from scratch.

    A resume checks what it continues (`check_resumed_metrics`): a file shorter than the
    checkpoint's offset (rows lost) or whose first ``resume_offset`` bytes are not those the run
    wrote (``resume_sha256``: garbage, an edit) is a `ConfigError` naming the file, before
    anything is written; a file moved aside is started anew with a warning. A ``config.yaml``
    edited by hand is kept beside the run's as ``config.yaml.edited-<n>``, with a warning (the two
    compared as ``load`` reads them: `keep_edited_config`)."""

    def __init__(
        self,
        run_dir: Path,
        config: Mapping[str, Any],
        config_yaml: str,
        resume_offset: int | None = None,
        resume_sha256: str | None = None,
        load: Load | None = None,
    ) -> None:
        self.run_dir = run_dir
        self.files = RunDir(run_dir)
        self.path = self.files.metrics
        if resume_offset is not None:
            check_resumed_metrics(self.path, resume_offset, resume_sha256)
            keep_edited_config(self.files.config, config, load)
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.files.config, config_yaml)
        self._metrics = open(self.path, "ab", buffering=0)  # noqa: SIM115  (open for the run; unbuffered)
        if resume_offset is not None and resume_offset < self._metrics.tell():
            self._metrics.truncate(resume_offset)
            self._metrics.seek(resume_offset)
        self._sha256 = hashlib.sha256(self.path.read_bytes()[: self._metrics.tell()])
        self.watch = RecordsWatch(run_dir)  # before every write: still the run's folder and file
        self.watch.add(self.path)

    def digest(self) -> str:
        """SHA-256 of ``metrics.jsonl`` as written so far (a checkpoint records it with the offset)."""
        return self._sha256.hexdigest()

    def offset(self) -> int:
        """Bytes of ``metrics.jsonl`` written so far (every row is written through at once)."""
        return self._metrics.tell()

    def log(self, step: int, epoch: int, metrics: Mapping[str, Any]) -> None:
        """One JSON line. A write that fails (a full disk) takes its partial line back out, so that
        the file stays whole, and raises the ``OSError`` naming the file."""
        row = {"step": step, "epoch": epoch}
        row.update({k: _jsonable(v) for k, v in metrics.items() if not isinstance(v, Histogram)})
        data = memoryview((json.dumps(row) + "\n").encode())
        self.watch.check()
        start = self._metrics.tell()
        if os.fstat(self._metrics.fileno()).st_size < start:  # `: > metrics.jsonl` under the run
            raise RecordsVanished(self.path, "cut short")
        try:
            rest = data
            while rest:
                rest = rest[self._metrics.write(rest) :]
            self._sha256.update(data)
        except OSError as e:
            with contextlib.suppress(OSError):
                self._metrics.truncate(start)
                self._metrics.seek(start)
            e.filename = e.filename or str(self.path)
            raise

    def finish(self, summary: Mapping[str, Any], exit_code: int = 0) -> None:
        whole = os.fstat(self._metrics.fileno()).st_size >= self._metrics.tell()
        self._metrics.close()
        if not whole and summary.get("status") in ("finished", "diverged"):  # a result on records cut short: none
            raise RecordsVanished(self.path, "cut short")
        self.watch.check(self.run_dir)  # a replaced metrics.jsonl: the folder is the run's, the summary says so
        text = json.dumps({k: _jsonable(v) for k, v in summary.items()}, indent=2, default=str)
        atomic_write_text(self.files.summary, text + "\n")


def check_resumed_metrics(path: Path, offset: int, sha256: str | None) -> None:
    """The ``metrics.jsonl`` a resume continues holds the ``offset`` bytes the run had written at
    its checkpoint, unchanged (``sha256``, when the checkpoint recorded it); else a `ConfigError`
    naming the file. A file that is not there (moved aside) is started anew, with a warning."""
    from normbench.base.errors import ConfigError

    if not path.exists():
        if offset > 0:
            warn(
                f"{path} is not there; the resumed run starts a new one (the rows before its checkpoint are not in it)"
            )
        return
    size = path.stat().st_size
    remedy = f"move it aside (e.g. to {path.name}.damaged) to resume with a new {path.name} from the checkpoint"
    if size < offset:
        raise ConfigError(
            f"{path} holds {size} bytes but held {offset} at the checkpoint: rows were lost after it; {remedy}"
        )
    if sha256 is not None:
        with open(path, "rb") as f:
            prefix = f.read(offset)
        if hashlib.sha256(prefix).hexdigest() != sha256:
            raise ConfigError(
                f"{path}: its first {offset} bytes are not the rows the run wrote up to its checkpoint (damaged or "
                f"edited); {remedy}"
            )


def keep_edited_config(path: Path, config: Mapping[str, Any], load: Load | None = None) -> Path | None:
    """A ``config.yaml`` that differs from the run's ``config`` (an edit by hand: the resumed run
    trains with the checkpoint's config whatever the file says) is kept as
    ``config.yaml.edited-<n>`` with a warning; returns where, or None when it was the run's. The
    two are compared as ``load`` reads them (`record_difference`; None: as they are)."""
    import yaml

    from normbench.resume.checkpoint import config_difference, record_difference

    try:
        saved = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError, yaml.YAMLError):
        saved = None
    if not isinstance(saved, Mapping):
        diff: str | None = "it does not parse"
    else:
        diff = config_difference(saved, config) if load is None else record_difference(saved, config, load)
    if diff is None:
        return None
    n = 1
    while path.with_name(f"{path.name}.edited-{n}").exists():
        n += 1
    kept = path.with_name(f"{path.name}.edited-{n}")
    os.replace(path, kept)
    warn(f"{path} differs from the run's config ({diff}); the run goes on with its own; the edit is kept as {kept}")
    return kept


class MetricLogger:
    """Fans each ``log(step, epoch, metrics)`` out to the sinks that are on.

    A sink that fails while logging reports its error once and is dropped for the rest of the run
    (the others, the local files above all, go on)."""

    def __init__(self, sinks: list[Any]) -> None:
        self.sinks = sinks
        self._dropped: list[Any] = []

    def log(self, step: int, epoch: int, metrics: Mapping[str, Any]) -> None:
        for sink in list(self.sinks):
            self._call(sink, step, sink.log, step, epoch, metrics)

    def _call(self, sink: Any, step: int | None, fn: Any, *args: Any) -> None:
        """``fn(*args)``; if it fails, the sink is dropped with one warning naming the step it failed
        at (a sink that logs on a worker raises a row's error later, with ``failed_step``; ``step``
        None: a call at the run's end, named so when the error carries no step)."""
        try:
            fn(*args)
        except Exception as e:
            if isinstance(sink, LocalSink):
                raise
            self.sinks.remove(sink)
            self._dropped.append(sink)
            at = getattr(e, "failed_step", step)
            where = "at the run's end" if at is None else f"at step {at}"
            warn(f"{type(sink).__name__} failed {where} ({type(e).__name__}: {e}); "
                 "it is switched off for the rest of the run")  # fmt: skip

    def flush(self, step: int | None) -> None:
        """Every sink's rows still on its worker handed on, under `log`'s rule: a row that failed
        there drops its sink with one warning naming its step (``step``: now; None at the run's end)."""
        for sink in [s for s in self.sinks if hasattr(s, "flush")]:
            self._call(sink, step, sink.flush)

    def finish(self, summary: Mapping[str, Any], exit_code: int = 0) -> None:
        """Every sink's end of the run; ``exit_code``: the process's (W&B records it: 128 + signal
        for an interrupted run). A sink's rows still on its worker are flushed first, under
        `log`'s rule: a failing row drops the sink with a warning, it does not fail the run."""
        self.flush(None)
        errors = []
        for sink in self.sinks:
            try:
                sink.finish(summary, exit_code=exit_code)
            except Exception as e:  # a failing sink must not hide the others' results
                errors.append(e)
        for sink in self._dropped:
            with contextlib.suppress(Exception):
                sink.finish(summary, exit_code=exit_code)
        if errors:
            raise errors[0]
