"""Figure conventions shared by every figure: one colour per registered norm."""

from __future__ import annotations

import matplotlib.colors as mcolors
import pytest

from normbench.analysis.plot import NORM_COLORS
from normbench.norms.registry import list_norms


@pytest.mark.parametrize("norm", list_norms())
def test_every_registered_norm_has_its_own_colour(norm: str) -> None:
    assert norm in NORM_COLORS, f"add {norm!r} to NORM_COLORS in normbench/analysis/plot.py"
    mine = mcolors.to_rgb(NORM_COLORS[norm])
    shared = [other for other, c in NORM_COLORS.items() if other != norm and mcolors.to_rgb(c) == mine]
    assert not shared, f"{norm} shares its colour with {shared}"
