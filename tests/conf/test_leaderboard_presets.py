"""The leaderboard presets: they compose with every arm, sweep every registered norm (full scale)
or registered ones (CPU) over at least three seeds, read their data from ``$NORMBENCH_DATA``
whatever the working directory, and the Transformer command in the preset's comment runs exactly
the norms that keep a decoder causal (the others are n/a by the leaderboard's rule)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from normbench.analysis.leaderboard import refusal
from tests.conf.test_compose import CONF, compose_cfg
from tests.conf.test_presets import compose_with_sweep

ARM = "experiment/arms/leaderboard@_global_"
ARMS = {
    "leaderboard": {"resnet20": "cifar10", "vgg16": "cifar10", "transformer": "iwslt14.tokenized.de-en"},
    "leaderboard_cpu": {"resnet20_cpu": "cifar10-subset", "transformer_cpu": "de-en-subset"},
}


@pytest.mark.parametrize("preset", sorted(ARMS))
def test_sweep_covers_registered_norms_and_three_seeds(preset: str) -> None:
    from normbench.norms import list_norms

    cfg, params = compose_with_sweep(preset)
    assert cfg.logger.group is None  # the W&B group is the sweep invocation; the job type the preset
    assert len(params["seed"]) >= 3
    assert set(params[ARM]) <= set(ARMS[preset])
    assert all((CONF / "experiment" / "arms" / "leaderboard" / f"{a}.yaml").is_file() for a in ARMS[preset])
    if preset == "leaderboard":
        assert sorted(params["norm"]) == sorted(list_norms())  # every registered norm
    else:
        assert set(params["norm"]) <= set(list_norms()) and "bn" in params["norm"]  # bn: the images' reference


@pytest.mark.parametrize(("preset", "arm"), [(p, a) for p, arms in ARMS.items() for a in arms])
def test_arm_composes_and_reads_data_from_the_env(
    preset: str, arm: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NORMBENCH_DATA", "/data/somewhere")
    roots = []
    for cwd in (CONF.parent, tmp_path):
        monkeypatch.chdir(cwd)
        cfg = compose_cfg([f"experiment={preset}", f"{ARM}={arm}", "norm=ln"])
        roots.append(OmegaConf.select(cfg, "dataset.root"))
    assert roots == [f"/data/somewhere/{ARMS[preset][arm]}"] * 2
    assert cfg.diagnostics.landscape.every_n_steps > 0 and cfg.diagnostics.grad_variance.every_n_steps > 0
    if preset.endswith("_cpu"):
        assert cfg.hardware.num_threads == 1 and cfg.model.name in ("resnet20", "transformer_tiny")


@pytest.mark.parametrize("preset", sorted(ARMS))
def test_transformer_command_runs_exactly_the_causal_norms(preset: str) -> None:
    """The comment's Transformer sweep lists every registered norm the decoder rule accepts."""
    from normbench.norms import list_norms

    text = (CONF / "experiment" / f"{preset}.yaml").read_text()
    (norms,) = re.findall(r"norm=([\w,]+) hydra\.sweep\.dir=\S+/translation", text)
    arm = next(a for a in ARMS[preset] if a.startswith("transformer"))
    cfg = OmegaConf.to_container(compose_cfg([f"experiment={preset}", f"{ARM}={arm}"]), resolve=False)
    causal = [n for n in list_norms() if refusal({**cfg, "norm": {"name": n}}) is None]
    if preset == "leaderboard":
        assert sorted(norms.split(",")) == sorted(causal)
    else:
        assert set(norms.split(",")) <= set(causal)


def test_cpu_probes_fall_in_the_last_tenth_of_training() -> None:
    """ResNet20 on the 10,000-image subset: 78 steps an epoch; the last probe and variance call
    are in the last 10 % of the steps, where the leaderboard reads its end-of-training values."""
    cfg = compose_cfg(["experiment=leaderboard_cpu"])
    total = cfg.epochs * (10_000 // cfg.batch_size)
    for name in ("landscape", "beta_smoothness", "grad_variance"):
        d = cfg.diagnostics[name]
        last = d.start_step + (total - 1 - d.start_step) // d.every_n_steps * d.every_n_steps
        assert 0.9 * total <= last < total, (name, last, total)
