"""``normbench-dashboard``, offline: each paper preset's dashboard follows its rules and its sweep;
every key a panel draws is one W&B holds for the runs (their ``metrics.jsonl`` rows laid out by
`normbench.sinks.wandb_layout`, as the sink logs them), every grouping key is in the presets' composed
configs; the report builds with wandb-workspaces without a network. The slow test checks the
panel keys against two real tiny runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from normbench.analysis.dashboards.dashboard import Dashboard, all_presets, build_dashboard
from normbench.analysis.dashboards.dashboard_cli import main
from normbench.analysis.loading.runs import load_local_runs
from normbench.diagnostics.token_scale import scale_by_length
from normbench.rules import base_preset, load_rules_data, variant
from normbench.sinks.wandb_layout import EPOCH, STEP, layout
from tests.conf.test_compose import compose_cfg
from tests.conftest import requires_extra, run_cli

PRESETS = [*all_presets(), *all_presets(cpu=True)]
TRANSLATION_SECTIONS = {
    "powernorm_mt",
    "powernorm_chain",
    "bn_padding",
    "ln_axes",
    "rmsnorm_speed",
    "rmsnorm_time",
    "prms_width",
    "leaderboard_translation",
}
BOTH = {"powernorm_fig2", "powernorm_fig3"}  # powernorm_stats / _grads: a ResNet20 arm and a Transformer arm
GRAD_KEYS = tuple(f"{s}_{g}{cv}" for s in ("mean", "var") for g in ("grad", "input_grad") for cv in ("", "_cv"))

# Rows as the runner writes them (key shapes taken from real runs: a ResNet20 run with every
# diagnostic on, a Transformer run with BN in the encoder; the slow test below re-checks them).
LAYERS = ("norm1", "stages.0.0.norm1", "stages.2.2.norm2")
IMAGE_ROWS: list[dict[str, Any]] = [
    {"step": 2, "epoch": 0, "train/batch_loss": 2.3, "train/batch_acc": 0.1, "lr": 0.05},
    {
        "step": 2,
        "epoch": 0,
        **{f"ics/{layer}/{m}": 0.5 for layer in ("conv1", "fc") for m in ("cos", "grad_diff", "rel_grad_diff")},
        **{f"activations/{layer}/{m}": 0.1 for layer in LAYERS for m in ("pre_q50", "post_q50", "post_std")},
        **{f"landscape/{m}": 1.0 for m in ("loss", "loss_min", "loss_max", "loss_range")},
        **{f"predictiveness/grad_diff_{m}": 1.0 for m in ("min", "mean", "max")},
        "beta_smoothness/beta": 3.0,
        **{f"grad_variance/{m}": 1.0 for m in ("total", "relative", "grad_sq_norm")},
    },
    {
        "step": 4,
        "epoch": 1,
        "train/loss": 2.3,
        "train/acc": 0.1,
        "val/loss": 2.3,
        "val/acc": 0.1,
        "val/acc_population": 0.1,  # norm.eval_stats=both
        "train_eval/acc": 0.1,  # dataset.eval_train=true
        **{f"saturation/{layer}/{m}": 0.1 for layer in LAYERS for m in ("saturated", "grad_norm")},
        **{f"eval_stats/{layer}/{m}": 0.1 for layer in ("first_layer", *LAYERS) for m in ("mean_dist", "var_dist")},
        "perf/samples_per_s": 90.0,
        "perf/diag_seconds": 1.0,
        **{
            f"bn_stats/{layer}/{m}": 0.1
            for layer in ("first_layer", *LAYERS)
            for m in ("mean_dist", "var_dist", *GRAD_KEYS)  # grad_norms=true
        },
    },
]
TOKEN_SCALE_KEYS = sorted(scale_by_length(torch.ones(2, 3, 4), None))
"""What `token_scale` logs per layer of a batch of sentences (scale-free and ``_abs``), from the
diagnostic itself, so the rows follow it."""
TRANSLATION_ROWS: list[dict[str, Any]] = [
    {"step": 2, "epoch": 0, "train/batch_loss": 9.0, "train/batch_nll_loss": 9.0, "lr": 1e-4},
    {
        "step": 4,
        "epoch": 1,
        "train/loss": 9.0,
        "val/loss": 9.0,
        "val/bleu": 0.1,
        "perf/tokens_per_s": 900.0,
        **{
            f"bn_stats/{layer}/{m}": 0.1
            for layer in ("first_layer", "encoder.layers.0.norm1")
            for m in ("mean_dist", "var_dist", *GRAD_KEYS)
        },
        **{
            f"token_scale/{layer}/{m}": 1.0
            for layer in ("first_layer", "encoder.layers.0.norm1")
            for m in TOKEN_SCALE_KEYS
        },
        "token_scale/padding_share": 0.2,
    },
    {"step": 4, "epoch": 1, "test/bleu": 0.1, "test/loss": 9.0},
]


def write_job(root: Path, rows: list[dict[str, Any]]) -> Path:
    """A job directory as the runner leaves it (config, metrics.jsonl, summary)."""
    root.mkdir(parents=True)
    (root / "config.yaml").write_text(yaml.safe_dump({"seed": 0}))
    clocked = [{**r, "perf/train_s": float(i)} for i, r in enumerate(rows)]  # the training clock: every row
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in clocked))
    (root / "summary.json").write_text(json.dumps({"status": "finished"}))
    return root


def wandb_keys(job_dirs: list[Path]) -> set[str]:
    """The keys W&B holds for these runs: every logged row laid out as `normbench.sinks.wandb_run` does."""
    return {k for run in load_local_runs(job_dirs) for row in run.history for k in layout(row).scalars}


def missing_panel_keys(dash: Dashboard, images: set[str], translation: set[str]) -> list[str]:
    missing = []
    for section in dash.sections:
        base = section.figure.removesuffix("_cpu")
        held = translation if base in TRANSLATION_SECTIONS else images | translation if base in BOTH else images
        missing += [f"{section.figure}: {k}" for p in section.panels for k in p.y if k not in held]
        assert all(p.x in (STEP, EPOCH) or p.x in held for p in section.panels)  # or a logged key: the clock
    return missing


@pytest.mark.parametrize("preset", PRESETS)
def test_every_panel_key_is_in_the_runs_wandb_layout(preset: str, tmp_path: Path) -> None:
    images = wandb_keys([write_job(tmp_path / "images", IMAGE_ROWS)])
    translation = wandb_keys([write_job(tmp_path / "translation", TRANSLATION_ROWS)])
    assert "ics/first_layer/cos" in images and "activations/layer_mean/post_q50" in images  # laid out, not raw
    assert not missing_panel_keys(build_dashboard(preset), images, translation)


@pytest.mark.parametrize("preset", PRESETS)
def test_sections_follow_the_rules(preset: str) -> None:
    dash = build_dashboard(preset)
    json.loads(json.dumps(dash.to_json()))  # plain data
    assert dash.job_type == preset and dash.sections
    if base_preset(preset) == "leaderboard":
        assert {s.figure for s in dash.sections} == {"leaderboard_images", "leaderboard_translation"}
        assert all(p.kind == "table" for p in (s.panels[0] for s in dash.sections))
        return
    rules = load_rules_data(preset)
    claims = [c for c in rules["claims"] if variant(preset) in c.get("variants", ("full", "cpu"))]
    by_figure = {s.figure: s for s in dash.sections}
    assert set(by_figure) == {c["figure"] for c in claims} | {c["figure"] for c in rules.get("checks", [])}
    for c in claims:
        section = by_figure[c["figure"]]
        assert c["id"] in {x["id"] for x in section.claims}
        for arm in (c["a"], c["b"]):  # each arm is a group of the section, and its runs pass the filter
            assert set(arm["select"]) <= set(section.group_by)
            assert all(v in section.select[k] for k, v in arm["select"].items() if k in section.select)
        assert "seed" not in section.group_by
    if base_preset(preset) == "gn_batch_size":  # the figure draws every batch size, the claims name two
        assert (
            "batch_size" in by_figure["gn_batch_size"].group_by
            and "batch_size" not in by_figure["gn_batch_size"].select
        )


@pytest.mark.parametrize("preset", all_presets())
def test_grouping_keys_are_in_the_presets_configs(preset: str) -> None:
    jobs = [[f"experiment={preset}"]]
    if preset == "leaderboard":
        arm = "experiment/arms/leaderboard@_global_=transformer"
        jobs.append([f"experiment={preset}", arm, "norm@model.decoder_norm=ln"])  # the encoder-only rows
    configs = [OmegaConf.to_container(compose_cfg(job), resolve=False) for job in jobs]
    for key in build_dashboard(preset).group_keys():
        found = [OmegaConf.select(OmegaConf.create(c), key, default="<absent>") for c in configs]
        assert any(v != "<absent>" for v in found), f"{preset}: {key} is in none of {jobs}"


@requires_extra("dashboard", "wandb_workspaces")
@pytest.mark.parametrize("preset", ["santurkar_vgg", "rmsnorm_speed_cpu", "leaderboard"])
def test_the_report_builds_offline(preset: str) -> None:
    from wandb_workspaces.expr import expr_to_filters

    from normbench.analysis.dashboards.dashboard_report import to_report

    dash = build_dashboard(preset)
    report = to_report(dash, "me", "normbench")
    grids = [b for b in report.blocks if type(b).__name__ == "PanelGrid"]
    if base_preset(preset) != "leaderboard":  # the first grid: the forest plot from the figures run
        forest, *grids = grids
        (media,) = forest.panels
        assert type(media).__name__ == "MediaBrowser" and media.media_keys == ["figures/forest"]
        leaves = {(f.key.section, f.key.name): f.value for f in expr_to_filters(forest.runsets[0].filters).filters}
        assert leaves == {("run", "jobType"): "figures", ("run", "displayName"): f"figures-{preset}"}
    assert len(grids) == len(dash.sections)
    for grid, section in zip(grids, dash.sections):
        (runset,) = grid.runsets
        tree = expr_to_filters(runset.filters)
        leaves = {(f.key.section, f.key.name): f.value for f in tree.filters}
        assert leaves[("run", "jobType")] == preset
        assert {name for (sec, name) in leaves if sec == "config"} == set(section.select)
        assert runset.groupby == [f"config.{k}" for k in section.group_by]
        lines = [p for p in section.panels if p.kind == "line"]
        assert [(g.x, list(g.y)) for g in grid.panels] == [(p.x, list(p.y)) for p in lines]


def test_the_command_writes_the_specification(tmp_path: Path, monkeypatch, capsys) -> None:
    out = tmp_path / "dash"
    assert main(["--entity", "me", "--project", "nb", "--preset", "santurkar_vgg", "--out", str(out)]) == 0
    spec = json.loads((out / "santurkar_vgg.json").read_text())
    assert spec["entity"] == "me" and spec["job_type"] == "santurkar_vgg"
    assert spec["wandb_forest_filter"] == "JobType = 'figures' and Name = 'figures-santurkar_vgg'"
    fig4 = next(s for s in spec["sections"] if s["figure"] == "santurkar_fig4")
    assert "Config('norm.name') in ['bn', 'none']" in fig4["wandb_filter"]
    assert "summary:landscape/loss_range" in fig4["wandb_columns"]
    assert "santurkar_vgg: 4 sections" in capsys.readouterr().out

    created = []
    monkeypatch.setattr(
        "normbench.analysis.dashboards.dashboard_cli.create", lambda d, e, p: created.append(d.preset) or "url"
    )
    assert main(["--entity", "me", "--project", "nb", "--preset", "all_cpu", "--out", str(out), "--create"]) == 0
    assert set(created) == set(all_presets(cpu=True)) and (out / "ln_axes_cpu.json").is_file()

    def refuse(d, e, p):
        raise RuntimeError("not logged in to W&B, try `wandb login --relogin`")

    monkeypatch.setattr("normbench.analysis.dashboards.dashboard_cli.create", refuse)
    assert main(["--entity", "me", "--project", "nb", "--preset", "ln_axes", "--out", str(out), "--create"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not logged in" in err[0]
    assert main(["--entity", "me", "--project", "nb", "--preset", "nope", "--out", str(out)]) == 2
    assert "valid:" in capsys.readouterr().err


@pytest.mark.e2e
@pytest.mark.slow
def test_panel_keys_against_real_runs(tmp_path: Path) -> None:
    """Two tiny real runs (W&B offline): ResNet20 with every diagnostic the dashboards draw, a
    Transformer with BN in the encoder; every panel's key is among their laid-out keys."""
    diag = [f"diagnostics.{d}.every_n_steps=2" for d in ("landscape", "predictiveness", "beta_smoothness", "ics")]
    diag += ["diagnostics.activations.every_n_steps=2", "diagnostics.grad_variance.every_n_steps=2"]
    diag += [
        "diagnostics.hessian.every_n_steps=0",
        "diagnostics.ics.num_layers=2",
        "diagnostics.landscape.num_points=2",
        "diagnostics.bn_stats.grad_norms=true",  # powernorm_grads' keys
    ]
    tiny = ["epochs=1", "logger.progress_bar=false", "logger.log_every_n_steps=1", "throughput_warmup_steps=0"]
    image = tmp_path / "image"
    r = run_cli("experiment=quickstart", "dataset.num_train=128", "dataset.num_test=64", "batch_size=32",
                "dataset.eval_train=true", "norm.eval_stats=both",  # bn_dropout's and bn_eval_stats' keys
                "diagnostics=full", *diag, *tiny, f"hydra.run.dir={image}")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    text = tmp_path / "text"
    data = ["dataset.num_train=64", "dataset.num_valid=16", "dataset.num_test=16"]
    r = run_cli("experiment=quickstart_mt", *data, "norm@model.encoder_norm=bn", "diagnostics.bn_stats.every_n_steps=1",
                "+diagnostics.bn_stats.grad_norms=true", "+diagnostics.token_scale.every_n_steps=1",
                *tiny, f"hydra.run.dir={text}")  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    images, translation = wandb_keys([image]), wandb_keys([text])
    for preset in PRESETS:
        assert not missing_panel_keys(build_dashboard(preset), images, translation), preset
