"""Every config group option and every experiment composes against the typed schemas."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from omegaconf import DictConfig

from normbench.cli.main import config_dir
from tests.conftest import compose_cfg

CONF = Path(config_dir())
GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name != "hydra")
OPTIONS = [(g, f.stem) for g in GROUPS for f in sorted((CONF / g).glob("*.yaml"))]


@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_group_option_composes(group: str, option: str) -> None:
    """... and parses: the checks of `normbench.config.parse` refuse no default (each option on the
    defaults; `tests/test_bad_values.py` refuses the values no run can use)."""
    from normbench.config import parse

    cfg = compose_cfg([f"{group}={option}"])
    parse(copy.deepcopy(cfg))
    if group in ("experiment", "hparams_search"):  # @package _global_: no node of their own
        return
    node = cfg[group]
    assert isinstance(node, DictConfig)
    if "name" in node:  # the file's name is the registry name it selects
        assert node.name == option


def test_groups_mirror_registries() -> None:
    from normbench.models import list_models
    from normbench.norms import list_norms
    from normbench.tasks import list_datasets

    for group, names in (("norm", list_norms()), ("model", list_models()), ("dataset", list_datasets())):
        files = sorted(f.stem for f in (CONF / group).glob("*.yaml"))
        assert files == names, f"conf/{group}/ and the {group} registry differ"


def test_unknown_key_fails() -> None:
    from hydra.errors import ConfigCompositionException

    with pytest.raises(ConfigCompositionException):
        compose_cfg(["norm.not_a_key=1"])
    with pytest.raises(ConfigCompositionException):
        compose_cfg(["lr=abc"])
