"""Hydra's own composition errors as one line, exit 2, before anything is made (issue 59.10: 4-22
lines before): an unknown launcher or sweeper (in a run, and with --cfg), ``+key`` on a key that is
there, a data set switch that leaves a preset's keys of another data set."""

from __future__ import annotations

import pytest

from tests.conftest import TINY_RUN
from tests.faults import fault
from tests.test_validate import run_cli_inprocess

CASES = {
    "launcher": (("hydra/launcher=bogus",),
                 "Could not find 'hydra/launcher/bogus' Available options in 'hydra/launcher': basic"),
    "sweeper": (("hydra/sweeper=bogus",), "Could not find 'hydra/sweeper/bogus' Available options in 'hydra/sweeper'"),
    "plus-existing": (("+diagnostics.landscape.every_n_steps=2",),
                      "An item is already at 'diagnostics.landscape.every_n_steps'. Either remove + prefix"),
    "dataset-switch": (("experiment=quickstart_mt", "dataset=iwslt14", "dataset.root=/nowhere"),
                       "dataset.num_train is not a key of IWSLT14Config (dataset=iwslt14)"),
}


@fault("hydra/launcher=bogus, hydra/sweeper=bogus, +key on a key that is there, or a data set switch that "
       "leaves the old data set's keys (issue 59)",
       "one line naming the option and the valid ones (or Hydra's remedy), exit 2; nothing made",
       "one-line")  # fmt: skip
@pytest.mark.parametrize("case", list(CASES))
def test_a_command_line_that_does_not_compose_is_one_line(tmp_path, monkeypatch, capsys, case: str) -> None:
    args, needle = CASES[case]
    out = tmp_path / "run"
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *TINY_RUN, *args, f"hydra.run.dir={out}")
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("normbench: error: ") and needle in lines[0], stderr
    assert "Config search path" not in lines[0] and not out.exists()


@fault("--cfg job with a bad option (norm=bogus; issue 59)",
       "one line naming the valid choices, exit 2",
       "one-line")  # fmt: skip
def test_cfg_with_a_bad_option_is_one_line(monkeypatch, capsys) -> None:
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, "--cfg", "job", "norm=bogus")
    lines = stderr.strip().splitlines()
    assert code == 2 and lines == [lines[0]] and "norm=bogus is not an option of norm; valid choices: " in lines[0]
