"""W&B as a researcher reads it: sections, per-layer tables, define_metric, names, tags, groups and
checkpoint artifacts. The end-to-end tests read back the offline ``.wandb`` file a real run wrote,
with the wandb package's own reader (``wandb leet inspect --json``: one JSON record per line), and
compare it with the run's ``metrics.jsonl``."""

from __future__ import annotations

import base64
import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from normbench.base.hydra_job import HydraJob, swept_keys
from normbench.sinks.files import Histogram
from normbench.sinks.logger_config import LoggerConfig
from normbench.sinks.wandb_layout import is_epoch_row, layout, metric_definition
from normbench.sinks.wandb_run import SUMMARY_VALUE_MAX_BYTES, WandbSink, run_identity, small_summary, sweep_run_name
from tests.conftest import TINY_RUN, run_cli
from tests.faults import fault

SECTIONS = {"train", "val", "test", "perf", "lr", "epoch", "global_step", "ics", "landscape", "predictiveness"}
SECTIONS |= {"beta_smoothness", "bn_stats", "activations", "activations_hist"}
FAST = ("model.depth=8", "dataset.num_train=128", "dataset.num_test=64", "hardware.num_threads=1")  # 4 steps
DIAGNOSTICS = (  # the cheap diagnostics, at steps 0 and 2
    *(
        f"{plus}diagnostics.{name}.{key}"
        for name in ("landscape", "predictiveness", "beta_smoothness")
        for plus, key in (("", "start_step=0"), ("", "every_n_steps=2"), ("+", "num_points=2"))
    ),
    "diagnostics.activations.start_step=0",
    "diagnostics.activations.every_n_steps=2",
    "+diagnostics.ics.every_n_steps=2",
)


def wandb_records(run_dir: Path) -> tuple[list[dict[str, Any]], Path]:
    """The records of the run's one offline ``.wandb`` file, and its ``files/`` folder."""
    (path,) = run_dir.glob("wandb/offline-run-*/run-*.wandb")
    out = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()], path.parent / "files"


def of_type(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r[kind] for r in records if r["type"] == kind]


# ---- the pure layout ---------------------------------------------------------------------------


def test_layout_makes_one_table_per_diagnostic_and_headline_summaries() -> None:
    hist = Histogram([1, 2], [0.0, 1.0, 2.0])
    metrics = {
        "diag/ics/conv1/cos": 0.5,
        "diag/ics/conv1/grad_diff": 2.0,
        "ics/fc/cos": 0.25,  # the prefix-free form the diagnostics will write
        "ics/fc/grad_diff": 4.0,
        "diag/landscape/loss_range": 1.5,
        "diag/bn_stats/first_layer/mean_dist": 9.0,  # reported by the diagnostic itself: kept
        "diag/bn_stats/norm1/mean_dist": 9.0,
        "diag/bn_stats/norm2/mean_dist": 3.0,
        "diag/bn_stats/norm2/var_dist": 1.0,
        "diag/activations/stages.0.norm1/pre_hist": hist,
        "train/loss": 1.0,
        "perf/a/b": 3.0,
        "lr": 0.1,
        "epoch": 1,
    }
    got = layout(metrics)
    assert {k: (t.columns, t.rows) for k, t in got.tables.items()} == {
        "ics/layers": (["index", "layer", "cos", "grad_diff"], [[0, "conv1", 0.5, 2.0], [1, "fc", 0.25, 4.0]]),
        "bn_stats/layers": (
            ["index", "layer", "mean_dist", "var_dist"],
            [[0, "norm1", 9.0, None], [1, "norm2", 3.0, 1.0]],
        ),
    }
    assert got.scalars == {
        "ics/first_layer/cos": 0.5,
        "ics/layer_mean/cos": 0.375,
        "ics/first_layer/grad_diff": 2.0,
        "ics/layer_mean/grad_diff": 3.0,
        "landscape/loss_range": 1.5,
        "bn_stats/first_layer/mean_dist": 9.0,
        "bn_stats/layer_mean/mean_dist": 6.0,
        "bn_stats/first_layer/var_dist": 1.0,  # the first layer that reports it
        "bn_stats/layer_mean/var_dist": 1.0,
        "activations_hist/stages.0.norm1/pre": hist,
        "train/loss": 1.0,
        "perf/a/b": 3.0,
        "lr": 0.1,
        "epoch": 1,
    }


def test_layout_mean_over_layers_is_nan_when_a_layer_is() -> None:
    got = layout({"diag/grad_variance/a/relative": 1.0, "diag/grad_variance/b/relative": float("nan")})
    assert math.isnan(got.scalars["grad_variance/layer_mean/relative"])
    assert got.scalars["grad_variance/first_layer/relative"] == 1.0


def test_metric_definitions_axes_and_summaries() -> None:
    assert metric_definition("val/acc", True) == {"step_metric": "epoch", "summary": "max,last"}
    assert metric_definition("val/loss", True) == {"step_metric": "epoch", "summary": "min,last"}
    assert metric_definition("train/loss", True) == {"step_metric": "epoch"}  # last: W&B's default
    assert metric_definition("train/batch_loss", False) == {"step_metric": "global_step"}
    assert metric_definition("beta_smoothness/beta", False) == {"step_metric": "global_step", "summary": "max"}
    assert metric_definition("landscape/loss_range", False)["summary"] == "max"
    assert metric_definition("hessian/lambda_max", False)["summary"] == "max"
    assert metric_definition("ics/layer_mean/cos", False)["summary"] == "min"
    assert metric_definition("bn_stats/layer_mean/mean_dist", True) == {"step_metric": "epoch", "summary": "max"}
    assert metric_definition("bn_stats/layers", True) == {"step_metric": "epoch"}  # a table: no max
    assert "summary" not in metric_definition("activations_hist/norm1/pre", False)
    assert not is_epoch_row({"train/batch_loss": 1.0, "lr": 0.1})
    assert not is_epoch_row({"diag/ics/conv1/cos": 1.0})
    assert is_epoch_row({"val/acc": 0.5}) and is_epoch_row({"epoch": 1})


# ---- names, groups, tags -------------------------------------------------------------------------


def test_swept_keys_from_the_presets_params_and_the_command_line() -> None:
    params = {"norm": "bn,gn", "experiment/arms/gn_batch_size@_global_": "bs32_cpu,bs8_cpu", "seed": "0,1"}
    assert swept_keys(["experiment=gn_batch_size_cpu"], params) == list(params)
    # the command line fixes seed (no longer swept) and sweeps lr by range
    assert swept_keys(["seed=3", "lr=range(1,3)", "epochs=1"], params) == [
        "norm",
        "experiment/arms/gn_batch_size@_global_",
        "lr",
    ]
    job = ["experiment=gn_batch_size_cpu", "norm=gn", "experiment/arms/gn_batch_size@_global_=bs8_cpu", "seed=1"]
    assert sweep_run_name(job, swept_keys([], params)) == "norm=gn,gn_batch_size=bs8_cpu,seed=1"
    assert sweep_run_name(["epochs=1"], ["norm"]) is None


def test_run_identity_defaults_and_the_users_settings_win() -> None:
    config: dict[str, Any] = {
        k: {"name": v} for k, v in {"norm": "gn", "model": "resnet20", "dataset": "cifar10"}.items()
    }
    config["hardware"] = {"name": "auto", "resolved": {"device": "cuda:0"}}  # the tag names what auto picked
    job = HydraJob(
        choices={"experiment": "quickstart", "norm": "gn", "model": "resnet20"},
        overrides=["experiment=quickstart", "norm=gn", "seed=1"],
        multirun=True,
        sweep_dir="/out/multirun/2026-01-02_03-04-05",
        job_num=3,
        swept=["norm", "seed"],
    )
    schema = LoggerConfig()
    ident = run_identity(schema, config, None, job)
    assert (ident.name, ident.group, ident.job_type) == ("norm=gn,seed=1", "sweep-2026-01-02_03-04-05", "quickstart")
    assert ident.tags == ["experiment:quickstart", "norm:gn", "model:resnet20", "dataset:cifar10", "hardware:cuda"]
    assert ident.hydra is not None and ident.hydra["sweep_dir"] == job.sweep_dir and ident.hydra["job_num"] == 3
    single = run_identity(schema, config, None, HydraJob(choices=job.choices, overrides=["norm=gn"]))
    assert (single.name, single.group, single.job_type) == ("quickstart-gn-resnet20", None, "quickstart")
    bare = run_identity(schema, config, None, None)  # outside Hydra
    assert (bare.name, bare.job_type, bare.hydra) == ("gn-resnet20", "train", None)
    user = LoggerConfig(run_name="mine", group="g", job_type="ablation", tags=["t"])
    ident = run_identity(user, config, "sweep-x", job)
    assert (ident.name, ident.group, ident.job_type, ident.tags) == ("mine", "g", "ablation", ["t"])


# ---- end to end: the offline .wandb file of real runs --------------------------------------------


@pytest.mark.e2e
def test_tiny_run_lays_out_sections_tables_and_metric_definitions(tmp_path) -> None:
    out = tmp_path / "run"
    r = run_cli(*TINY_RUN, *FAST, *DIAGNOSTICS, f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    records, files = wandb_records(out)
    (run,) = of_type(records, "run")
    assert run["display_name"] == "quickstart-bn-resnet20" and run["job_type"] == "quickstart"
    assert run["tags"] == [
        "experiment:quickstart",
        "norm:bn",
        "model:resnet20",
        "dataset:synthetic_images",
        "hardware:cpu",
    ]
    hydra = run["config"]["update"]["hydra"]
    assert hydra["choices"]["experiment"] == "quickstart" and "model.depth=8" in hydra["overrides"]
    assert not any(k.startswith("schema") for k in hydra["choices"])

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    local_keys = set().union(*rows) - {"step"}
    assert {"ics/conv1/cos", "bn_stats/norm1/mean_dist"} <= local_keys  # metrics.jsonl keeps all
    items = [h["item"] for h in of_type(records, "history")]
    media = {k.removesuffix("._type"): v for item in items for k, v in item.items() if k.endswith("._type")}
    logged = {next((m for m in media if k.startswith(m + ".")), k) for item in items for k in item}
    logged -= {"_step", "_runtime", "_timestamp"}
    assert {k for k, v in media.items() if v == "table-file"} == {"ics/layers", "activations/layers", "bn_stats/layers"}
    assert {k for k, v in media.items() if v == "histogram"} == {k for k in logged if k.startswith("activations_hist/")}
    assert {k.split("/")[0] for k in logged} <= SECTIONS
    assert {"landscape/loss_range", "beta_smoothness/beta", "ics/first_layer/cos", "val/acc"} <= logged
    assert not any(k.startswith("diag/") for k in logged)
    deep = {k for k in logged if k.count("/") >= 2 and not k.startswith("activations_hist/")}
    assert deep and all(k.split("/")[1] in ("first_layer", "layer_mean") for k in deep)  # no per-layer scalars

    metrics = {m["name"]: m for m in of_type(records, "metric")}
    assert logged <= set(metrics)  # a define_metric for every key
    assert metrics["val/acc"]["step_metric"] == "epoch" and metrics["val/acc"]["summary"] == {"max": True, "last": True}
    assert metrics["train/loss"]["step_metric"] == "epoch" and "summary" not in metrics["train/loss"]
    assert metrics["train/batch_loss"]["step_metric"] == "global_step"
    assert metrics["beta_smoothness/beta"]["summary"] == {"max": True}
    assert metrics["bn_stats/layer_mean/mean_dist"]["step_metric"] == "epoch"  # logged at epoch ends
    assert metrics["ics/layer_mean/cos"]["step_metric"] == "global_step"
    assert metrics["global_step"]["options"]["hidden"] and metrics["epoch"]["options"]["hidden"]

    # the last ICS table holds what metrics.jsonl holds for that step; the headline scalars agree
    local = [row for row in rows if "ics/conv1/cos" in row][-1]
    (item,) = [item for item in items if item.get("_step") == local["step"] and "ics/layers._type" in item]
    table = json.loads((files / item["ics/layers.path"]).read_text())
    expect = {k.split("/")[1]: {} for k in local if k.startswith("ics/")}
    for k, v in local.items():
        if k.startswith("ics/"):
            expect[k.split("/")[1]][k.split("/")[2]] = v
    assert [row[1] for row in table["data"]] == list(expect)
    for row in table["data"]:
        assert dict(zip(table["columns"][2:], row[2:], strict=True)) == pytest.approx(expect[row[1]])
    cos = [expect[layer]["cos"] for layer in expect]
    assert item["ics/first_layer/cos"] == pytest.approx(cos[0])
    assert item["ics/layer_mean/cos"] == pytest.approx(sum(cos) / len(cos))
    summaries = of_type(records, "summary")
    final = {k: v for s in summaries for k, v in s["update"].items()}
    val_acc = [row["val/acc"] for row in rows if "val/acc" in row]
    assert final["val/acc"] == pytest.approx({"max": max(val_acc), "last": val_acc[-1]})
    assert final["status"] == "finished"


@pytest.mark.e2e
def test_multirun_names_runs_by_the_swept_override_in_one_group(tmp_path) -> None:
    sweep = tmp_path / "2026-01-02_03-04-05"
    r = run_cli("-m", *TINY_RUN, *FAST, "norm=bn,gn", f"hydra.sweep.dir={sweep}")
    assert r.returncode == 0, r.stderr[-3000:]
    runs = [of_type(wandb_records(sweep / str(i))[0], "run")[0] for i in range(2)]
    assert [run["display_name"] for run in runs] == ["norm=bn", "norm=gn"]
    assert {run["run_group"] for run in runs} == {"sweep-2026-01-02_03-04-05"}
    assert {run["job_type"] for run in runs} == {"quickstart"}
    assert [run["tags"][1] for run in runs] == ["norm:bn", "norm:gn"]
    configs = [run["config"]["update"]["hydra"] for run in runs]
    assert [c["job_num"] for c in configs] == [0, 1] and {c["sweep_dir"] for c in configs} == {str(sweep)}
    assert all(c["swept"] == ["norm"] for c in configs)


# ---- checkpoints as artifacts --------------------------------------------------------------------


@pytest.mark.e2e
@pytest.mark.parametrize("on", [True, False])
def test_checkpoint_is_a_model_artifact_only_when_asked(tmp_path, on: bool) -> None:
    ckpt = tmp_path / "step-00000005.pt"
    ckpt.write_bytes(b"not really a checkpoint")
    sink = WandbSink(LoggerConfig(project="normbench", log_checkpoints=on), tmp_path, {"seed": 0}, None)
    sink.log(5, 0, {"train/batch_loss": 1.0})
    sink.log_checkpoint(ckpt, 5)
    sink.finish({"status": "finished"})
    records, _ = wandb_records(tmp_path)
    models = [a for a in of_type(records, "artifact") if a["type"] == "model"]
    if not on:
        assert models == []
        return
    (art,) = models
    assert art["name"] == f"model-{sink.run_id}" and sorted(art["aliases"]) == ["latest", "step-5"]
    assert json.loads(art["metadata"]) == {"step": 5}
    (entry,) = art["manifest"]["contents"]
    assert entry["path"] == ckpt.name and int(entry["size"]) == ckpt.stat().st_size
    assert entry["digest"] == base64.b64encode(hashlib.md5(ckpt.read_bytes()).digest()).decode()


def test_the_wandb_summary_takes_no_large_value() -> None:
    """A value over a few KB (a long file list) stays in summary.json; W&B gets its size."""
    big = {"dirty_files": [f"venv/lib/m{i}.py" for i in range(2000)]}
    out = small_summary({"val/acc": np.float32(0.5), "git": big, "status": "finished", "loss": float("nan")})
    assert out["val/acc"] == 0.5 and out["status"] == "finished" and out["loss"] == "nan"
    size = len(json.dumps(big))
    assert size > SUMMARY_VALUE_MAX_BYTES and out["git"] == f"({size} bytes: see summary.json)"


@fault("logger.project, logger.entity or $WANDB_PROJECT holding a character W&B refuses (issue 59)",
       "one line naming the key and the character, exit 2, before the run; no folder",
       "one-line")  # fmt: skip
@pytest.mark.parametrize(
    ("override", "env", "needle"),
    [("logger.project=a/b/c", {}, "logger.project='a/b/c' is not a W&B name: it holds '/'"),
     ("logger.entity=x:y", {}, "logger.entity='x:y' is not a W&B name: it holds ':'"),
     ("seed=0", {"WANDB_PROJECT": "x/y"}, "$WANDB_PROJECT='x/y' is not a W&B name: it holds '/'")],
    ids=["project", "entity", "env"],
)  # fmt: skip
def test_a_name_wandb_refuses_is_one_line_before_the_run(tmp_path, monkeypatch, capsys, override, env, needle) -> None:
    """Issue 59: a 30-41-line UsageError traceback and a run folder without summary.json before."""
    from tests.conftest import TINY_RUN, run_cli_inprocess

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "run"
    code, _, stderr = run_cli_inprocess(monkeypatch, capsys, *TINY_RUN, override, f"hydra.run.dir={out}")
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and needle in lines[0], stderr
    assert not out.exists()
