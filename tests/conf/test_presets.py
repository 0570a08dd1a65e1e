"""The paper presets in conf/experiment/: every value of every swept parameter exists (and, in
the slow set, composes), each preset sweeps at least two seeds and leaves the W&B group to the
sweep (one group per sweep invocation; the preset is the job type), and (slow) the first job of
each CPU-scale preset trains for one step on the synthetic stand-in of its data set with the
preset's diagnostics."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf, open_dict

from normbench.analysis.figures import FIGURES
from tests.conf.test_compose import CONF, compose_cfg

PRESETS = sorted(f"{name}{scale}" for name in FIGURES for scale in ("", "_cpu"))
CPU_PRESETS = [p for p in PRESETS if p.endswith("_cpu")]


def compose_with_sweep(preset: str) -> tuple[DictConfig, dict[str, list[str]]]:
    """The preset's composed config and its ``hydra.sweeper.params`` (key -> values)."""
    cfg = compose_cfg([f"experiment={preset}"], hydra=True)
    params = cfg.hydra.sweeper.params or {}
    return cfg, {str(k): [v.strip() for v in str(val).split(",")] for k, val in params.items()}


def sweep_params(preset: str) -> dict[str, list[str]]:
    return compose_with_sweep(preset)[1]


def first_job(preset: str) -> list[str]:
    return [f"experiment={preset}", *(f"{k}={v[0]}" for k, v in sweep_params(preset).items())]


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_sweep(preset: str) -> None:
    """At least two seeds; no fixed W&B group (each sweep its own); a swept config group names
    existing files; a swept key exists in the config (a norm-valued key takes registered norms)."""
    from normbench.norms import list_norms

    cfg, params = compose_with_sweep(preset)
    assert (CONF / "experiment" / f"{preset}.yaml").is_file()
    assert len(params.get("seed", [])) >= 2, f"{preset} sweeps fewer than two seeds"
    assert cfg.logger.group is None and cfg.logger.job_type is None  # group: the sweep; job type: the preset
    for key, values in params.items():
        group = key.split("@")[0]
        if (CONF / group).is_dir():
            missing = [v for v in values if not (CONF / group / f"{v}.yaml").is_file()]
            assert not missing, f"{preset}: {group}/{missing[0]}.yaml does not exist"
            continue
        assert OmegaConf.select(cfg, key, default="<absent>") != "<absent>", f"{preset}: no key {key}"
        if key.endswith("_norm"):
            assert set(values) <= set(list_norms()), f"{preset}: {key} sweeps unknown norms {values}"


@pytest.mark.slow
@pytest.mark.parametrize("preset", PRESETS)
def test_every_swept_value_composes(preset: str) -> None:
    base = first_job(preset)
    for key, values in sweep_params(preset).items():
        for value in values:
            assert isinstance(compose_cfg([*base, f"{key}={value}"]), DictConfig)


def _tiny_data(cfg: DictConfig) -> None:
    """Swap the preset's data set for a tiny synthetic one of the same kind."""
    if cfg.dataset.name == "cifar10":
        sub = ["dataset=synthetic_images", "dataset.num_train=64", "dataset.num_test=32"]
    else:
        sub = [
            "dataset=synthetic_translation",
            "dataset.num_train=128",
            "dataset.num_valid=8",
            "dataset.num_test=8",
            "dataset.max_tokens=256",
        ]
    dataset = compose_cfg(sub).dataset
    with open_dict(cfg):
        cfg.dataset = dataset
        cfg.max_steps = 1
        cfg.batch_size = min(int(cfg.batch_size), 16)
        cfg.eval_batch_size = 32
        cfg.logger.wandb = False
        cfg.logger.progress_bar = False


@pytest.mark.slow  # seconds each on an idle CPU, but up to minutes on a shared one (BPE, beam search)
@pytest.mark.parametrize("preset", CPU_PRESETS)
def test_cpu_preset_first_job_runs_one_step(preset: str, tmp_path: Path) -> None:
    from normbench.run.loop.train import run

    cfg = compose_cfg(first_job(preset))
    wanted = [name for name, sub in (cfg.diagnostics or {}).items() if sub and sub.get("every_n_steps")]
    _tiny_data(cfg)
    result = run(cfg, tmp_path)
    assert result["status"] == "finished"
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    logged = {k for row in rows for k in row}
    for name in wanted:
        if name != "bn_stats" or cfg.norm.name == "bn":
            assert any(k.startswith(f"{name}/") for k in logged), f"{preset}: no {name}/* logged"
    assert OmegaConf.select(cfg, "logger.group") is None


@pytest.mark.parametrize("preset", PRESETS)
def test_adam_weight_decay_is_decoupled(preset: str) -> None:
    """A preset that decays the weights under Adam does it as its recipe's source, fairseq, does:
    decoupled from the gradient (optimizer adamw), not as an L2 term in the gradient (adam)."""
    cfg, _ = compose_with_sweep(preset)
    if cfg.optimizer.name.startswith("adam") and cfg.weight_decay > 0:
        assert cfg.optimizer.name == "adamw", f"{preset}: Adam with decay {cfg.weight_decay} added to the gradient"


@pytest.mark.parametrize("preset", CPU_PRESETS)
def test_a_cpu_presets_header_counts_the_seeds_it_sweeps(preset: str) -> None:
    """Where the header (what `normbench --help` shows) says "N seeds", N is the sweep's count:
    the seed lists change with each confirmatory plan, and a hand-typed count went stale once."""
    text = (CONF / "experiment" / f"{preset}.yaml").read_text()
    header = "".join(line for line in text.splitlines() if line.startswith("#"))
    said = [int(n) for n in re.findall(r"(\d+) seeds\b", header)]
    swept = compose_cfg([f"experiment={preset}"], hydra=True).hydra.sweeper.params.get("seed")
    if said:
        assert swept is not None and set(said) == {len(str(swept).split(","))}, (said, swept)
