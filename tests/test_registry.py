"""A name is written once: in the ``register`` call. It fills the schema's ``name`` key and a
registered class's ``name``; the config dataclasses and the YAML files do not repeat it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from omegaconf import MISSING

from normbench.base.registry import Registry, schema
from normbench.cli.main import config_dir
from normbench.diagnostics import list_diagnostics
from normbench.diagnostics.registry import DIAGNOSTICS, DiagnosticHook
from normbench.models import MODELS
from normbench.norms import NORMS
from normbench.tasks import DATASETS

CONF = Path(config_dir())
REGISTRIES = {"norm": NORMS, "model": MODELS, "dataset": DATASETS}
ENTRIES = [(group, name) for group, registry in REGISTRIES.items() for name in registry.names()]


@pytest.mark.parametrize(("group", "name"), ENTRIES, ids=[f"{g}={n}" for g, n in ENTRIES])
def test_the_registered_name_is_the_only_place_the_name_is_written(group: str, name: str) -> None:
    config = REGISTRIES[group].entry(name).config
    (field,) = [f for f in dataclasses.fields(config) if f.name == "name"]
    assert field.default == MISSING, f"{config.__name__} repeats its name; the registry fills it"
    assert schema(name, config).name == name
    text = (CONF / group / f"{name}.yaml").read_text()
    assert "name" not in yaml.safe_load(text), f"conf/{group}/{name}.yaml repeats its name"
    assert f"/schema/{group}@_here_: {name}" in text  # the file names its own schema


@pytest.mark.parametrize("name", list_diagnostics())
def test_a_diagnostic_hook_is_named_by_its_registration(name: str) -> None:
    assert DIAGNOSTICS.get(name).name == name


def test_a_class_that_names_itself_otherwise_is_refused_and_a_plain_one_is_named() -> None:
    registry: Registry[type] = Registry("thing")

    class Plain(DiagnosticHook):
        pass

    assert registry.register("plain")(Plain).name == "plain"
    assert DiagnosticHook.name == "diagnostic"  # the base keeps its own

    class Other(DiagnosticHook):
        name = "other"

    with pytest.raises(ValueError, match=r"Other.name='other' but it is registered as 'mine'"):
        registry.register("mine")(Other)
    assert "mine" not in registry
