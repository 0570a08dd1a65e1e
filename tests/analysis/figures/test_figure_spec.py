"""Figures as data: a preset's ``figures:`` block is typed (an unknown key is one line), stays out
of the rules hash, names only registered measures, series and code figures; the one renderer
draws each panel kind with the numbers a hand computation gives; the dashboard takes the same
spec's panels."""

from __future__ import annotations

import copy
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest

from normbench.analysis.dashboards.dashboard import build_dashboard
from normbench.analysis.figures import figure_keys, figures_cli
from normbench.analysis.figures.figure_spec import CODE_FIGURES, DODGE_PT, render
from normbench.analysis.figures.plot_rows import number
from normbench.analysis.judging.figure_schema import SERIES, CodeFigure, FigureSpec, parse_figures
from normbench.analysis.judging.per_run import MEASURES
from normbench.analysis.judging.rules_schema import load_rules, parse_rules
from normbench.analysis.loading.runs import load_local_runs
from normbench.base.errors import ConfigError
from normbench.rules import canonical_hash, list_rule_presets, load_rules_data, rules_hash
from tests.analysis.figures.figure_runs import bn_lr_range
from tests.test_figures import write_run

SPEC = {
    "fetch": "^val/acc$",
    "draw": [
        {
            "name": "toy",
            "title": "toy",
            "arms": [{"label": "BN", "select": {"norm.name": "bn"}}, {"label": "rest", "rest": True}],
            "panels": [
                {"panel": "acc", "kind": "curve", "y": {"key": "val/acc"}, "xlabel": "step", "ylabel": "acc"},
                {"panel": "final", "kind": "bar", "value": {"name": "final", "key": "val/acc"}, "xlabel": "arm",
                 "ylabel": "acc"},  # fmt: skip
            ],
        }
    ],
}


def test_every_preset_has_figures_and_names_only_registered_parts() -> None:
    for preset in list_rule_presets():  # every paper preset with rules draws its figures from them
        if preset == "leaderboard":  # its table and figure are normbench-leaderboard's (leaderboard_report)
            continue
        figures = load_rules(preset).figures
        assert figures is not None and figures.draw, preset
        for item in figures.draw:
            if isinstance(item, CodeFigure):
                assert item.code in CODE_FIGURES, (preset, item.code)
                continue
            for panel in item.panels:
                assert panel.value is None or panel.value[0] in MEASURES, (preset, panel.panel)
                assert all(line.series is None or line.series in SERIES for line in panel.lines), preset


@pytest.mark.parametrize(
    "where, edit, message",
    [
        ("draw", lambda f: f["draw"][0].update(colour="red"), "figure 'toy': unknown key 'colour'; valid keys: name"),
        ("panel", lambda f: f["draw"][0]["panels"][0].update(kind="pie"), "panel 'acc': kind 'pie'; valid choices"),
        ("line", lambda f: f["draw"][0]["panels"][0]["y"].update(keys="x"), "y: unknown key 'keys'"),
        ("arm", lambda f: f["draw"][0]["arms"][0].update(sel={}), "arm 0: unknown key 'sel'"),
        ("fetch", lambda f: f.update(fetch="^(val"), "fetch '^(val' is not a regular expression"),
        ("bar", lambda f: f["draw"][0]["panels"][1].pop("value"), "a bar panel needs 'value'"),
        ("scale", lambda f: f["draw"][0]["panels"][1].update(scale=0), "panel 'final': scale 0 is not allowed"),
    ],
)
def test_a_bad_figures_block_is_one_line_naming_the_key(where: str, edit, message: str) -> None:
    spec = copy.deepcopy(SPEC)
    edit(spec)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("^", r"\^")) as err:
        parse_figures(spec, "rules of toy")
    assert "\n" not in str(err.value)


def test_the_rules_loader_parses_the_block_and_the_hash_leaves_it_out() -> None:
    data = load_rules_data("bn_dropout")
    assert rules_hash("bn_dropout") == canonical_hash({k: v for k, v in data.items() if k not in ("figures", "about")})
    redrawn = {**data, "figures": SPEC}
    rules = parse_rules(redrawn, "bn_dropout", "h")
    assert [d.name for d in rules.figures.draw] == ["toy"]
    with pytest.raises(ConfigError, match="unknown key 'figure'"):
        parse_rules({**data, "figure": SPEC}, "bn_dropout", "h")  # a typo at the top level
    assert figure_keys("bn_dropout_cpu")(["val/acc", "train_eval/acc", "lr"]) == ["val/acc", "train_eval/acc"]


def test_render_draws_the_median_and_range_over_seeds_per_arm(tmp_path: Path) -> None:
    acc = {("bn", s): [0.1 * s, 0.5 + 0.1 * s] for s in range(3)} | {("none", s): [0.2, 0.3 * s] for s in range(3)}
    for job, ((norm, seed), values) in enumerate(acc.items()):
        rows = [{"step": 10, "val/acc": values[0]}, {"step": 20, "val/acc": values[1]}]
        write_run(tmp_path, job, {"norm": {"name": norm}, "seed": seed}, rows, {})
    spec = parse_figures(SPEC, "rules of toy").draw[0]
    assert isinstance(spec, FigureSpec)
    res = render(spec, load_local_runs([tmp_path]))
    plt.close(res.fig)
    got = {(r["panel"], r["series"], float(r["x"])): (r["median"], r["lo"], r["hi"], r["n"]) for r in res.rows}
    for label, norm in (("BN", "bn"), ("rest", "none")):
        for i, step in enumerate((10.0, 20.0)):
            v = np.asarray([acc[(norm, s)][i] for s in range(3)])
            assert got[("acc", label, step)] == pytest.approx((np.median(v), v.min(), v.max(), 3))
        final = np.asarray([acc[(norm, s)][1] for s in range(3)])
        x = 0.0 if label == "BN" else 1.0  # one bar per arm, in the spec's order
        assert got[("final", label, x)] == pytest.approx((np.median(final), final.min(), final.max(), 3))
    assert len(res.rows) == 6


def test_arms_by_config_values_in_the_given_order_with_labels(tmp_path: Path) -> None:
    job = 0
    for norm in ("gn", "bn", "ln"):
        for bs in (2, 32):
            for seed in range(2):
                rows = [{"step": 5, "val/acc": 0.5 + 0.01 * seed - 0.1 * (bs == 2)}]
                write_run(tmp_path, job, {"norm": {"name": norm}, "batch_size": bs, "seed": seed}, rows, {})
                job += 1
    spec = parse_figures({"fetch": ".", "draw": [{"name": "s", "title": "s",
                          "arms": {"by": "norm.name", "order": ["gn"], "labels": {"gn": "Group Norm"}},
                          "panels": [{"panel": "err", "kind": "sweep", "x": "batch_size", "value": "error",
                                      "xlabel": "b", "ylabel": "e", "xticks": True, "xscale": "log2"}]}]},
                         "t").draw[0]  # fmt: skip
    res = render(spec, load_local_runs([tmp_path]))
    assert [t.get_text() for t in res.fig.axes[0].get_xticklabels()] == ["2", "32"]
    plt.close(res.fig)
    assert list(dict.fromkeys(r["series"] for r in res.rows)) == ["Group Norm", "BN", "LN"]  # listed first, rest sorted
    err = {(r["series"], r["x"]): r["median"] for r in res.rows}
    assert err[("BN", 2.0)] == pytest.approx(100 * (1 - np.median([0.4, 0.41])))
    assert err[("LN", 32.0)] == pytest.approx(100 * (1 - 0.505))


def test_the_dashboard_takes_the_figures_own_panels_from_the_same_spec() -> None:
    section = next(s for s in build_dashboard("bn_dropout_cpu").sections if s.figure == "bn_dropout")
    assert ("val/acc", "train_eval/acc") in [p.y for p in section.panels]
    eval_stats = next(s for s in build_dashboard("bn_eval_stats").sections if s.figure == "bn_eval_stats")
    assert any(p.y == ("eval_stats/first_layer/var_dist",) and p.x == "epoch" for p in eval_stats.panels)


def test_normbench_figures_reports_a_bad_figures_block_in_one_line_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bn_lr_range(tmp_path / "runs")
    data = load_rules_data("bn_lr_range")
    panel = {**data["figures"]["draw"][0]["panels"][0], "kind": "scatter"}
    bad = {**data, "figures": {**data["figures"], "draw": [{**data["figures"]["draw"][0], "panels": [panel]}]}}
    monkeypatch.setattr("normbench.analysis.judging.rules_schema.load_rules_data", lambda preset: bad)
    out = tmp_path / "out"
    assert figures_cli.main(["bn_lr_range_cpu", "--runs", str(tmp_path / "runs"), "--out", str(out)]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]  # not the warnings
    assert errors == [
        "normbench-figures: error: rules of bn_lr_range_cpu, figures, figure 'bn_lr_range', panel 'final_val_acc': "
        "kind 'scatter'; valid choices: curve, bar, sweep"
    ]
    assert not out.exists()


def test_the_leaderboard_is_drawn_by_its_own_command() -> None:
    """The leaderboard has rules (its claims) but normbench-leaderboard draws its table and figure:
    normbench-figures names that command in one line instead of drawing nothing."""
    from normbench.analysis.figures import FIGURES, figure_fn
    from normbench.base.errors import ConfigError

    assert "leaderboard" not in FIGURES
    with pytest.raises(ConfigError, match="drawn by normbench-leaderboard"):
        figure_fn("leaderboard_cpu")


# ---------------------------------------------------------------- what a reader sees (issue 57)
def _sweep_spec(**panel) -> FigureSpec:
    spec = parse_figures({"fetch": ".", "draw": [{"name": "s", "title": "s",
                          "arms": {"by": "norm.name", "order": ["none"], "labels": {"none": "Standard"}},
                          "panels": [{"panel": "acc", "kind": "sweep", "value": "final_acc", "xlabel": "x",
                                      "ylabel": "y", **panel}]}]}, "t").draw[0]  # fmt: skip
    assert isinstance(spec, FigureSpec)
    return spec


def test_a_categorical_sweep_draws_each_arms_range_as_a_bar_beside_the_others(tmp_path: Path) -> None:
    job = 0
    for norm in ("bn", "gn"):
        for bs in (2, 32):
            for seed in range(3):
                rows = [{"step": 5, "val/acc": 0.5 + 0.02 * seed + 0.1 * (norm == "gn")}]
                write_run(tmp_path, job, {"norm": {"name": norm}, "batch_size": bs, "seed": seed}, rows, {})
                job += 1
    spec = _sweep_spec(x="batch_size", xticks=True, xscale="log2", invert_x=True)
    res = render(spec, load_local_runs([tmp_path]))
    ax = res.fig.axes[0]
    res.fig.canvas.draw()
    data_lines = [c.lines[0] for c in ax.containers]  # each arm's errorbar: its points' line
    assert sorted(c.get_label() for c in ax.containers) == sorted({r["series"] for r in res.rows})
    at_2 = [line.get_transform().transform(line.get_xydata()[0])[0] for line in data_lines]
    assert abs(at_2[0] - at_2[1]) == pytest.approx(DODGE_PT / 72.0 * res.fig.dpi)  # beside each other, not over
    bars = [c for c in ax.collections if c.get_segments()]
    want = sorted((r["lo"], r["hi"]) for r in res.rows)
    got = sorted((float(s[:, 1].min()), float(s[:, 1].max())) for c in bars for s in map(np.asarray, c.get_segments()))
    np.testing.assert_allclose(got, want)  # each arm's min–max over seeds at each batch size, as its error bar
    assert not [p for p in ax.collections if type(p).__name__ == "FillBetweenPolyCollection"]  # no bands
    plt.close(res.fig)


def test_diverged_runs_are_counted_in_their_arms_legend_entry(tmp_path: Path) -> None:
    for job, (norm, lr, seed) in enumerate((n, lr, s) for n in ("bn", "none") for lr in (0.1, 1.0) for s in range(3)):
        diverged = norm == "none" and lr == 1.0 and seed < 2
        summary = {"status": "diverged", "step": 3} if diverged else {"step": 5}
        rows = [{"step": 3 if diverged else 5, "val/acc": 0.4 + 0.01 * seed}]
        write_run(tmp_path, job, {"norm": {"name": norm}, "lr": lr, "seed": seed}, rows, summary)
    res = render(_sweep_spec(x="lr", xscale="log", mark_diverged=True), load_local_runs([tmp_path]))
    labels = res.fig.axes[0].get_legend_handles_labels()[1]
    plt.close(res.fig)
    assert sorted(labels) == ["BN", "Standard (diverged: 2 of 3 at lr 1)"]


def test_a_bar_panel_names_its_two_arms_difference_higher_first_in_points(tmp_path: Path) -> None:
    acc = {"bn": [0.52, 0.50, 0.55], "none": [0.61, 0.60, 0.66]}
    for job, (norm, seed) in enumerate((n, s) for n in acc for s in range(3)):
        write_run(tmp_path, job, {"norm": {"name": norm}, "seed": seed}, [{"step": 5, "val/acc": acc[norm][seed]}], {})
    spec = parse_figures(SPEC, "rules of toy").draw[0]
    res = render(spec, load_local_runs([tmp_path]))
    title = res.fig.axes[1].get_title().replace("\n", " ")
    plt.close(res.fig)
    points = number(100 * (np.median(acc["none"]) - np.median(acc["bn"])), signed=True)
    assert title == f"medians, rest − BN: {points} pts", title  # a true minus, the higher arm first
    assert points.startswith("+9")


def test_a_scaled_panel_draws_in_percent_and_its_rows_keep_the_stored_fractions(tmp_path: Path) -> None:
    """``scale: 100``: the curve (and a line it draws from another panel's rows) and the bar's points are
    drawn in %; the rows (the CSV) and the bar title's difference in points are as unscaled."""
    acc = {"bn": [0.52, 0.50, 0.55], "none": [0.61, 0.60, 0.66]}
    for job, (norm, seed) in enumerate((n, s) for n in acc for s in range(3)):
        write_run(tmp_path, job, {"norm": {"name": norm}, "seed": seed}, [{"step": 5, "val/acc": acc[norm][seed]}], {})
    scaled = copy.deepcopy(SPEC)
    for panel in scaled["draw"][0]["panels"]:
        panel["scale"] = 100
    runs = load_local_runs([tmp_path])
    plain, pct = (render(parse_figures(s, "rules of toy").draw[0], runs) for s in (SPEC, scaled))
    assert pct.rows == plain.rows  # the CSV: stored values
    bn_curve = [line for line in pct.fig.axes[0].get_lines() if line.get_label() == "BN"][0]
    assert float(bn_curve.get_ydata()[0]) == pytest.approx(100 * np.median(acc["bn"]))
    bar_text = {t.get_text() for t in pct.fig.axes[1].texts}
    assert number(100 * np.median(acc["none"])) in bar_text, bar_text  # the point's label in %
    assert pct.fig.axes[1].get_title() == plain.fig.axes[1].get_title()  # "+9.x pts" either way
    plt.close(pct.fig)
    plt.close(plain.fig)


def test_layer_indices_get_whole_ticks_and_a_narrow_log_axis_plain_numbers(tmp_path: Path) -> None:
    arms = [{"label": "all", "rest": True}]
    panel = {"panel": "g", "kind": "curve", "x": "step", "y": {"key": "grad"}, "yscale": "log", "xlabel": "layer",
             "ylabel": "norm"}  # fmt: skip
    spec = parse_figures({"fetch": ".", "draw": [{"name": "l", "title": "l", "arms": arms, "panels": [panel]}]},
                         "t").draw[0]  # fmt: skip
    for seed in range(2):
        rows = [{"step": layer, "grad": 0.25 * (layer + 1) + 0.01 * seed} for layer in range(4)]
        write_run(tmp_path, seed, {"norm": {"name": "bn"}, "seed": seed}, rows, {})
    res = render(spec, load_local_runs([tmp_path]))
    ax = res.fig.axes[0]
    res.fig.canvas.draw()
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    ylabels = [t.get_text() for t in ax.get_yticklabels(which="both") if t.get_text()]
    plt.close(res.fig)
    assert ticks and all(t == round(t) for t in ticks), ticks  # no tick at layer 0.5
    assert ylabels and all(float(t) > 0 for t in ylabels), ylabels  # 0.5, 1: no 10^x text


def test_the_title_gives_the_range_of_steps_when_arms_ran_for_different_lengths(tmp_path: Path) -> None:
    from normbench.analysis.wording.figure_names import scope

    for job, (bs, steps, status) in enumerate([(32, 1250, "finished"), (2, 20000, "finished"), (2, 40, "diverged")]):
        summary = {"status": status, "step": steps} if status == "diverged" else {"step": steps}
        write_run(tmp_path, job, {"norm": {"name": "bn"}, "batch_size": bs, "seed": job},
                  [{"step": steps, "val/acc": 0.5}], summary)  # fmt: skip
    assert scope(load_local_runs([tmp_path])).endswith(", 1250-20000 steps")  # the diverged run's 40: not a length


def test_a_title_over_two_models_gives_each_its_own_width() -> None:
    """powernorm_stats' CV and NLP arms: the ResNet's depth and the Transformer's layers and width
    each with its own model (it read "ResNet20, width 128": the ResNet's name, the Transformer's width)."""
    from normbench.analysis.figures.figure_record import TableRun
    from normbench.analysis.wording.figure_names import scope

    resnet = {"model.name": "resnet20", "model.depth": "20", "dataset.name": "cifar10", "final:step": "234"}
    transformer = {"model.name": "transformer_tiny", "model.encoder_layers": "2", "model.decoder_layers": "2",
                   "model.d_model": "128", "dataset.name": "iwslt14", "final:step": "285"}  # fmt: skip
    runs = [TableRun(resnet), TableRun(transformer)]
    assert scope(runs) == "ResNet20 / Transformer 2+2 layers (width 128), CIFAR-10 / IWSLT14 de-en, 234-285 steps"
    assert scope(runs[1:]) == "Transformer 2+2 layers, width 128, IWSLT14 de-en, 285 steps"
