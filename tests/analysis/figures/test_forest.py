"""The forest plot (`normbench.analysis.figures.forest`) from small hand-made ``claims.csv`` rows: one
interval per judged claim, signed toward its claim (+ is the claim's direction; a ``less`` claim
reads b − a, a ratio b / a) in its natural unit (fractions in percentage points), the reference
line at 0 (1 for ratios, on a log axis limited to the data), the equivalence band at ±margin
([1/m, m] for a ratio), colours by verdict, the legend at the top, panels split by unit, and
claims not judged left out."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import pytest
from matplotlib.colors import to_hex

from normbench.analysis.figures.forest import (
    RATIO_PANEL,
    VERDICT_COLORS,
    forest_figure,
    write_forest,
)
from normbench.analysis.judging.stats import VERDICTS
from normbench.analysis.wording.units import BLEU, Unit

POINTS = Unit("validation accuracy", 100.0, " %", " pts")
RESULTS = Path(__file__).resolve().parents[3] / "results"


def row(id: str, verdict: str, estimate: str = "", lo: str = "", hi: str = "", **kw) -> dict:
    base = {"ratio": "False", "relation": "greater", "margin": "", "measured": "", "a": "A", "b": "B"}
    return {**base, "id": id, "verdict": verdict, "estimate": estimate, "lo": lo, "hi": hi, **kw}


ROWS = [
    row("acc_up", "supported", "0.12", "0.08", "0.16", unit=POINTS),
    row("acc_same", "equivalent", "0.001", "-0.01", "0.012", relation="equivalent", margin="0.02", unit=POINTS),
    row("acc_lower", "supported", "-0.03", "-0.05", "-0.01", relation="less", unit=POINTS, a="BN", b="standard"),
    row("bleu_up", "opposite", "-1.5", "-2.0", "-1.0", unit=BLEU),
    row("faster", "inconclusive", "1.3", "0.9", "1.9", ratio="True", unit=Unit("throughput")),
    row("smaller", "supported", "0.5", "0.4", "0.625", ratio="True", relation="less", unit=Unit("β")),
    row("same_speed", "different", "2.0", "1.6", "2.5", ratio="True", relation="equivalent", margin="1.1"),
    row("full_only", "not judged", ratio="", test="welch", unit=BLEU, measured="not run in x_cpu"),
    row("long_enough", "passed"),  # a setup check: not a claim, not drawn
]
PANELS = {RATIO_PANEL, "difference in percentage points", "difference in BLEU"}


def by_xlabel(fig) -> dict:
    return {ax.get_xlabel(): ax for ax in fig.axes}


def lines(ax, gid: str) -> list:
    return [line for line in ax.lines if line.get_gid() == gid]


def test_one_interval_per_judged_claim_signed_toward_it_in_natural_units() -> None:
    axes = by_xlabel(forest_figure(ROWS))
    assert set(axes) == PANELS
    assert sum(len(lines(ax, "interval")) for ax in axes.values()) == 7  # not judged and the check: none
    acc = axes["difference in percentage points"]
    labels = [t.get_text() for t in acc.get_yticklabels()]
    assert labels == ["acc_up (A − B)", "acc_same (A − B)", "acc_lower (standard − BN)"]
    up, _, lower = lines(acc, "interval")
    assert list(up.get_xdata()) == pytest.approx([8.0, 16.0])  # 0.08–0.16 as a fraction: 8–16 points
    assert list(lower.get_xdata()) == pytest.approx([1.0, 5.0])  # BN below standard by 1–5 points: + is the claim
    assert list(lines(acc, "estimate")[2].get_xdata()) == pytest.approx([3.0])
    ratio = axes[RATIO_PANEL]
    smaller = lines(ratio, "interval")[1]
    assert list(smaller.get_xdata()) == pytest.approx([1 / 0.625, 1 / 0.4])  # a / b = 0.5 for "a smaller": b / a = 2
    assert [t.get_text() for t in ratio.get_yticklabels()][1] == "smaller (B / A)"


def test_reference_line_and_scale_per_panel() -> None:
    axes = by_xlabel(forest_figure(ROWS))
    assert axes[RATIO_PANEL].get_xscale() == "log"
    assert [ln.get_xdata()[0] for ln in lines(axes[RATIO_PANEL], "reference")] == [1.0]
    for name in PANELS - {RATIO_PANEL}:
        assert axes[name].get_xscale() == "linear"
        assert [ln.get_xdata()[0] for ln in lines(axes[name], "reference")] == [0.0]


def band_x(ax) -> list[tuple[float, float]]:
    out = []
    for coll in ax.collections:
        if coll.get_gid() == "band":
            xs = [v[0] for path in coll.get_paths() for v in path.vertices]
            out.append((min(xs), max(xs)))
    return out


def test_the_equivalence_band_is_the_margin_in_natural_units_and_only_on_equivalence_claims() -> None:
    axes = by_xlabel(forest_figure(ROWS))
    assert band_x(axes["difference in percentage points"]) == [pytest.approx((-2.0, 2.0))]  # ±0.02 = ±2 points
    assert band_x(axes[RATIO_PANEL]) == [pytest.approx((1 / 1.1, 1.1))]  # a ratio margin m: [1/m, m]
    assert band_x(axes["difference in BLEU"]) == []


def test_colours_by_verdict_and_the_legend_at_the_top() -> None:
    fig = forest_figure(ROWS)
    axes = by_xlabel(fig)
    drawn = {to_hex(ln.get_color()) for ax in axes.values() for ln in lines(ax, "interval")}
    judged = ("supported", "equivalent", "opposite", "inconclusive", "different")
    assert drawn == {to_hex(VERDICT_COLORS[v]) for v in judged}
    assert len(set(VERDICT_COLORS.values())) == len(VERDICTS)  # no two verdicts share a colour
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [*judged[:1], "opposite", "inconclusive", "equivalent",
                                                            "different", "equivalence margin"]  # fmt: skip
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    top = max(ax.get_window_extent(renderer).y1 for ax in fig.axes)
    assert legend.get_window_extent(renderer).y0 >= top  # above every panel


def test_a_claim_not_judged_is_not_drawn_and_none_judged_is_a_clear_error() -> None:
    bleu = by_xlabel(forest_figure(ROWS))["difference in BLEU"]
    assert [t.get_text() for t in bleu.get_yticklabels()] == ["bleu_up (A − B)"]
    with pytest.raises(ValueError, match="no judged claims"):
        forest_figure([row("long_enough", "failed"), ROWS[-2]])


def test_an_infinite_end_is_drawn_to_the_edge_with_an_arrow() -> None:
    ax = forest_figure([row("diverged", "supported", "0.2", "0.1", "inf", unit=BLEU)]).axes[0]
    (interval,) = lines(ax, "interval")
    assert interval.get_xdata()[1] == ax.get_xlim()[1] and lines(ax, "beyond")[0].get_marker() == ">"


def test_a_ratio_far_from_the_rest_does_not_stretch_the_log_axis() -> None:
    """The issue's ×4.27e-06 row stretched the axis from 10⁻⁶ to 50: the axis spans the other rows,
    the far one is drawn to the edge with an arrow, its number written beside it."""
    rows = [row("near", "supported", "1.3", "1.1", "1.6", ratio="True"),
            row("far", "supported", "4.27e-06", "3.1e-06", "5.8e-06", ratio="True", relation="less")]  # fmt: skip
    ax = forest_figure(rows).axes[0]
    lo, hi = ax.get_xlim()
    assert 0.5 < lo < 1 and 1.6 < hi < 3
    assert len(lines(ax, "beyond")) == 2  # both ends of the far interval (234,000× for "a smaller")
    assert any("234,000×" in t.get_text() for t in ax.texts)


def test_the_figure_stays_below_2500_px_however_many_claims() -> None:
    many = [row(f"claim {i}", "supported", "0.1", "0.05", "0.15", unit=POINTS) for i in range(150)]
    fig = forest_figure(many)
    assert fig.get_size_inches()[1] * 150 <= 2500


def test_write_forest_writes_the_figure_and_its_signed_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NORMBENCH_FIGURE_FORMATS", raising=False)  # the default: PNG and PDF
    paths = write_forest(ROWS, tmp_path, title="t")
    assert sorted(p.name for p in paths) == ["forest.csv", "forest.pdf", "forest.png"]
    with open(tmp_path / "forest.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["label"] for r in table] == ["acc_up", "acc_same", "acc_lower", "bleu_up", "faster", "smaller",
                                           "same_speed"]  # fmt: skip
    assert table[1]["band_lo"] == "-2.0" and table[2]["arms"] == "standard − BN"
    assert float(table[2]["estimate"]) == pytest.approx(3.0) and float(table[5]["estimate"]) == pytest.approx(2.0)


def test_normbench_figures_forest_only_redraws_from_claims_csv(tmp_path: Path, capsys) -> None:
    from normbench.analysis.figures.figures_cli import main
    from normbench.analysis.judging.claims import CSV_FIELDS

    assert main(["gn_batch_size_cpu", "--forest-only", "--out", str(tmp_path)]) == 2  # no claims.csv yet
    assert "claims.csv" in capsys.readouterr().err
    with open(tmp_path / "claims.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows([{**dict.fromkeys(CSV_FIELDS, ""), **r} for r in ROWS])
    assert main(["gn_batch_size_cpu", "--forest-only", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "forest.png").is_file() and (tmp_path / "claims.md").is_file()
    assert (tmp_path / "forest.csv").read_text().count("\n") == 1 + 7  # the header, one row per judged claim


def test_the_leaderboards_forest_is_redrawn_from_its_folder(tmp_path: Path) -> None:
    """``normbench-figures leaderboard_cpu --forest-only``: the leaderboard is drawn by its own
    command, but its forest and claims.md come from its folder's claims.csv like every preset's."""
    from normbench.analysis.figures.figures_cli import main

    shutil.copy(RESULTS / "leaderboard_cpu" / "claims.csv", tmp_path / "claims.csv")
    assert main(["leaderboard_cpu", "--forest-only", "--out", str(tmp_path)]) == 0
    with open(tmp_path / "forest.csv", newline="") as f:
        drawn = list(csv.DictReader(f))
    with open(tmp_path / "claims.csv", newline="") as f:
        judged = [r for r in csv.DictReader(f) if r["verdict"] not in ("passed", "failed", "not judged")]
    assert len(drawn) == len(judged) >= 1


def test_the_forest_plot_is_the_first_image_logged_to_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    from normbench.analysis.figures.figures_cli import log_to_wandb
    from normbench.analysis.figures.plot import FigureResult

    logged: list[dict] = []
    run = types.SimpleNamespace(id="r1", log=logged.append, finish=lambda: None)
    fake = types.SimpleNamespace(init=lambda **kw: run, Image=lambda path: ("image", path), Table=lambda **kw: kw)
    monkeypatch.setitem(sys.modules, "wandb", fake)
    write_forest(ROWS, tmp_path)
    figure = forest_figure(ROWS)  # any figure: only its name and PNG are logged
    figure.savefig(tmp_path / "fig1.png")
    assert log_to_wandb([FigureResult("fig1", figure)], tmp_path, "me/nb", None, "x_cpu") == "r1"
    assert [list(row) for row in logged] == [["figures/forest"], ["figures/fig1"]]
    assert logged[0]["figures/forest"] == ("image", str(tmp_path / "forest.png"))
