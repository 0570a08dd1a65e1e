"""Files and the machine (issue 24): a run directory name too long for the file system, a
translation file of NUL bytes, an unwritable ``HOME`` (the ``datasets`` and BPE caches), a full
disk while ``metrics.jsonl`` grows or while the BPE cache is written, and a run refused at each
phase. Each is one line (exit 2 for what the user can change, 1 for a disk with no room), never a
traceback, and leaves nothing it made: the folders around the run are listed before and after.

The disk and ``HOME`` tests use a tmpfs (full: a filler file; read-only: ``-o ro``) in a private
mount namespace, as ``tests/test_faults.py`` does, and are skipped where that is not allowed.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, cli_env
from tests.data.test_translation import run_cli_inprocess, write_files
from tests.faults import fault
from tests.test_faults import LOCAL, UNSHARE, error_lines, in_namespace, leftovers, needs_mounts

MT = (
    "model=transformer_tiny",
    "dataset=iwslt14",
    "dataset.vocab_size=40",
    "epochs=1",
    "logger=local",
    "logger.progress_bar=false",
    "hardware=cpu",
)
"""A translation run on the small files of `write_files`."""


def listing(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` with its bytes (None: a folder)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


def one_error(code: int, stderr: str, expected_code: int) -> str:
    """The one ``normbench: error:`` line of a run that stopped with ``expected_code``, no traceback."""
    assert code == expected_code and "Traceback" not in stderr and "Logging error" not in stderr, stderr[-3000:]
    (line,) = error_lines(stderr)
    return line


LIST = "find . -mindepth 1 ! -name .filler | sort && find . -type f ! -name .filler -exec sha256sum {} + | sort"
"""Paths and SHA-256 of the files under the current folder (a test's filler file aside)."""


def namespace_run(lines: list[str], args: list[str], out: Path, listed: Path | None = None) -> tuple[int, str]:
    """``normbench *args`` after ``lines`` (mounts, exports) in a private mount namespace; exit code
    and stderr. ``listed``: a folder inside a mount whose paths and files' SHA-256 go to
    ``out/listing`` before the namespace goes (its tmpfs with it), as `sums` lists a folder here."""
    out.mkdir()
    cmd = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "normbench", *args])
    script = " && ".join(lines) + f" && {{ {cmd} > {out}/stdout 2> {out}/stderr; echo $? > {out}/rc; "
    if listed is not None:
        script += f"(cd {listed} && {LIST}) > {out}/listing; "
    script += "}"
    r = subprocess.run([*UNSHARE, "sh", "-c", script], cwd=REPO, env=cli_env(), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return int((out / "rc").read_text()), (out / "stderr").read_text()


def sums(root: Path) -> str:
    """What `namespace_run` writes for ``listed=root``, made here for a folder outside a mount."""
    return subprocess.run(["sh", "-c", LIST], cwd=root, capture_output=True, text=True, check=True).stdout


# ---------------------------------------------------------------------------------------------
# The run directory's name


@pytest.mark.parametrize("parent", ["exists", "new"])
@fault("a run directory name too long (300 characters)", "one line naming hydra.run.dir; nothing made", "one-line")
def test_a_run_directory_name_too_long_is_one_line_naming_the_setting(tmp_path, monkeypatch, capsys, parent) -> None:
    base = tmp_path / "runs"
    if parent == "exists":
        base.mkdir()
    run_dir = base / ("a" * 300)
    before = listing(tmp_path)
    code, err = run_cli_inprocess(monkeypatch, capsys, *LOCAL, f"hydra.run.dir={run_dir}")
    shown = f"{str(run_dir)[:60]}...{str(run_dir)[-60:]}"
    assert one_error(code, err, 2) == (
        f"normbench: error: hydra.run.dir={shown} cannot be made: the folder name {'a' * 24}... is 300 bytes long "
        "and the file system allows 255 (errno 36); choose a shorter hydra.run.dir"
    )
    assert listing(tmp_path) == before  # not even the parent that mkdir made before it failed


# ---------------------------------------------------------------------------------------------
# Translation data


@pytest.mark.parametrize(
    "content, where",
    [
        (b"\0" * 4096, "line 1: a NUL byte (0x00) at column 1"),
        (b"ab cd\nef\0gh\n", "line 2: a NUL byte (0x00) at column 3"),
    ],
    ids=["all-nul", "one-nul"],
)
@fault("a translation file of NUL bytes", "one line naming the file and line; nothing made", "one-line")
def test_a_translation_file_of_nul_bytes_is_one_line_naming_it(tmp_path, monkeypatch, capsys, content, where) -> None:
    root = write_files(tmp_path / "data", {"train.de": content, "train.en": "x y\nz w\n"})
    before = listing(tmp_path)
    code, err = run_cli_inprocess(monkeypatch, capsys, *MT, f"dataset.root={root}", f"hydra.run.dir={tmp_path / 'run'}")
    assert one_error(code, err, 2) == (
        f"normbench: error: {root / 'train.de'} {where}; the data files must be UTF-8 text, which holds no NUL "
        "bytes (is it a binary file, or one a crash filled with zeros?)"
    )
    assert listing(tmp_path) == before


@pytest.mark.e2e
@needs_mounts
@pytest.mark.parametrize("cache", ["datasets", "bpe"])
@fault(
    "an unwritable HOME (the datasets and BPE caches)",
    "one line naming the folder and HF_DATASETS_CACHE or dataset.cache_dir",
    "one-line",
)
def test_an_unwritable_home_is_one_line_naming_the_folder_and_the_setting(tmp_path, cache) -> None:
    """The data folder is read-only (a shared copy), so the BPE would go under ``~/.cache``."""
    home, data, run_dir = tmp_path / "home", tmp_path / "data", tmp_path / "run"
    home.mkdir()
    write_files(data, {})
    data.chmod(0o555)  # what normbench takes for read-only data (even as root)
    lines = [f"mount -t tmpfs -o ro tmpfs {home}", f"export HOME={home}", "unset HF_HOME XDG_CACHE_HOME"]
    lines.append(f"export HF_DATASETS_CACHE={tmp_path / 'hf'}" if cache == "bpe" else "unset HF_DATASETS_CACHE")
    before = listing(data)
    code, stderr = namespace_run(lines, [*MT, f"dataset.root={data}", f"hydra.run.dir={run_dir}"], tmp_path / "out")
    if cache == "datasets":
        expected = (
            f"the datasets cache {home}/.cache/huggingface/datasets cannot be written ({home}/.cache: Read-only file "
            "system, errno 30); set HF_DATASETS_CACHE=<a writable folder> (or HF_HOME) to keep it elsewhere"
        )
    else:
        expected = (
            f"cannot cache the BPE: {home}/.cache/normbench/bpe cannot be written (Read-only file system, errno 30); "
            "pass dataset.cache_dir=<a writable folder>"
        )
    assert one_error(code, stderr, 2) == f"normbench: error: {expected}"
    assert not run_dir.exists() and listing(data) == before
    data.chmod(0o755)


# ---------------------------------------------------------------------------------------------
# A full disk


@pytest.mark.e2e
@needs_mounts
@fault("a full disk while the BPE cache is written", "one line naming the file; no .tmp, no folder left", "one-line")
def test_a_full_disk_while_the_bpe_is_cached_is_one_line_and_leaves_no_temporary_file(tmp_path) -> None:
    data, run_dir = tmp_path / "data", tmp_path / "run"
    data.mkdir()
    files = tmp_path / "files"
    write_files(files, {})
    fill = f"(dd if=/dev/zero of={data}/.filler bs=4k 2>/dev/null; true)"  # the disk full once the data is in
    lines = [f"mount -t tmpfs -o size=64k tmpfs {data}", f"cp {files}/* {data}/", fill]
    code, stderr = namespace_run(
        lines, [*MT, f"dataset.root={data}", f"hydra.run.dir={run_dir}"], tmp_path / "out", listed=data
    )
    line = one_error(code, stderr, 1)
    assert line.startswith(f"normbench: error: {data}/.normbench_bpe/") and line.endswith(
        ".json: No space left on device (errno 28)"
    )
    listed = (tmp_path / "out" / "listing").read_text()
    assert listed == sums(files)  # the data as it was: no .normbench_bpe/, no temporary file
    assert not run_dir.exists()


@pytest.mark.e2e
@needs_mounts
@fault(
    "a full disk while metrics.jsonl grows",
    "one line naming the file; whole lines; a warning where the summary finds no room",
    "one-line",
)
def test_a_full_disk_while_metrics_grow_is_one_line_not_logging_tracebacks(tmp_path) -> None:
    """No checkpoint: the rows fill the disk. The summary then finds no room either (the page a
    partial row took is kept by the rows before it), which is said once; the job's log stops with a
    warning instead of logging's traceback for every line it could not write."""
    mnt, out = tmp_path / "mnt", tmp_path / "copy"
    mnt.mkdir()
    run_dir = mnt / "run"
    args = [*LOCAL, "checkpoint.every_n_steps=0", "dataset.num_train=2000", f"dataset.root={tmp_path / 'data'}"]
    args.append(f"hydra.run.dir={run_dir}")
    code, _, stderr = in_namespace([f"mount -t tmpfs -o size=64k tmpfs {mnt}"], args, run_dir, out)
    assert (
        one_error(code, stderr, 1) == f"normbench: error: {run_dir}/metrics.jsonl: No space left on device (errno 28)"
    )
    no_room = "No space left on device (errno 28)"
    no_summary = f"the summary of this failed run could not be written ({run_dir}/summary.json: {no_room})"
    log_stops = f"{run_dir}/cli.log: No space left on device (errno 28); the job's log stops here (the terminal shows"
    warnings = [line for line in stderr.splitlines() if line.startswith("normbench: warning:")]
    assert f"normbench: warning: {no_summary}" in warnings
    assert set(warnings) <= {f"normbench: warning: {no_summary}", f"normbench: warning: {log_stops} the rest)"}
    assert len([line for line in stderr.splitlines() if line.strip()]) == len(warnings) + 1  # nothing else
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]  # whole lines only
    steps = [row["step"] for row in rows if "train/batch_loss" in row]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) > 10
    assert leftovers(out) == [] and not (out / "summary.json").exists()


# ---------------------------------------------------------------------------------------------
# A refused run leaves nothing


PHASES = {
    "parsing": ((*LOCAL, "lr=-1"), "lr=-1.0 is not allowed; lr must be > 0"),
    "checks before data": ((*LOCAL, "model=transformer_tiny"), "model=transformer_tiny takes sequence inputs"),
    "data": ((*MT, "dataset.root={data}"), "{data}/train.de line 1: a NUL byte"),
    "model": ((*LOCAL, "norm=gn", "norm.groups=7"), "layer norm1 (16 channels): norm.groups=7 does not divide"),
}


@pytest.mark.parametrize("folder", ["new", "existing"])
@pytest.mark.parametrize("phase", list(PHASES))
@fault(
    "a run refused while parsing, checking, reading data or building the model",
    "one line; no .hydra/ or log left, a folder that existed as it was",
    "one-line",
)
def test_a_refused_run_leaves_nothing_it_made(tmp_path, monkeypatch, capsys, phase, folder) -> None:
    data = write_files(tmp_path / "data", {"train.de": b"\0\0\n"})
    run_dir = tmp_path / "run"
    if folder == "existing":  # the user's folder: what is there stays, byte for byte
        (run_dir / "notes").mkdir(parents=True)
        (run_dir / "notes" / "plan.txt").write_text("keep me\n")
        (run_dir / "cli.log").write_text("an older log\n")
    args, expected = PHASES[phase]
    before = listing(tmp_path)
    code, err = run_cli_inprocess(monkeypatch, capsys, *(a.format(data=data) for a in args), f"hydra.run.dir={run_dir}")
    assert one_error(code, err, 2).startswith(f"normbench: error: {expected.format(data=data)}")
    assert listing(tmp_path) == before
    assert os.path.isdir(run_dir) == (folder == "existing")
