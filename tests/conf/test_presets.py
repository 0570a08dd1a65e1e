"""The paper presets in conf/experiment/: every value of every swept parameter composes, each
preset sweeps at least two seeds and groups its W&B runs under its own name, and the first job
of each CPU-scale preset trains for one step (on the synthetic stand-in of its data set, so that
it takes seconds) with the preset's diagnostics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf, open_dict

from tests.conf.test_compose import CONF, compose_cfg

PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml") if p.stem != "quickstart")
CPU_PRESETS = [p for p in PRESETS if p.endswith("_cpu")]


def sweep_params(preset: str) -> dict[str, list[str]]:
    """The preset's ``hydra.sweeper.params``: each key with its comma-separated values."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"experiment={preset}"], return_hydra_config=True)
    params = cfg.hydra.sweeper.params or {}
    return {str(k): [v.strip() for v in str(val).split(",")] for k, val in params.items()}


def first_job(preset: str) -> list[str]:
    return [f"experiment={preset}", *(f"{k}={v[0]}" for k, v in sweep_params(preset).items())]


@pytest.mark.parametrize("preset", PRESETS)
def test_preset_sweeps_seeds_and_names_its_group(preset: str) -> None:
    params = sweep_params(preset)
    assert len(params.get("seed", [])) >= 2, f"{preset} sweeps fewer than two seeds"
    assert compose_cfg([f"experiment={preset}"]).logger.group == preset
    assert not preset.endswith("_cpu") or preset.removesuffix("_cpu") in PRESETS


@pytest.mark.parametrize("preset", PRESETS)
def test_every_swept_value_composes(preset: str) -> None:
    base = first_job(preset)
    for key, values in sweep_params(preset).items():
        for value in values:
            cfg = compose_cfg([*base, f"{key}={value}"])
            assert isinstance(cfg, DictConfig)


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


@pytest.mark.parametrize("preset", CPU_PRESETS)
def test_cpu_preset_first_job_runs_one_step(preset: str, tmp_path: Path) -> None:
    from normbench.train import run

    cfg = compose_cfg(first_job(preset))
    wanted = [name for name, sub in (cfg.diagnostics or {}).items() if sub and sub.get("every_n_steps")]
    _tiny_data(cfg)
    result = run(cfg, tmp_path)
    assert result["status"] == "finished"
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    logged = {k for row in rows for k in row}
    for name in wanted:
        if name != "bn_stats" or cfg.norm.name == "bn":
            assert any(k.startswith(f"diag/{name}/") for k in logged), f"{preset}: no diag/{name}/* logged"
    assert OmegaConf.select(cfg, "logger.group") == preset
