"""A norm in three edits (issue 58): its class, ``conf/norm/<name>.yaml`` and its row in
tests/norms/specs.py. Fast checks here (every registered norm has a row and a file; a norm module
that nothing imports is registered by the discovery; the docs' norm table names registered
norms); the whole journey, in a copy of the repository, is `tests/norms/test_journey.py` (slow)."""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import normbench.norms
from normbench.norms import NORMS, list_norms
from tests.conftest import REPO
from tests.norms.specs import SPECS

TOY = '''"""``{name}``: y = γ·x, no statistics (a toy norm of the discovery test)."""

from torch import Tensor

from normbench.norms import functional as NF
from normbench.norms.base import Norm
from normbench.norms.registry import NormConfig, register_norm


@register_norm("{name}", NormConfig)
class Scale(Norm):
    NORMALIZES_OVER = {{"NCHW": "nothing", "NTC": "nothing"}}

    def __init__(self, num_features: int, **kw) -> None:
        super().__init__(num_features, **kw, bias=False)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        NF.check_mask(x, self.layout, mask)
        return NF.channel_affine(x, self.weight, None, self.layout).to(x.dtype)
'''
"""A toy norm module, as a contributor writes one (``{name}``: its registered name)."""


def test_every_registered_norm_has_a_spec_row_and_a_config_file() -> None:
    assert sorted(SPECS) == list_norms(), "a norm's row in tests/norms/specs.py SPECS, or a row of no norm"
    for name, row in SPECS.items():
        assert (REPO / "conf" / "norm" / f"{name}.yaml").is_file(), f"conf/norm/{name}.yaml"
        assert set(row.invariances) == {"NCHW", "NTC"} and all(len(v) == 6 for v in row.invariances.values())
        assert row.statistics in ("batch", "positions", "none"), name


def test_no_import_list_names_the_norm_families() -> None:
    """`normbench.norms` imports its modules by discovery, not by name."""
    text = (REPO / "normbench" / "norms" / "__init__.py").read_text()
    families = [p.stem for p in (REPO / "normbench" / "norms").glob("*.py") if "@register_norm(" in p.read_text()]
    assert families and not [f for f in families if re.search(rf"\bimport\b.*\b{f}\b", text)]


@pytest.fixture
def toy_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module ``normbench/norms/<toy>.py`` that nothing imports, in a folder of the package's path
    (the checkout is left alone); the registry and ``sys.modules`` put back afterwards."""
    name = "scale_discovery_toy"
    folder = tmp_path / "norms"
    folder.mkdir()
    (folder / f"{name}.py").write_text(TOY.format(name=name))
    monkeypatch.setattr(normbench.norms, "__path__", [*normbench.norms.__path__, str(folder)])
    try:
        yield name
    finally:
        NORMS._entries.pop(name, None)
        sys.modules.pop(f"normbench.norms.{name}", None)


def test_a_norm_module_nothing_imports_is_registered(toy_module: str) -> None:
    assert toy_module not in list_norms()
    assert toy_module in normbench.norms.discover()
    assert toy_module in list_norms()
    assert normbench.norms.build_norm(toy_module, 4, "NTC").weight.shape == (4,)


def table_norms(text: str) -> list[str]:
    """The names in the docs' norm table (docs/norms.md; its first column, the rows after its header)."""
    table = text.split("| name | normalizes over", 1)[1].split("\n\n", 1)[0]
    return [n for row in table.splitlines()[2:] for n in re.findall(r"`(\w+)`", row.split("|")[1])]


def test_the_docs_norm_table_names_registered_norms() -> None:
    """Checked against the registry: a name the registry lacks fails; a registered norm the table
    lacks (a norm just added) is a warning for whoever writes the docs."""
    names = table_norms((REPO / "docs" / "norms.md").read_text())
    assert names and set(names) <= set(list_norms()), sorted(set(names) - set(list_norms()))
    missing = sorted(set(list_norms()) - set(names))
    if missing:
        warnings.warn(f"docs/norms.md's norm table lacks {', '.join(missing)}", stacklevel=1)
