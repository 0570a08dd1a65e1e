"""A YAML typo or a Python tag in a preset or a rules file is one line naming the file and the place
(issue 59: a 99-line traceback from Hydra for ``lr: [0.1``; 42 lines from normbench-figures)."""

from __future__ import annotations

import shutil
import sys

import pytest

from normbench.base.errors import ConfigError
from tests.conftest import REPO
from tests.faults import fault

BROKEN = {
    "typo": ("lr: [0.1\n", "line 4, column 1: "),
    "python-tag": ('lr: !!python/object/apply:os.system ["echo hi"]\n', "could not determine a constructor"),
}


@fault("a YAML typo or a Python tag in a preset (issue 59)",
       "one line naming the file, line and column, exit 2; nothing made",
       "one-line")  # fmt: skip
@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_preset_is_one_line(tmp_path, monkeypatch, capsys, case: str) -> None:
    text, needle = BROKEN[case]
    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    (conf / "experiment" / "broken.yaml").write_text(f"# @package _global_\n# A broken preset.\n{text}")
    import normbench.cli.main as cli_main

    monkeypatch.setattr(cli_main, "config_dir", lambda: str(conf))
    monkeypatch.setattr(sys, "argv", ["normbench", "experiment=broken", f"hydra.run.dir={tmp_path / 'run'}"])
    with pytest.raises(SystemExit) as e:
        cli_main.cli()
    lines = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"normbench: error: {conf / 'experiment' / 'broken.yaml'} line ") and needle in lines[0]
    assert not (tmp_path / "run").exists()


@fault("a YAML typo or a Python tag in a rules file (issue 59)",
       "one error line naming the file, line and column; nothing runs",
       "one-line")  # fmt: skip
@pytest.mark.parametrize("case", list(BROKEN))
def test_a_broken_rules_file_is_one_line(tmp_path, monkeypatch, case: str) -> None:
    import normbench.rules as rules

    text, needle = BROKEN[case]
    (tmp_path / "broken.yaml").write_text(f"# rules\npreset: broken\n{text}")
    monkeypatch.setattr(rules, "RULES_DIR", tmp_path)
    with pytest.raises(ConfigError) as e:
        rules.load_rules_data("broken")
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"{tmp_path / 'broken.yaml'} line ")
    assert needle in message
