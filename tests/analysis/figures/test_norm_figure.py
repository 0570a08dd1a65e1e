"""A translation figure's arm takes its own norm's colour, whatever qualifier its label carries
(`normbench.analysis.figures.norm_figure.color_of`)."""

from __future__ import annotations

import pytest

from normbench.analysis.figures.norm_figure import color_of
from normbench.analysis.figures.plot import NORM_COLORS
from normbench.analysis.wording.figure_names import arm_name


@pytest.mark.parametrize("norm", sorted(NORM_COLORS))
@pytest.mark.parametrize("qualifier", ["", " (eager)", " (compiled)", " masked (mixed)"])
def test_every_norm_keeps_its_colour_under_its_papers_name(norm: str, qualifier: str) -> None:
    """``LN (per sample)`` is not LN with a qualifier: it keeps its own colour (it took LN's blue
    when the label was cut at its first bracket)."""
    assert color_of(arm_name(norm) + qualifier) == NORM_COLORS[norm]


def test_a_label_of_no_norm_is_grey() -> None:
    assert color_of("warm-up only") == "dimgray"
