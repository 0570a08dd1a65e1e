"""`normbench.analysis.figure_checks`: each check fails on a figure broken on purpose and passes once
it is fixed; every preset's figures, drawn from synthetic runs shaped like the CPU presets' real
ones, pass them all; `normbench-figures` reports a problem as one error line and exit status 1."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from normbench.analysis import FIGURES, figures_cli, load_local_runs, make_figures, write_outputs
from normbench.analysis.figure_checks import check_figure, mark_text_panel
from normbench.analysis.plot import FigureResult, place_legends
from tests.analysis.figure_runs import PRESET_RUNS, santurkar


def two_panels(empty: bool = False):
    """Two panels, a curve in the first; the second ("other") empty or with two points."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(8.0, 3.0))
    a.plot([0, 1, 2], [1.0, 2.0, 3.0])
    a.set_title("curve")
    b.set_title("other")
    if not empty:
        b.plot([0.0, 1.0], [0.0, 1.0], "o")
    return fig, a, b


def only(problems: list[str], needle: str) -> None:
    assert len(problems) >= 1 and all(needle in p for p in problems), problems


def test_an_empty_panel_fails_unless_turned_off_or_marked_text() -> None:
    fig, _, b = two_panels(empty=True)
    only(check_figure(fig), "panel 'other': no data drawn")
    (nan,) = b.plot([0, 1], [np.nan, np.nan])  # a curve of NaNs draws nothing either
    assert "panel 'other': no data drawn" in check_figure(fig)[0]
    nan.remove()
    b.axis("off")
    assert check_figure(fig) == []
    b.axis("on")
    b.text(0.5, 0.5, "3 of 5 runs diverged", ha="center")
    mark_text_panel(b)
    assert check_figure(fig) == []
    plt.close(fig)


def test_a_curve_through_one_point_fails_markers_pass() -> None:
    fig, _, b = two_panels()
    (line,) = b.plot([5.0], [1.0], label="bn")  # a line style through one point: nothing shows
    only(check_figure(fig), "line 'bn' has fewer than 2 points")
    line.set_linestyle("none")
    line.set_marker("o")
    assert check_figure(fig) == []
    b.errorbar([1.0], [2.0], yerr=[0.5], capsize=3)  # an error bar at one point is no curve
    assert check_figure(fig) == []
    plt.close(fig)


def test_overlapping_tick_labels_fail_wrapped_ones_pass() -> None:
    fig, _, b = two_panels()
    names = [f"arm number {i} (compiled)" for i in range(6)]
    b.plot(range(6), range(6), "o")
    b.set_xticks(range(6), names)
    only(check_figure(fig), "pair(s) of x tick labels overlap")
    b.set_xticks(range(6), [str(i) for i in range(6)])
    assert check_figure(fig) == []
    b.set_yticks([0.0, 0.01, 0.02], ["0", "1", "2"], fontsize=40)  # y labels too: taller than their spacing
    only(check_figure(fig), "y tick labels overlap")
    plt.close(fig)


def test_a_title_cut_at_the_edge_fails() -> None:
    fig, _, b = two_panels()
    b.set_title("activations after norm position features.4.norm (5/25/50/75/95 %) of the VGG")
    fig.tight_layout()
    only(check_figure(fig), "panel 'activations after norm position")
    b.set_title("activations after norm\nposition features.4.norm")
    fig.tight_layout()
    assert check_figure(fig) == []
    fig.suptitle("a figure title far wider than the eight inches of this figure, so that it runs off both sides",
                 fontsize=16)  # fmt: skip
    only(check_figure(fig), "figure text 'a figure title far wider")
    plt.close(fig)


def test_a_legend_over_the_data_fails_and_place_legends_moves_it() -> None:
    fig, a, b = two_panels()
    b.plot([0.8, 0.9, 1.0], [0.9, 1.0, 0.95], "o", label="short")  # points in the upper right
    b.plot([0.0, 0.05], [0.0, 0.05], "s", label="long")
    b.legend(loc="upper right")
    fig.tight_layout()
    only(check_figure(fig), "panel 'other': the legend covers")
    place_legends(fig)
    assert check_figure(fig) == []
    assert b.get_legend().get_window_extent().overlaps(b.bbox)  # moved to a free corner, not outside
    plt.close(fig)


def test_place_legends_moves_a_legend_outside_when_no_corner_is_free() -> None:
    fig, ax = plt.subplots(figsize=(4, 3))
    grid = np.linspace(0, 1, 15)
    for i, y in enumerate(grid):
        ax.plot(grid, np.full_like(grid, y), ".", label=f"series {i}" if i < 4 else None)
    ax.legend()
    fig.tight_layout()
    only(check_figure(fig), "the legend covers")
    place_legends(fig)
    assert check_figure(fig) == []
    assert ax.get_legend().get_window_extent().x0 > ax.bbox.x1  # right of the axes, inside the figure
    plt.close(fig)


@pytest.mark.parametrize("preset", sorted(FIGURES))
def test_every_presets_figures_are_readable(preset: str, tmp_path: Path) -> None:
    PRESET_RUNS[preset](tmp_path / "runs")
    results = make_figures(f"{preset}_cpu", load_local_runs([tmp_path / "runs"]))
    write_outputs(results, tmp_path / "out")
    assert {res.name: res.problems for res in results} == {res.name: [] for res in results}


def test_the_command_reports_each_problem_in_one_line_and_exits_1(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    santurkar(tmp_path / "runs")

    def broken(preset: str, runs: list) -> list[FigureResult]:
        fig, _, _ = two_panels(empty=True)
        return [FigureResult("broken", fig)]

    monkeypatch.setattr(figures_cli, "make_figures", broken)
    out = tmp_path / "out"
    assert figures_cli.main(["santurkar_vgg_cpu", "--runs", str(tmp_path / "runs"), "--out", str(out)]) == 1
    err = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert err == ["normbench-figures: error: figure broken: panel 'other': no data drawn (an empty panel; "
                   "turn it off or mark it a text panel)"]  # fmt: skip
    assert (out / "broken.png").is_file() and (out / "claims.csv").is_file()  # written all the same
