"""``normbench --help`` lists what a user picks, read from ``conf/``: each group with its options
(the current choice marked ``*``), each experiment preset and search with its file's first
comment line, the launchers; not ``schema/*``, not ``experiment/arms/*``, not Hydra's banner."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from normbench.cli.main import config_dir
from tests.conftest import run_cli_inprocess
from tests.faults import fault

CONF = Path(config_dir())
DESCRIBED = ("experiment", "hparams_search")


def first_comment(path: Path) -> str:
    """The first sentence of the file's leading comment block (joined over its lines)."""
    block = []
    for line in path.read_text().splitlines():
        if not line.startswith("#") or (block and not line[1:].strip()):
            break
        if "@package" not in line:
            block.append(line[1:].strip())
    not_ends = "".join(rf"(?<!\b{re.escape(a)})" for a in ("al.", "e.g.", "i.e.", "vs.", "Fig.", "Figs.", "cf.",
                                                            "Eq.", "Sec.", "sec.", "Tab."))  # fmt: skip
    return re.split(rf"(?<=[^.]\.){not_ends} ", " ".join(block), maxsplit=1)[0]  # nor an ellipsis or "et al."


def defaults() -> dict[str, str]:
    """The primary config's group defaults, read from its defaults list."""
    entries = yaml.safe_load((CONF / "config.yaml").read_text())["defaults"]
    return {k: v for e in entries if isinstance(e, dict) for k, v in e.items() if "/" not in k and v}


def group_line(text: str, group: str) -> list[str]:
    (line,) = [line for line in text.splitlines() if re.match(rf"  {re.escape(group)} +\S", line)]
    return line.split(maxsplit=1)[1].split(", ")


def help_text(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    code, out, err = run_cli_inprocess(monkeypatch, capsys, "--help", *args)
    assert code == 0, err[-3000:]
    return out


def test_help_lists_the_groups_presets_and_launchers_from_conf(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)  # from another directory: conf/ is found beside the package
    text = help_text(monkeypatch, capsys)
    assert "powered by Hydra" not in text
    # structurally: each group's listing names its own files only (no schema/*, no experiment/arms/*)
    for group in DESCRIBED:
        section = text.split(f"{group}=<name> ==", 1)[1].split("\n==", 1)[0]
        listed = re.findall(r"^  (\S+?)\*? {2,}", section, re.M)
        assert listed == sorted(p.stem for p in (CONF / group).glob("*.yaml")), group
    groups = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name != "hydra")
    assert {"model", "dataset", "norm", "hardware", "logger", "diagnostics", *DESCRIBED} <= set(groups)
    chosen = defaults()
    for group in groups:
        files = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
        if group in DESCRIBED:
            for name in files:  # one line each: the name and its file's first comment line
                expected = f"  {name} +{re.escape(first_comment(CONF / group / f'{name}.yaml'))}$"
                assert re.search(expected, text, re.M), (group, name)
            continue
        options = group_line(text, group)
        assert [o.rstrip("*") for o in options] == files
        assert [o for o in options if o.endswith("*")] == [f"{chosen[group]}*"]
    launchers = text.split("hydra/launcher=<name>")[1]
    assert re.search(r"^  basic\* ", launchers, re.M) and re.search(r"^  slurm +SLURM sweeps through", launchers, re.M)


def test_help_marks_the_command_lines_choices_and_lists_a_new_preset(tmp_path, monkeypatch, capsys) -> None:
    extra = tmp_path / "more_conf" / "experiment"
    extra.mkdir(parents=True)
    (extra / "zz_new.yaml").write_text("# @package _global_\n# A preset made by the test.\nseed: 3\n")
    text = help_text(monkeypatch, capsys, "--config-dir", str(extra.parent), "norm=gn", "experiment=zz_new")
    assert [o for o in group_line(text, "norm") if o.endswith("*")] == ["gn*"]
    assert re.search(r"^  zz_new\* +A preset made by the test\.$", text, re.M)
    assert re.search(r"^  quickstart +\S", text, re.M)  # the presets of conf/ are still listed


@fault("a preset whose first sentence holds 'et al.', 'e.g.' or 'Figs.', in normbench --help (issue 59)",
       "the first sentence shown whole",
       "result")  # fmt: skip
def test_a_first_sentence_runs_past_et_al(tmp_path) -> None:
    """--help cut some presets' first sentence at "et al." (issue 59)."""
    from normbench.cli.help import first_comment

    path = tmp_path / "p.yaml"
    path.write_text("# @package _global_\n# Santurkar et al. 2018 (Figs. 1-4), e.g. VGG: the landscape. More.\nx: 1\n")
    assert first_comment(path) == "Santurkar et al. 2018 (Figs. 1-4), e.g. VGG: the landscape."
