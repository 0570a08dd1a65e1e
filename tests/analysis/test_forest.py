"""The forest plot (`normbench.analysis.forest`) from small hand-made ``claims.csv`` rows: one
interval per judged claim at its numbers, the reference line at 0 (1 for ratios, on a log axis),
the equivalence band at ±margin ([1/m, m] for a ratio), colours by verdict, not-judged claims as
grey text with their reason, and panels split by unit."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from matplotlib.colors import to_hex

from normbench.analysis.forest import (
    RATIO_PANEL,
    VERDICT_COLORS,
    annotate,
    forest_figure,
    measure_unit,
    not_judged_text,
    rules_meta,
    write_forest,
)
from normbench.analysis.stats import VERDICTS


def row(id: str, verdict: str, estimate: str = "", lo: str = "", hi: str = "", **kw: str) -> dict[str, str]:
    base = {"ratio": "False", "relation": "greater", "margin": "", "measured": ""}
    return {**base, "id": id, "verdict": verdict, "estimate": estimate, "lo": lo, "hi": hi, **kw}


ROWS = [
    row("acc_up", "supported", "0.12", "0.08", "0.16", unit="accuracy (fraction)"),
    row(
        "acc_same",
        "equivalent",
        "0.001",
        "-0.01",
        "0.012",
        relation="equivalent",
        margin="0.02",
        unit="accuracy (fraction)",
    ),  # fmt: skip
    row("bleu_up", "opposite", "-1.5", "-2.0", "-1.0", unit="BLEU"),
    row("faster", "inconclusive", "1.3", "0.9", "1.9", ratio="True"),
    row("same_speed", "different", "2.0", "1.6", "2.5", ratio="True", relation="equivalent", margin="1.1"),
    row(
        "full_only",
        "not judged",
        ratio="",
        test="welch",
        unit="BLEU",
        measured="not run in x_cpu (the rules judge it in: full)",
    ),  # fmt: skip
    row("long_enough", "passed"),  # a setup check: not a claim, not drawn
]


def by_xlabel(fig) -> dict:
    return {ax.get_xlabel(): ax for ax in fig.axes}


def lines(ax, gid: str) -> list:
    return [line for line in ax.lines if line.get_gid() == gid]


def test_one_interval_per_judged_claim_at_its_numbers_in_panels_by_unit() -> None:
    axes = by_xlabel(forest_figure(ROWS))
    assert set(axes) == {RATIO_PANEL, "difference a − b: accuracy (fraction)", "difference a − b: BLEU"}
    assert sum(len(lines(ax, "interval")) for ax in axes.values()) == 5  # judged claims; check and not-judged: none
    acc = axes["difference a − b: accuracy (fraction)"]
    assert [t.get_text() for t in acc.get_yticklabels()] == ["acc_up", "acc_same"]
    up = lines(acc, "interval")[0]
    assert list(up.get_xdata()) == [0.08, 0.16] and list(up.get_ydata()) == [0, 0]
    assert list(lines(acc, "estimate")[0].get_xdata()) == [0.12]


def test_reference_line_and_scale_per_panel() -> None:
    axes = by_xlabel(forest_figure(ROWS))
    assert axes[RATIO_PANEL].get_xscale() == "log"
    assert [ln.get_xdata()[0] for ln in lines(axes[RATIO_PANEL], "reference")] == [1.0]
    for name in ("difference a − b: accuracy (fraction)", "difference a − b: BLEU"):
        assert axes[name].get_xscale() == "linear"
        assert [ln.get_xdata()[0] for ln in lines(axes[name], "reference")] == [0.0]


def band_x(ax) -> list[tuple[float, float]]:
    out = []
    for coll in ax.collections:
        if coll.get_gid() == "band":
            xs = [v[0] for path in coll.get_paths() for v in path.vertices]
            out.append((min(xs), max(xs)))
    return out


def test_the_equivalence_band_is_the_margin_and_only_on_equivalence_claims() -> None:
    axes = by_xlabel(forest_figure(ROWS))
    assert band_x(axes["difference a − b: accuracy (fraction)"]) == [pytest.approx((-0.02, 0.02))]
    assert band_x(axes[RATIO_PANEL]) == [pytest.approx((1 / 1.1, 1.1))]  # a ratio margin m: [1/m, m]
    assert band_x(axes["difference a − b: BLEU"]) == []


def test_colours_by_verdict_and_a_legend_of_the_verdicts_shown() -> None:
    fig = forest_figure(ROWS)
    axes = by_xlabel(fig)
    drawn = {to_hex(ln.get_color()) for ax in axes.values() for ln in lines(ax, "interval")}
    judged = ("supported", "equivalent", "opposite", "inconclusive", "different")
    assert drawn == {to_hex(VERDICT_COLORS[v]) for v in judged}
    assert to_hex(lines(axes["difference a − b: BLEU"], "interval")[0].get_color()) == VERDICT_COLORS["opposite"]
    assert len(set(VERDICT_COLORS.values())) == len(VERDICTS)  # no two verdicts share a colour
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == [*VERDICTS, "equivalence margin"]


def test_a_not_judged_claim_is_grey_text_with_its_reason_not_an_interval() -> None:
    bleu = by_xlabel(forest_figure(ROWS))["difference a − b: BLEU"]
    (text,) = [t for t in bleu.texts if t.get_gid() == "not-judged"]
    assert "not run in x_cpu" in text.get_text() and to_hex(text.get_color()) == VERDICT_COLORS["not judged"]
    assert len(lines(bleu, "interval")) == 1
    assert [t.get_text() for t in bleu.get_yticklabels()] == ["bleu_up", "full_only"]


NEEDS_N = "not judged at this scale (needs n ≈ 14, or the full preset)"


@pytest.mark.parametrize(
    ("note", "width", "text"),
    [
        (NEEDS_N, 100, "not judged: at this scale (needs n ≈ 14, or the full preset)"),
        (NEEDS_N, 40, "not judged: at this scale (needs n ≈ 14…"),
        ("not run in x_cpu (full only)", 100, "not judged: not run in x_cpu (full only)"),
        ("not judged: setup check failed (bn_learns)", 100, "not judged: setup check failed (bn_learns)"),
        ("", 100, "not judged"),
    ],
)
def test_a_not_judged_reason_says_not_judged_once_and_is_cut_at_its_width(note: str, width: int, text: str) -> None:
    assert not_judged_text(note, width) == text and len(text) <= width


def test_an_infinite_end_is_drawn_to_the_edge_with_an_arrow() -> None:
    ax = forest_figure([row("diverged", "supported", "0.2", "0.1", "inf", unit="u")]).axes[0]
    (interval,) = lines(ax, "interval")
    assert interval.get_xdata()[1] == ax.get_xlim()[1] and lines(ax, "beyond")[0].get_marker() == ">"


def test_no_claims_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no claims"):
        forest_figure([row("long_enough", "failed")])


def test_rules_defaults_and_units() -> None:
    title, claims = rules_meta("santurkar_vgg_cpu")
    assert title  # paper_title, or the preset's name by default
    assert claims["fig1_train_acc_lr0.1"]["short"]  # short, or the id by default
    assert claims["fig1_train_acc_lr0.1"]["unit"] == "accuracy (fraction)"
    assert measure_unit({"name": "final", "key": "val/loss"}) == "validation loss"
    assert measure_unit("something_new") == "something_new"
    (annotated,) = annotate([{"id": "fig1_train_acc_lr0.1"}], "santurkar_vgg_cpu", prefix="S: ")
    assert annotated["short"].startswith("S: ") and annotated["unit"] == "accuracy (fraction)"


def test_write_forest_writes_the_figure_and_its_numbers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NORMBENCH_FIGURE_FORMATS")  # the default: PNG and PDF
    paths = write_forest(ROWS, tmp_path, title="t")
    assert sorted(p.name for p in paths) == ["forest.csv", "forest.pdf", "forest.png"]
    with open(tmp_path / "forest.csv", newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["label"] for r in table] == ["faster", "same_speed", "acc_up", "acc_same", "bleu_up", "full_only"]
    assert table[3]["band_lo"] == "-0.02" and table[5]["verdict"] == "not judged" and "not run" in table[5]["note"]


def test_normbench_figures_forest_only_redraws_from_claims_csv(tmp_path: Path, capsys) -> None:
    from normbench.analysis.claims import CSV_FIELDS
    from normbench.analysis.figures_cli import main

    assert main(["gn_batch_size_cpu", "--forest-only", "--out", str(tmp_path)]) == 2  # no claims.csv yet
    assert "claims.csv" in capsys.readouterr().err
    with open(tmp_path / "claims.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows([{**dict.fromkeys(CSV_FIELDS, ""), **r} for r in ROWS])
    assert main(["gn_batch_size_cpu", "--forest-only", "--out", str(tmp_path)]) == 0
    assert (tmp_path / "forest.png").is_file()
    assert (tmp_path / "forest.csv").read_text().count("\n") == 1 + 6  # the header, one row per claim


def test_the_forest_plot_is_the_first_image_logged_to_wandb(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    from normbench.analysis.figures_cli import log_to_wandb
    from normbench.analysis.plot import FigureResult

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
