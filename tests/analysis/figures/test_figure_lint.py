"""`normbench.analysis.figures.figure_lint` (issue 57): each check fails on a figure broken on purpose, in
the way the committed figures were, and passes once the figure is fixed; `check_figure` reports
them all."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pytest

from normbench.analysis.figures.figure_checks import check_figure
from normbench.analysis.figures.figure_lint import (
    covered_marks,
    empty_canvas_share,
    empty_panel_share,
    few_point_lines,
    hidden_series,
    raw_texts,
    shared_colors,
    style_lies,
)

X = np.arange(8.0)


def drawn(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def test_a_legend_over_a_band_fails_beside_it_passes() -> None:
    """santurkar_fig3 / powernorm_fig3: the legend sat on the seeds' band, clear of the median line."""
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot(X, 0.2 * X, color="tab:red", label="BN")
    ax.fill_between(X, 0.2 * X - 0.2, 0.2 * X + 9.5, color="tab:red", alpha=0.2)  # wide band up to the top left
    ax.set_ylim(-1, 10)
    legend = ax.legend(loc="upper left")
    want = "panel 0: the legend covers a filled band (move it to a free spot or outside)"
    assert covered_marks(fig, drawn(fig)) == [want]
    assert any("covers a filled band" in p for p in check_figure(fig))
    legend.set_loc("lower right")
    assert covered_marks(fig, drawn(fig)) == []
    plt.close(fig)


def test_an_annotation_crossed_by_an_error_bar_fails() -> None:
    """rmsnorm_speed: bar labels written where the whiskers cross them."""
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.bar([0, 1], [5.0, 6.0], color="tab:blue")
    ax.errorbar([0, 1], [5.0, 6.0], yerr=[[1.0, 1.0], [2.0, 2.0]], fmt="none", color="black")
    label = ax.annotate("5", (0, 5.0), xytext=(0, 6), textcoords="offset points", ha="center", va="bottom")
    ax.set_ylim(0, 9)
    assert any("the text '5' covers" in p and "drawn point" in p for p in covered_marks(fig, drawn(fig)))
    label.remove()
    ax.text(-0.6, 0.2, "5", ha="right")  # left of the bar
    ax.set_xlim(-1.2, 1.6)
    assert covered_marks(fig, drawn(fig)) == []
    plt.close(fig)


def test_a_series_under_another_fails() -> None:
    """rmsnorm_speed: the compiled runs' curves lay exactly on the eager ones."""
    fig, ax = plt.subplots()
    ax.plot(X, X**0.5, label="RMSNorm eager")
    (compiled,) = ax.plot(X, X**0.5, "--", label="RMSNorm compiled")
    assert hidden_series(ax) == [["RMSNorm eager", "RMSNorm compiled"]]
    assert any("are drawn through the same points" in p for p in check_figure(fig))
    compiled.set_ydata(X**0.5 + 0.1)
    assert hidden_series(ax) == []
    plt.close(fig)


def test_a_style_the_title_names_but_nothing_draws_fails() -> None:
    """rmsnorm_speed's title said compiled runs are dashed; leaderboard's subtitle explained hollow
    points that were not there."""
    fig, ax = plt.subplots()
    ax.plot(X, X, label="eager")
    (compiled,) = ax.plot(X, X + 1, label="compiled")
    ax.legend()
    fig.suptitle("eager: solid; compiled: dashed; hollow: one seed")
    assert style_lies(fig) == ["the text says 'dashed' but no line is drawn dashed",
                               "the text names hollow/open points but none is drawn"]  # fmt: skip
    compiled.set_linestyle("--")
    ax.plot([3.0], [9.0], "o", mfc="none")
    assert style_lies(fig) == []
    plt.close(fig)


def test_a_legend_entry_that_draws_nothing_or_names_another_style_fails() -> None:
    fig, ax = plt.subplots()
    ax.plot(X, X, label="LN (dashed)")
    ax.plot(X, [np.nan] * len(X), "--", label="pRMSNorm")
    ax.legend()
    got = style_lies(fig)
    assert "legend entry 'LN (dashed)' names a style its line does not have" in got
    assert "panel 0: legend entry 'pRMSNorm' draws nothing" in got
    plt.close(fig)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_a_line_through_fewer_than_5_points_needs_markers(n: int) -> None:
    fig, ax = plt.subplots()
    (line,) = ax.plot(X[:n], X[:n], label="BN")
    ax.axhline(1.0)  # a reference line is no curve
    assert few_point_lines(ax) == ["'BN'"]
    line.set_marker("o")
    assert few_point_lines(ax) == []
    line.set_data(X[:5], X[:5])
    line.set_marker("None")
    assert few_point_lines(ax) == []  # 5 points: a curve
    plt.close(fig)


def test_a_panel_mostly_empty_fails_fitted_passes() -> None:
    """The leaderboard's panels and the forest's ratio axis: limits far wider than the data."""
    fig, ax = plt.subplots()
    ax.plot([1.0, 2.0], [1.0, 2.0], "o")
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    drawn(fig)
    share = empty_panel_share(ax)
    want = 1 - (0.1 + 0.2) * (0.1 + 0.2)  # the data span a tenth of each axis, widened by 10 % each side
    assert share == pytest.approx(want, abs=0.02)
    assert any("of the panel is empty" in p for p in check_figure(fig))
    ax.set_xlim(0.8, 2.2)
    ax.set_ylim(0.8, 2.2)
    drawn(fig)
    assert empty_panel_share(ax) == pytest.approx(1 - (1 / 1.4 + 0.2) ** 2, abs=0.02)  # under 35 %
    plt.close(fig)


def test_a_canvas_mostly_empty_fails() -> None:
    """A 2 × 2 grid with one panel drawn and three turned off: three quarters of the canvas blank."""
    fig, axes = plt.subplots(2, 2, figsize=(6, 5))
    axes[0, 0].plot(X, X)
    for ax in axes.flat[1:]:
        ax.axis("off")
    fig.tight_layout()
    share = empty_canvas_share(fig, drawn(fig))
    assert 0.6 < share < 0.8
    assert any("of the canvas is empty" in p for p in check_figure(fig))
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(3, 2.5))
    ax.plot(X, X)
    fig.tight_layout()
    assert empty_canvas_share(fig, drawn(fig)) < 0.35
    plt.close(fig)


@pytest.mark.parametrize("text, shown", [
    ("test/bleu", "test/bleu"),
    ("BLEU at the end (val/acc)", "val/acc"),
    ("token_scale/first_layer/scale_short", "token_scale/first_layer/scale_short"),
    ("best_over_lr", "best_over_lr"),
    ("pn_v", "pn_v"),
    ("×4.27e-06", "4.27e-06"),
    ("ratio 1e−3", "1e−3"),
])  # fmt: skip
def test_raw_keys_code_names_and_e_notation_fail(text: str, shown: str) -> None:
    fig, ax = plt.subplots()
    ax.plot(X, X, "o")
    ax.set_ylabel(text)
    (problem,) = raw_texts(fig)
    assert f"shows {shown}" in problem
    ax.set_ylabel("BLEU (test set); PN-V; 0.0000043×; tokens/s; $\\sigma_B$")
    assert raw_texts(fig) == []
    plt.close(fig)


def test_an_axis_offset_in_e_notation_fails() -> None:
    fig, ax = plt.subplots()
    ax.plot(X, 1e-6 * X, "o")
    drawn(fig)
    assert any("shows 1e" in p for p in raw_texts(fig))
    plt.close(fig)


def test_one_colour_for_two_arms_fails_one_arm_in_two_styles_passes() -> None:
    """gn_groups: GN's green was Group Norm in one panel and G = 4 in the other."""
    fig, (a, b) = plt.subplots(1, 2)
    a.plot(X, X, color="tab:green", label="Group Norm")
    b.plot(X, X, color="tab:green", label="G=4")
    b.plot(X, X + 1, color="tab:red", linestyle="--", label="BN (mixed)")
    b.plot(X, X + 2, color="tab:red", label="BN (bucketed)")  # one arm, two batchings: fine
    a.legend()
    b.legend()
    assert shared_colors(fig) == ["colour #2ca02c means 2 things: g=4, group norm (give each its own colour)"]
    b.lines[0].set_color("tab:olive")
    b.legend()  # the legend's handles are copies: draw it anew
    assert shared_colors(fig) == []
    plt.close(fig)


def test_an_arm_colour_for_not_judged_fails() -> None:
    """The forest: grey meant both "not judged" and the Standard arm."""
    fig, ax = plt.subplots()
    ax.plot(X, X, color="tab:gray", label="Standard")
    ax.legend()
    ax.text(1, 5, "not judged: at this scale", color="tab:gray")
    assert shared_colors(fig) == ["colour #7f7f7f means 2 things: not judged, standard (give each its own colour)"]
    ax.texts[0].set_color("0.55")
    assert shared_colors(fig) == []
    plt.close(fig)


def test_a_legend_with_no_free_corner_in_a_row_of_panels_goes_under_its_panel() -> None:
    """Moved to the right, a wide legend left a third of the canvas blank beside the panels."""
    from normbench.analysis.figures.plot import place_legends

    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3))
    a.plot(X, X, "o")
    b.fill_between(X, -1.0 + 0 * X, 9.0 + 0 * X, alpha=0.1)  # a band over the whole panel: no corner is free
    for i in range(6):
        b.plot(X, X + 0.01 * i, label=f"arm {i}")
    b.legend()
    fig.tight_layout()
    width = fig.get_size_inches()[0]
    place_legends(fig)
    fig.canvas.draw()
    box = b.get_legend().get_window_extent()
    assert box.y1 < b.bbox.y0  # under the panel
    assert fig.get_size_inches()[0] == width  # no wider
    assert check_figure(fig) == []
    plt.close(fig)
