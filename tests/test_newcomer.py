"""What a newcomer meets (issue 47): ``normbench-dashboard`` writes where a user expects and git
ignores, ``normbench-figures --help`` reads as plain text, a full disk's line names the file."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.faults import fault
from tests.test_faults import UNSHARE, needs_mounts


@pytest.mark.e2e
@fault(
    "normbench-dashboard run from the checkout with the default --out",
    "written under outputs/dashboards, which git ignores: the tree stays clean",
    "kept",
)
def test_the_dashboard_writes_where_git_ignores_it(tmp_path, monkeypatch, capsys) -> None:
    from normbench.analysis.dashboards.dashboard_cli import main

    monkeypatch.chdir(tmp_path)  # stands in for the checkout: the default is relative to where it runs
    assert main(["--entity", "me", "--project", "nb", "--preset", "ln_axes_cpu"]) == 0
    written = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert written == ["outputs/dashboards/ln_axes_cpu.json"]
    assert f"-> {Path('outputs/dashboards/ln_axes_cpu.json')}" in capsys.readouterr().out
    for path in (*written, "dashboards/ln_axes_cpu.json"):  # the default, and the old default's folder
        r = subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO, capture_output=True, text=True)
        assert r.returncode == 0, f"{path} is not ignored by git in the checkout"


@fault(
    "normbench-dashboard --out through a file",
    "one line naming it, exit 2; nothing written",
    "one-line",
)
def test_the_dashboard_out_through_a_file_is_one_line(tmp_path, capsys) -> None:
    from normbench.analysis.dashboards.dashboard_cli import main

    (tmp_path / "notes").write_text("mine\n")
    out = tmp_path / "notes" / "dash"
    assert main(["--entity", "me", "--project", "nb", "--preset", "ln_axes_cpu", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"normbench-dashboard: --out '{out}' goes through '{tmp_path / 'notes'}', a file; pass a folder for the "
        "dashboards' JSON"
    ]
    assert (tmp_path / "notes").read_text() == "mine\n"


HELP = {
    "normbench-figures": "normbench.analysis.figures.figures_cli",
    "normbench-dashboard": "normbench.analysis.dashboards.dashboard_cli",
    "normbench-leaderboard": "normbench.analysis.leaderboard.leaderboard_report",
    "normbench-data": "normbench.data.prepare",
}


@pytest.mark.parametrize("command", list(HELP))
@fault(
    "--help of an analysis or data command",
    "plain text: no reStructuredText backquotes",
    "result",
)
def test_help_is_plain_text(capsys, command) -> None:
    import importlib

    with pytest.raises(SystemExit) as e:
        importlib.import_module(HELP[command]).main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith(f"usage: {command}")
    assert "`" not in out, [line for line in out.splitlines() if "`" in line]


@pytest.mark.e2e
@needs_mounts
@pytest.mark.parametrize("record", ["summary.json", "config.yaml"])
@fault(
    "a full disk while a run's record (summary.json, config.yaml) is written",
    "one line naming the file, not the temporary one; no .tmp left",
    "one-line",
)
def test_a_full_disk_names_the_record_it_could_not_write(tmp_path, record) -> None:
    """Every record goes through `normbench.base.output.atomic_write_bytes`; a ``write`` or ``fsync``
    that finds no room raises an ``OSError`` that names no file, so the one line said only
    "No space left on device"."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    code = (
        "import sys; from pathlib import Path; from normbench.base.errors import one_line_os_error; "
        "from normbench.base.output import atomic_write_text\n"
        "try:\n    atomic_write_text(Path(sys.argv[1]), 'x' * 200000)\n"
        "except OSError as e:\n    print(one_line_os_error(e))"
    )
    script = f'mount -t tmpfs -o size=64k tmpfs {mnt} && {sys.executable} -c "{code}" {mnt / record} && ls -A {mnt}'
    r = subprocess.run([*UNSHARE, "sh", "-c", script], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines() == [f"{mnt / record}: No space left on device (errno 28)"]  # and ls: nothing left
