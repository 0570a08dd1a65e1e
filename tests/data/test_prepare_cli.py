"""``normbench-data``'s command line (issue 59): the user's errors are one line on stderr, exit
status 2, nothing written; a failed download stays exit status 1."""

from __future__ import annotations

import pytest

from normbench.data.prepare import FOLDERS, main
from tests.faults import fault


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "usage:" not in captured.err and "Traceback" not in captured.err, captured.err
    return err[0]


@fault("normbench-data with an unknown name or flag (issue 59)",
       "one line naming the valid ones (not argparse's usage block), "
       "exit 2, nothing written", "one-line")  # fmt: skip
@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["bogus"], ["'bogus'", *FOLDERS, "all"]),
        (["cifar10", "--bogus"], ["--bogus", "--root", "--from", "--force"]),
        (["cifar10", "iwslt14", "--from", "x"], ["--from makes one data set"]),
    ],
)
def test_a_bad_name_or_flag_is_one_line_exit_2(tmp_path, monkeypatch, capsys, argv, needles) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    line = _one_error_line(capsys)
    assert line.startswith("normbench-data: ") and all(n in line for n in needles), line
    assert list(tmp_path.iterdir()) == []


def test_a_root_that_is_a_file_is_one_line_exit_2(tmp_path, capsys) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("x")
    assert main(["cifar10-subset", "--root", str(file)]) == 2
    line = _one_error_line(capsys)
    assert f"--root {str(file)!r} is a file" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@fault("normbench-data --from a folder without the data set's files (issue 59)",
       "one line naming the folder and the files, "
       "exit 2 (it was 1, as a failed download), nothing written", "one-line")  # fmt: skip
@pytest.mark.parametrize(
    ("name", "needle"),
    [("cifar10-subset", "cifar-10-python.tar.gz"), ("de-en-subset", "train.jsonl"), ("iwslt14", "de-en.tgz")],
)
def test_a_from_folder_without_the_files_is_exit_2(tmp_path, capsys, name, needle) -> None:
    """Was exit 1, as if a download had failed: the folder given is the user's to fix."""
    source = tmp_path / "empty"
    source.mkdir()
    root = tmp_path / "data"
    assert main([name, "--root", str(root), "--from", str(source)]) == 2
    line = _one_error_line(capsys)
    assert line.startswith(f"normbench-data {name}: ") and needle in line and str(source) in line, line
    assert not root.exists()  # nothing half-written, not even the root
