"""The invariance table (Ba et al. 2016 Table 1, Zhang & Sennrich 2019 Table 1) measured on every
registered norm: `normbench.norms.invariance` and ``INVARIANCES.md``."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from normbench.norms import invariance as inv
from normbench.norms import list_norms
from normbench.norms.registry import LAYOUTS
from tests.conftest import REPO

Y, N = True, False
# What the maths says, in inv.PROPERTIES order: W → δW, W → W + 1γᵀ, w_i → δw_i, x → δx,
# x → x + γ, x_n → δx_n. NTC: a case is a token; NCHW: W is a 1×1 convolution, a case is an image.
BATCH_STATS = (Y, N, Y, Y, Y, N)  # per unit over the batch: a shift γᵀx varying by case, or one case scaled, leaks
LP_BATCH = (Y, N, Y, Y, N, N)  # as BATCH_STATS, but the divisor is the uncentred unit's: a shift leaks
PER_CASE_LN = (Y, Y, N, Y, N, Y)  # Ba et al.'s layer norm: one case's units centred and scaled together
PER_CASE_RMS = (Y, N, N, Y, N, Y)  # Zhang & Sennrich: scaled, not centred
NOTHING = (N, N, N, N, N, N)
EXPECTED: dict[str, dict[str, tuple[bool, ...]]] = {
    "bn": {"NTC": BATCH_STATS, "NCHW": BATCH_STATS},
    "bn_noisy": {"NTC": BATCH_STATS, "NCHW": BATCH_STATS},  # the same noise: BN's invariances carry over
    "brn": {"NTC": BATCH_STATS, "NCHW": BATCH_STATS},  # a fresh module is in its warm-up: plain BN
    # ℓp BN: centred per unit like BN, the ℓp norm scales with the unit as σ does; but the norm is of the
    # uncentred unit (Santurkar et al.), so a shift x → x + γ changes the divisor
    "bn_l1": {"NTC": LP_BATCH, "NCHW": LP_BATCH},
    "bn_l2": {"NTC": LP_BATCH, "NCHW": LP_BATCH},
    "bn_linf": {"NTC": LP_BATCH, "NCHW": LP_BATCH},
    # per sample, over groups of 2 channels × positions: one unit scaled or a per-unit shift changes its
    # group's statistics; a per-position shift γᵀx is not removed; one sequence (not token) is a sample
    "gn": {"NTC": (Y, N, N, Y, N, N), "NCHW": (Y, N, N, Y, N, Y)},
    "in": {"NTC": (Y, N, Y, Y, Y, N), "NCHW": (Y, N, Y, Y, Y, Y)},  # per sample and unit, over positions
    "ln": {"NTC": PER_CASE_LN, "NCHW": PER_CASE_LN},  # over the units of each token / pixel
    "ln_sample": {"NTC": (Y, N, N, Y, N, N), "NCHW": (Y, N, N, Y, N, Y)},  # over all units × positions
    "noise_only": {"NTC": NOTHING, "NCHW": NOTHING},
    "none": {"NTC": NOTHING, "NCHW": NOTHING},
    "pn": {"NTC": PER_CASE_RMS, "NCHW": PER_CASE_RMS},  # GroupScaling (RMS per position) first, then ψ²_B
    "prms": {"NTC": PER_CASE_RMS, "NCHW": PER_CASE_RMS},
    "rms": {"NTC": PER_CASE_RMS, "NCHW": PER_CASE_RMS},
}


def test_every_norm_has_an_expected_row() -> None:
    assert set(EXPECTED) == set(list_norms()), "add the new norm's expected invariances here"


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
    assert holds == EXPECTED[name][layout][inv.PROPERTIES.index(prop)], (name, layout, prop, diff)
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
    pRMSNorm). The maths above (EXPECTED, asserted against the measurement) agrees with them; were
    a paper's mark wrong, EXPECTED would keep the maths and INVARIANCES.md would show both."""
    assert name in list_norms()
    for layout in LAYOUTS:
        assert EXPECTED[name][layout] == inv.PAPER[name]
        assert tuple(h for h, _ in inv.measure(name, layout).values()) == inv.PAPER[name]


SCALE_INVARIANT = [n for n in list_norms() if EXPECTED[n]["NTC"][0]]


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
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import invariance_table
    finally:
        sys.path.remove(str(REPO / "scripts"))
    return invariance_table


def test_invariances_md_is_current() -> None:
    script = _script()
    assert script.main(["--check", str(REPO / "INVARIANCES.md")]) == 0, "run " + script.COMMAND


def test_check_fails_on_a_stale_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script = _script()
    monkeypatch.setattr(script, "document", lambda: "| `bn` | ✓ |\n")
    stale = tmp_path / "INVARIANCES.md"
    stale.write_text("| `bn` | ✗ |\n")
    assert script.main(["--check", str(stale)]) == 1
    assert "is stale; run `python scripts/invariance_table.py --write INVARIANCES.md`" in capsys.readouterr().err
    assert script.main(["--write", str(stale)]) == 0 and script.main(["--check", str(stale)]) == 0
