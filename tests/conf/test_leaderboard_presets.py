"""The leaderboard presets: they compose with every arm, sweep every registered norm (full scale)
or registered ones (CPU, 5 seeds) and read their data from ``$NORMBENCH_DATA`` whatever the working
directory; the Transformer commands in the preset's comment run the causal norms in both stacks and
the time-mixing ones (the probe `mixes_positions`) in the encoder only, with an LN decoder, and the
full preset so runs every registered norm on translation; the CPU arms' diagnostics fall in the last
tenth of training, and PowerNorm's and Batch Renorm's schedules are the fractions of the run that
the arms' comments give."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from normbench.analysis.leaderboard.leaderboard import refusal
from normbench.analysis.loading.runs import Run
from normbench.cli.store import norm_list
from normbench.norms import list_norms, norm_factory
from normbench.norms.probes import mixes_positions
from tests.conf.test_compose import CONF, compose_cfg
from tests.conf.test_presets import compose_with_sweep

ARM = "experiment/arms/leaderboard@_global_"
ARMS = {
    "leaderboard": {
        "resnet20": "cifar10",
        "vgg16": "cifar10",
        "transformer": "iwslt14.tokenized.de-en",
        "transformer_enc": "iwslt14.tokenized.de-en",
    },
    "leaderboard_cpu": {
        "resnet8_cpu": "cifar10-subset",
        "transformer_cpu": "de-en-subset",
        "transformer_enc_cpu": "de-en-subset",
    },
}
MIXING = sorted(n for n in list_norms() if mixes_positions(norm_factory(n), training=True))


@pytest.mark.parametrize("preset", sorted(ARMS))
def test_sweep_covers_registered_norms_and_enough_seeds(preset: str) -> None:
    cfg, params = compose_with_sweep(preset)
    assert cfg.logger.group is None  # the W&B group is the sweep invocation; the job type the preset
    assert len(params["seed"]) >= (3 if preset == "leaderboard" else 5)
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
        cfg = compose_cfg([f"experiment={preset}", f"{ARM}={arm}", "norm=pn"])
        roots.append(OmegaConf.select(cfg, "dataset.root"))
    assert roots == [f"/data/somewhere/{ARMS[preset][arm]}"] * 2
    diagnostics = [cfg.diagnostics[k] for k in ("landscape", "grad_variance")]
    assert all(d.every_n_steps > 0 or d.steps for d in diagnostics)
    if preset.endswith("_cpu"):
        assert cfg.hardware.num_threads == 1 and cfg.model.name in ("resnet20", "transformer_tiny")
    if arm.startswith("transformer_enc"):  # the swept norm in the encoder, LN in the decoder
        assert cfg.model.encoder_norm is None and cfg.model.decoder_norm.name == "ln" and cfg.norm.name == "pn"
        assert refusal(Run("job", OmegaConf.to_container(cfg, resolve=False), [])) is None
    elif arm.startswith("transformer"):
        assert cfg.model.decoder_norm is None and "future target tokens" in refusal(
            Run("job", OmegaConf.to_container(cfg), [])
        )


def _commands(preset: str) -> dict[str, list[str]]:
    """The comment's translation sweeps: arm -> the norms its command lists (``norm=a,b`` or the
    registered norms of a kind, ``'hydra.sweeper.params.norm=${normbench.norms:<kind>}'``)."""
    text = (CONF / "experiment" / f"{preset}.yaml").read_text().replace("\\\n#", "")
    found = re.findall(
        r"leaderboard@_global_=(transformer\w*)'\s+(?:norm=([\w,]+)|'hydra\.sweeper\.params\.norm="
        r"\$\{normbench\.norms:(\w*)\}') hydra\.sweep\.dir=",
        text,
    )
    return {arm: (norms.split(",") if norms else norm_list(kind).split(",")) for arm, norms, kind in found}


@pytest.mark.parametrize("preset", sorted(ARMS))
def test_translation_commands_run_causal_norms_everywhere_and_the_others_in_the_encoder(preset: str) -> None:
    commands = _commands(preset)
    suffix = "_cpu" if preset.endswith("_cpu") else ""
    assert set(commands) == {f"transformer{suffix}", f"transformer_enc{suffix}"}
    causal, encoder = commands[f"transformer{suffix}"], commands[f"transformer_enc{suffix}"]
    assert not set(causal) & set(MIXING) and set(encoder) <= set(MIXING)
    for arm, norms in commands.items():  # every job of both sweeps passes the decoder rule
        cfg = OmegaConf.to_container(compose_cfg([f"experiment={preset}", f"{ARM}={arm}"]), resolve=False)
        assert all(refusal(Run("job", {**cfg, "norm": {"name": n}}, [])) is None for n in norms), arm
    if preset == "leaderboard":  # every registered norm runs on translation
        assert sorted(causal + encoder) == sorted(list_norms())


def _steps(cfg: OmegaConf) -> int:
    """ResNet8's training steps: whole batches of the training images (the loader drops the last)."""
    return int(cfg.epochs) * (int(cfg.dataset.train_limit) // int(cfg.batch_size))


def test_cpu_diagnostics_fall_in_the_last_tenth_of_training() -> None:
    """ResNet8 on 5,000 images: 39 steps an epoch; the probes and the variance call are in the last
    10 % of the steps, where the leaderboard reads its end-of-training values."""
    cfg = compose_cfg(["experiment=leaderboard_cpu"])
    total = _steps(cfg)
    assert total == 312
    for name in ("landscape", "beta_smoothness", "grad_variance"):
        d = cfg.diagnostics[name]
        assert d.every_n_steps == 0 and all(0.9 * total <= s < total for s in d.steps), (name, list(d.steps))


@pytest.mark.parametrize(
    ("norm", "planned"),
    [("pn", {"warmup_iters": 31}), ("brn", {"warmup_steps": 16, "r_max_steps": 125, "d_max_steps": 78})],
)
def test_cpu_norm_schedules_are_fractions_of_the_run(norm: str, planned: dict[str, int]) -> None:
    """As the ResNet8 arm's comment says: PN leaves its warm-up at step 31 of 312 (the first
    leaderboard_cpu's PN never left its 10,000-step one); BRN's ramps at 5 %, 40 %, 25 %."""
    cfg = compose_cfg(["experiment=leaderboard_cpu", f"norm={norm}"])
    layer = norm_factory(cfg.norm)(16, "NCHW")
    layer.plan_schedule(_steps(cfg))
    assert layer.planned_steps() == planned
    text = (CONF / "experiment" / "arms" / "leaderboard" / "resnet8_cpu.yaml").read_text()
    assert all(f" {v}" in text for v in planned.values())


def test_the_full_preset_sweeps_the_registry_through_its_resolver() -> None:
    """``norm: ${normbench.norms:}`` is the registered norms, and Hydra's basic sweeper makes one job
    per norm of it; a kind given on the command line (the translation commands) sweeps that kind."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from normbench.base.hydra_job import _resolved, swept_keys

    for overrides, names in (
        ([], list_norms()),
        (["hydra.sweeper.params.norm=${normbench.norms:causal}"], sorted(set(list_norms()) - set(MIXING))),
        (["hydra.sweeper.params.norm=${normbench.norms:mixing}"], MIXING),
    ):
        cfg = compose_cfg(["experiment=leaderboard", *overrides], hydra=True)
        params = cfg.hydra.sweeper.params
        lines = [f"{k}={v}" for k, v in params.items()] + ["experiment/arms/leaderboard@_global_=resnet20", "seed=0"]
        (jobs,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(lines), None)
        assert sorted(o.split("=")[1] for job in jobs for o in job if o.startswith("norm=")) == names
        assert "norm" in swept_keys([], _resolved(params))  # the W&B run is named by its norm


def test_an_unknown_kind_of_norms_is_one_line() -> None:
    from normbench.base.errors import ConfigError

    with pytest.raises(ConfigError, match=r"unknown kind 'causl'; valid choices: all, causal, mixing"):
        norm_list("causl")
