"""The invariance table (Ba et al. 2016 Table 1, Zhang & Sennrich 2019 Table 1) measured on every
registered norm: `normbench.norms.invariance` and ``INVARIANCES.md``."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from types import ModuleType

import pytest
import torch

from normbench.norms import invariance as inv
from normbench.norms import list_norms
from normbench.norms.registry import LAYOUTS
from tests.conftest import REPO
from tests.norms.specs import SPECS, spec


def expected(name: str, layout: str) -> tuple[bool, ...]:
    """What the maths says (the norm's row in tests/norms/specs.py), in inv.PROPERTIES order."""
    return spec(name).invariances[layout]


@pytest.mark.parametrize("prop", inv.PROPERTIES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", list_norms())
def test_measurement_runs_is_deterministic_and_matches_the_maths(name: str, layout: str, prop: str) -> None:
    assert inv.supports(name, layout)
    first = inv.measure_property(name, layout, prop)
    assert inv.measure_property(name, layout, prop) == first  # same seed, same noise: bit for bit
    holds, diff = first
    assert math.isfinite(diff) and diff >= 0
    assert holds == (diff <= inv.TOL)
    assert holds == expected(name, layout)[inv.PROPERTIES.index(prop)], (name, layout, prop, diff)
    if not holds:
        assert diff > 1e-3  # a clear break, not a near miss at the tolerance


def test_transforms_do_what_their_names_say() -> None:
    w, x, gamma = inv.problem("NTC")
    a = inv.summed_inputs(w, x, "NTC")
    w2, _ = inv.TRANSFORMS["weight_matrix_recentering"](w, x, "NTC", gamma)
    shift = inv.summed_inputs(w2, x, "NTC") - a  # every unit of a token shifts by γᵀx
    torch.testing.assert_close(shift, (x @ gamma)[..., None].expand_as(shift), rtol=0, atol=1e-12)
    _, x2 = inv.TRANSFORMS["dataset_recentering"](w, x, "NTC", gamma)
    torch.testing.assert_close(inv.summed_inputs(w, x2, "NTC") - a, (w @ gamma).expand_as(a), rtol=0, atol=1e-12)
    _, xi, _ = inv.problem("NCHW")
    _, xs = inv.TRANSFORMS["single_case_rescaling"](w, xi, "NCHW", gamma)
    assert torch.equal(xs[1:], xi[1:]) and torch.allclose(xs[0], inv.DELTA * xi[0])
    assert not inv.supports("ln", "NHWC")  # build_norm refuses a layout it does not know


@pytest.mark.parametrize("name", sorted(inv.PAPER))
def test_the_papers_marks(name: str) -> None:
    """Ba et al. 2016 Table 1 (batch norm, layer norm) and Zhang & Sennrich 2019 Table 1 (RMSNorm,
    pRMSNorm). The maths (the spec rows, asserted against the measurement) agrees with them; were
    a paper's mark wrong, the rows would keep the maths and INVARIANCES.md would show both."""
    assert name in list_norms()
    for layout in LAYOUTS:
        assert expected(name, layout) == inv.PAPER[name]
        assert tuple(h for h, _ in inv.measure(name, layout).values()) == inv.PAPER[name]


SCALE_INVARIANT = [n for n in list_norms() if n in SPECS and SPECS[n].invariances["NTC"][0]]


@pytest.mark.parametrize("steps", [0, inv.TRAIN_STEPS])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", SCALE_INVARIANT)
def test_weight_gradient_shrinks_by_one_over_delta(name: str, layout: str, steps: int) -> None:
    r = inv.gradient_ratio(name, layout, steps=steps)
    assert r["holds"] == 1.0 and r["max_rel_diff"] <= inv.TOL
    assert r["ratio"] == pytest.approx(1 / inv.DELTA, rel=1e-9)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_trained_layer_is_trained(layout: str) -> None:
    w0, _, _ = inv.problem(layout)
    w, losses = inv.trained_weight("ln", layout)
    assert len(losses) == inv.TRAIN_STEPS + 1 and losses[-1] < 0.5 * losses[0]
    assert not torch.allclose(w, w0)


def test_gradient_ratio_is_not_one_over_delta_without_a_norm() -> None:
    r = inv.gradient_ratio("none", "NTC")
    assert r["holds"] == 0.0 and r["ratio"] > 1


def _script() -> ModuleType:
    """The writer of INVARIANCES.md (``normbench-reports invariances``)."""
    from normbench.analysis.reports import invariances

    return invariances


def test_invariances_md_is_current() -> None:
    """Every row of INVARIANCES.md is what the measurement gives now; a registered norm the file
    lacks (a norm just added: the file is regenerated with the results) is a warning, not a failure."""
    script = _script()
    stale, missing = script.check(REPO / "INVARIANCES.md")
    assert not stale, f"INVARIANCES.md is stale; run {script.COMMAND}:\n{stale}"
    if missing:
        warnings.warn(f"INVARIANCES.md lacks {', '.join(missing)}; run {script.COMMAND}", stacklevel=1)


def test_check_fails_on_a_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script()
    monkeypatch.setattr(script, "list_norms", lambda: ["bn"])
    monkeypatch.setattr(script, "document", lambda names=None: "| `bn` | ✓ |\n")
    stale = tmp_path / "INVARIANCES.md"
    stale.write_text("| `bn` | ✗ |\n")
    assert script.main(["--check", str(stale)]) == 1
    assert "is stale; run `normbench-reports invariances --write INVARIANCES.md`" in capsys.readouterr().err
    assert script.main(["--write", str(stale)]) == 0 and script.main(["--check", str(stale)]) == 0


def test_check_tells_a_missing_norm_from_a_stale_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A registered norm without rows is listed as missing (--check fails on it, the test above
    warns); a row of a norm no longer registered is stale."""
    script = _script()
    monkeypatch.setattr(script, "document", lambda names=None: "".join(f"| `{n}` | ✓ |\n" for n in names))
    monkeypatch.setattr(script, "list_norms", lambda: ["bn", "scale"])
    path = tmp_path / "INVARIANCES.md"
    path.write_text("| `bn` | ✓ |\n")
    assert script.check(path) == ("", ["scale"])
    assert script.main(["--check", str(path)]) == 1
    path.write_text("| `bn` | ✓ |\n| `gone` | ✓ |\n| `scale` | ✓ |\n")
    stale, missing = script.check(path)
    assert stale.startswith("rows for norms no longer registered: gone") and missing == []
