"""Figure conventions shared by every figure: one colour per registered norm."""

from __future__ import annotations

import math

import matplotlib.colors as mcolors
import pytest

from normbench.analysis.figures.plot import NORM_COLORS
from normbench.norms.registry import list_norms
from tests.faults import fault


@pytest.mark.parametrize("norm", list_norms())
def test_every_registered_norm_has_its_own_colour(norm: str) -> None:
    assert norm in NORM_COLORS, f"add {norm!r} to NORM_COLORS in normbench/analysis/figures/plot.py"
    mine = mcolors.to_rgb(NORM_COLORS[norm])
    # Euclidean distance in RGB (0-1 per channel): darkred and maroon, once bn_l1's and bn_linf's,
    # are 0.045 apart and could not be told apart in the bn_lp figures
    close = [other for other, c in NORM_COLORS.items() if other != norm and math.dist(mcolors.to_rgb(c), mine) < 0.12]
    assert not close, f"{norm}'s colour cannot be told from that of {close}"


def test_crowded_point_labels_are_all_drawn_and_never_overlap() -> None:
    """The CPU leaderboard's crowded cluster (ln 30.5, in 31.0, rms 29.9 … at nearly one throughput):
    every label is on the axes, beside its point, and no two labels' boxes overlap."""
    from normbench.analysis.figures.plot import new_figure
    from normbench.analysis.figures.plot_rows import LABEL_OFFSETS, label_points

    fig, axes = new_figure(1, 1, "crowded")
    ax = axes[0, 0]
    points = [(1.00, 45.3, "bn", "C0"), (0.95, 35.3, "gn", "C1"), (1.02, 34.1, "none", "C2"), (0.97, 32.9, "pn", "C3"),
              (0.98, 32.6, "ln_sample", "C4"), (0.99, 31.0, "in", "C5"), (0.99, 30.5, "ln", "C6"),
              (0.99, 29.9, "rms", "C7"), (0.96, 22.2, "brn", "C8")]  # fmt: skip
    for x, y, _, color in points:
        ax.plot(x, y, "o", color=color)
    fig.tight_layout()
    label_points(ax, points)
    renderer = fig.canvas.get_renderer()
    texts = {t.get_text(): t for t in ax.texts}
    assert sorted(texts) == sorted(p[2] for p in points)
    boxes = [t.get_window_extent(renderer) for t in texts.values()]
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])
    reach = max(max(abs(dx), abs(dy)) for dx, dy in LABEL_OFFSETS)
    for x, y, name, _ in points:  # each beside its own point: the offset is one of the tried ones
        assert texts[name].xy == (x, y) and max(map(abs, texts[name].xyann)) <= reach


def test_a_single_point_is_drawn_as_a_marker_with_its_seeds_range() -> None:
    """A run evaluated once gives one point per seed; as a line it would not show (the first bn_lp
    figure's test-accuracy panel was empty)."""
    import numpy as np

    from normbench.analysis.figures.plot import new_figure, seed_curve

    fig, axes = new_figure(1, 1, "one point")
    ax = axes[0, 0]
    rows: list[dict] = []
    series = [(np.array([140.0]), np.array([v])) for v in (0.2, 0.3, 0.25)]
    seed_curve(ax, rows, "test_acc", "bn", series, color="tab:red")
    (line,) = ax.lines
    assert line.get_marker() == "o" and line.get_linestyle() == "None"
    assert list(line.get_xdata()) == [140.0] and list(line.get_ydata()) == [0.25]
    (span,) = ax.collections  # the seeds' min-max as a vertical segment
    assert np.allclose(span.get_segments()[0], [[140.0, 0.2], [140.0, 0.3]])
    assert rows == [{"panel": "test_acc", "series": "bn", "x": 140.0, "median": 0.25, "lo": 0.2, "hi": 0.3, "n": 3}]


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, ("png", "pdf")), ("png", ("png",)), (" png , pdf ", ("png", "pdf")), ("pdf,png,png", ("pdf", "png"))],
)
def test_figure_formats_default_to_png_and_pdf_and_follow_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str | None, expected: tuple[str, ...]
) -> None:
    from normbench.analysis.figures.plot import figure_formats

    if value is None:
        monkeypatch.delenv("NORMBENCH_FIGURE_FORMATS", raising=False)
    else:
        monkeypatch.setenv("NORMBENCH_FIGURE_FORMATS", value)
    assert figure_formats() == expected


@fault("NORMBENCH_FIGURE_FORMATS without png or with a format it cannot write (pdf, svg, png,jpg, empty)",
       "one line naming the value and the choices, exit 2; nothing written", "one-line")  # fmt: skip
@pytest.mark.parametrize("value", ["pdf", "svg", "png,jpg", ""])
def test_bad_figure_formats_are_one_line_before_anything_is_written(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    from normbench.analysis.figures import figures_cli
    from tests.analysis.figures.figure_runs import santurkar

    santurkar(tmp_path / "runs")
    monkeypatch.setenv("NORMBENCH_FIGURE_FORMATS", value)
    out = tmp_path / "out"
    assert figures_cli.main(["santurkar_vgg_cpu", "--runs", str(tmp_path / "runs"), "--out", str(out)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"normbench-figures: error: NORMBENCH_FIGURE_FORMATS={value!r} is not allowed; use png or png,pdf "
        "(png is always written)"
    ]
    assert not out.exists()


def test_a_points_label_covers_nothing_once_every_point_is_drawn() -> None:
    """bn_eval_stats's bar panel: the first arm's median (0.0005) on the zero line, two more arms to
    its right. Its label was placed while the axes held that one point (other limits), and covered
    the zero line in the final figure (rc 1 from the figure checks)."""
    import matplotlib.pyplot as plt

    from normbench.analysis.figures.figure_lint import covers
    from normbench.analysis.figures.plot_rows import point_rows

    rows = {"a": (0.0005, -0.0055, 0.0035), "b": (0.0095, -0.009, 0.049), "c": (0.001, -0.0125, 0.0075)}
    fig, ax = plt.subplots(figsize=(4.2, 3.3))
    ax.axhline(0.0, color="black", linewidth=0.8)
    point_rows(ax, {k: {"median": m, "lo": lo, "hi": hi, "n": 23} for k, (m, lo, hi) in rows.items()})
    fig.tight_layout()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    hits = {t.get_text(): covers(ax, t.get_window_extent(renderer)) for t in ax.texts}
    plt.close(fig)
    assert sorted(hits) == ["0.000500", "0.00100", "0.00950"] and not any(hits.values()), hits
