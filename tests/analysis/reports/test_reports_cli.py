"""``normbench-reports``: one console entry for the pages normbench writes about its own evidence,
each subcommand its module's ``main`` with that module's options."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from normbench.analysis.reports import cli
from tests.conftest import REPO


def test_the_console_entry_is_the_dispatcher() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["normbench-reports"] == "normbench.analysis.reports.cli:main"


@pytest.mark.parametrize("name", list(cli.COMMANDS))
def test_each_command_is_its_modules_main_with_its_own_options(name: str, capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main([name, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith(f"usage: normbench-reports {name} [-h]")
    option = {"index": "--check", "history": "--planned", "reliability": "--run", "invariances": "--write"}[name]
    assert option in out


@pytest.mark.parametrize("argv", [[], ["nope"], ["--check"]])
def test_no_or_an_unknown_command_is_one_line_and_exit_2(argv: list[str], capsys: pytest.CaptureFixture) -> None:
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert all(name in captured.err for name in cli.COMMANDS)


def test_help_lists_every_command(capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in cli.COMMANDS)


def test_a_usage_error_of_a_command_exits_2(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as e:
        cli.main(["history", "results/x"])  # --changed is required
    assert e.value.code == 2 and "normbench-reports history: error:" in capsys.readouterr().err


@pytest.mark.parametrize("case", ["missing", "a folder", "not text"])
def test_reliability_check_of_an_unreadable_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture, case: str
) -> None:
    """Red team 2: ``reliability --check`` of a file that cannot be read was a traceback."""
    from normbench.analysis.reports import reliability

    path = {"missing": tmp_path / "nope.md", "a folder": tmp_path, "not text": tmp_path / "bin.md"}[case]
    if case == "not text":
        path.write_bytes(b"\xff\xfe\x00garbage")
    assert reliability.main(["--check", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--check {str(path)!r} cannot be read" in err[0]
