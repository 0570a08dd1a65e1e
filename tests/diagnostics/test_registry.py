"""The typed diagnostics config: unknown names and keys fail in one line; the conf files validate."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from normbench.base.errors import ConfigError
from normbench.cli.main import config_dir
from normbench.diagnostics import build_diagnostics, diagnostics_config, list_diagnostics
from tests.conf.test_compose import compose_cfg
from tests.conftest import TINY_RUN, run_cli_inprocess

CONF = Path(config_dir()) / "diagnostics"


def test_unknown_diagnostic_lists_the_valid_names() -> None:
    with pytest.raises(
        ConfigError, match="unknown diagnostic 'landscap'; valid choices: " + ", ".join(list_diagnostics())
    ):
        diagnostics_config({"landscap": {"every_n_steps": 1}})


@pytest.mark.parametrize(
    ("cfg", "needle"),
    [
        (
            {"landscape": {"every_n_step": 1}},
            "diagnostics.landscape.every_n_step is not an option of diagnostics.landscape; "
            "did you mean diagnostics.landscape.every_n_steps? diagnostics.landscape takes: every_n_steps",
        ),
        ({"grad_variance": {"num_batches": "many"}}, "diagnostics.grad_variance.num_batches"),
        ({"ics": {"every_n_steps": -1}}, "diagnostics.ics.every_n_steps=-1"),
        ({"grad_variance": {"method": "jackknife"}}, "valid choices: batches, per_sample"),
        ({"landscape": {"min_lr_multiple": 2.0, "max_lr_multiple": 1.0}}, "min_lr_multiple <= max_lr_multiple"),
        ({"predictiveness": {"direction": "adam"}}, "valid choices: gradient, update, auto"),
        ({"activations": 5}, "diagnostics.activations must be a mapping"),
    ],
)
def test_bad_settings_are_one_line_config_errors(cfg: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        diagnostics_config(cfg)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_each_sub_config_is_its_registered_dataclass_with_defaults() -> None:
    typed = diagnostics_config({"grad_variance": {"every_n_steps": 5}, "bn_stats": None})
    assert typed["grad_variance"].every_n_steps == 5 and typed["grad_variance"].num_batches == 8
    assert not typed["bn_stats"].enabled
    assert build_diagnostics({"hessian": {"every_n_steps": 0}, "bn_stats": {"steps": [3]}})[0].name == "bn_stats"


@pytest.mark.parametrize("option", sorted(p.stem for p in CONF.glob("*.yaml")))
def test_conf_files_compose_and_validate(option: str) -> None:
    cfg = compose_cfg([f"diagnostics={option}"])
    hooks = build_diagnostics(cfg.diagnostics)
    names = {h.name for h in hooks}
    if option == "off":
        assert hooks == []
    if option == "full":
        assert names == set(list_diagnostics())
        assert set(yaml.safe_load((CONF / "full.yaml").read_text())) == set(list_diagnostics())
    if option == "default":
        assert {"bn_stats", "landscape", "predictiveness", "beta_smoothness"} <= names
        assert not names & {"hessian", "grad_variance", "ics"}  # the expensive ones stay off


def test_cli_rejects_an_unknown_diagnostic_in_one_line(tmp_path, monkeypatch, capsys) -> None:
    run_dir = tmp_path / "run"
    code, _, err = run_cli_inprocess(
        monkeypatch, capsys, *TINY_RUN, "+diagnostics.hesian.every_n_steps=1", f"hydra.run.dir={run_dir}"
    )
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("normbench: error:")]
    assert len(lines) == 1 and "'hesian'" in lines[0]
    assert "valid choices: " + ", ".join(list_diagnostics()) in lines[0]
    assert not (run_dir / "metrics.jsonl").exists()


def test_cadence_every_n_from_start_step_plus_explicit_steps() -> None:
    (hook,) = build_diagnostics({"landscape": {"every_n_steps": 3, "start_step": 2, "steps": [0]}})
    assert [s for s in range(12) if hook.due(s)] == [0, 2, 5, 8, 11]
    (hook,) = build_diagnostics({"landscape": {"every_n_steps": 4}})
    assert [s for s in range(9) if hook.due(s)] == [0, 4, 8]
