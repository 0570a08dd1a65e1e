"""Step schedules given as fractions of the run (`normbench.norms.schedule`): PowerNorm's warm-up
and Batch Renorm's ramps planned from a tiny run length are the steps the fractions say, the norms
behave by them (PN uses the running ψ² after its planned warm-up, BRN is plain BN until its planned
warm-up ends), a given count wins, bad values are one-line errors, the runner plans every norm of
the model (also after a resume, bit for bit), and the presets' arms derive what they used to count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from normbench.base.errors import ConfigError
from normbench.norms import build_norm, norm_factory
from normbench.norms.power import PowerNorm
from normbench.norms.registry import norm_config
from tests.conf.test_compose import compose_cfg

C = 8


def batch(step: int, layout: str = "NCHW") -> torch.Tensor:
    g = torch.Generator().manual_seed(step)
    shape = (4, C, 3, 3) if layout == "NCHW" else (4, 5, C)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * (1 + step) + 0.5).requires_grad_(True)


def test_pn_warmup_is_its_fraction_of_the_run_and_then_uses_the_running_psi2() -> None:
    m = build_norm("pn", C, "NCHW", warmup_fraction=0.25).double()
    assert m.warmup_iters is None  # unplanned: still in its warm-up
    m.plan_schedule(20)
    assert m.warmup_iters == 5 and m.planned_steps() == {"warmup_iters": 5}
    ref = build_norm("pn", C, "NCHW", warmup_iters=5).double()  # the same schedule as a count
    for step in range(1, 9):
        x = batch(step)
        running = m.running_psi2.clone()
        y, y_ref = m(x), ref(x.detach().clone())
        torch.testing.assert_close(y, y_ref, atol=0, rtol=0)
        x_tilde = x.detach() / torch.sqrt(x.detach().pow(2).mean(1, keepdim=True) + m.eps)  # GroupScaling, 1 group
        psi2 = running if step > 5 else x_tilde.pow(2).mean((0, 2, 3))  # the running ψ² from step 6 on
        z = x_tilde / torch.sqrt(psi2.view(1, C, 1, 1) + m.eps)
        torch.testing.assert_close(y, z * m.weight.view(1, C, 1, 1) + m.bias.view(1, C, 1, 1), atol=1e-12, rtol=0)
        y.sum().backward()


def test_brn_ramps_are_their_fractions_of_the_run() -> None:
    m = build_norm("brn", C, "NCHW", r_max=3.0, d_max=5.0)  # the defaults: 5 %, 40 %, 25 %
    assert m.planned_steps() == {"warmup_steps": None, "r_max_steps": None, "d_max_steps": None}
    assert [float(v) for v in m.limits(torch.tensor(10**6))] == [1.0, 0.0]  # unplanned: BatchNorm
    m.plan_schedule(40)
    assert m.planned_steps() == {"warmup_steps": 2, "r_max_steps": 16, "d_max_steps": 10}

    def limits(step: int) -> tuple[float, float]:
        r_max, d_max = m.limits(torch.tensor(step))
        return float(r_max), float(d_max)

    assert limits(2) == (1.0, 0.0)
    assert limits(9) == pytest.approx((1 + 2 * 7 / 14, 5 * 7 / 8))
    assert limits(10) == pytest.approx((1 + 2 * 8 / 14, 5.0)) and limits(16) == (3.0, 5.0)


def test_brn_is_batchnorm_until_its_planned_warmup_ends() -> None:
    bn = build_norm("bn", C, "NCHW", momentum=0.01).double()
    brn = build_norm("brn", C, "NCHW", warmup_fraction=0.5, r_max_fraction=1.0, d_max_fraction=1.0).double()
    brn.plan_schedule(4)  # warm-up 2 steps, then r and d clipped to (1 + 2·ramp, 5·ramp)
    for step in range(1, 5):
        x = batch(step) * 10 + 20  # far from the running statistics: r and d clip once allowed
        same = torch.allclose(brn(x), bn(x), atol=1e-10, rtol=0)
        assert same == (step <= 2), step


def test_a_given_count_wins_and_bad_values_are_one_line_errors() -> None:
    m = build_norm("pn", C, warmup_iters=7, warmup_fraction=0.5)
    m.plan_schedule(100)
    assert m.warmup_iters == 7
    brn = build_norm("brn", C, r_max_steps=3)
    brn.plan_schedule(100)
    assert brn.planned_steps() == {"warmup_steps": 5, "r_max_steps": 3, "d_max_steps": 25}
    for kw, needle in [
        ({"warmup_fraction": 1.5}, "norm.warmup_fraction=1.5 must be in [0, 1]"),
        ({"warmup_fraction": None}, "norm.warmup_iters and norm.warmup_fraction are both null"),
        ({"warmup_iters": -1}, "norm.warmup_iters=-1 must be >= 0"),
    ]:
        with pytest.raises(ConfigError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            build_norm("pn", C, **kw)
    with pytest.raises(ConfigError, match="norm.r_max_fraction=-0.1 must be in"):
        build_norm("brn", C, r_max_fraction=-0.1)


def test_config_defaults_are_fractions_in_the_schema_and_the_yaml() -> None:
    for name, keys in (("pn", {"warmup_iters": None, "warmup_fraction": 0.1}),
                       ("brn", {"warmup_steps": None, "r_max_steps": None, "d_max_steps": None,
                                "warmup_fraction": 0.05, "r_max_fraction": 0.40, "d_max_fraction": 0.25})):  # fmt: skip
        schema, composed = norm_config(name), compose_cfg([f"norm={name}"]).norm
        assert {k: getattr(schema, k) for k in keys} == keys == {k: composed[k] for k in keys}


TINY = [
    "experiment=quickstart",
    "model.depth=8",
    "norm=pn",
    "norm.warmup_fraction=0.5",
    "max_steps=8",
    "dataset.num_train=256",  # 8 steps of 32 an epoch
    "dataset.num_test=64",
    "batch_size=32",
    "eval_batch_size=64",
    "checkpoint.every_n_steps=4",
    "hardware=cpu",
    "hardware.deterministic=true",
    "logger.wandb=false",
    "logger.progress_bar=false",
    "logger.log_every_n_steps=1",
]


def _final(run_dir: Path) -> tuple[list[float], dict[str, torch.Tensor]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [r["train/batch_loss"] for r in rows if "train/batch_loss" in r]
    newest = max((run_dir / "checkpoints").glob("step-*.pt"))
    model = torch.load(newest, weights_only=True)["model"]
    return losses, {k: v for k, v in model.items() if k.endswith("running_psi2")}


def test_the_runner_plans_every_norm_and_again_after_a_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An 8-step run with PN's warm-up at half of it (4 steps), straight through and stopped after
    its step-4 checkpoint then resumed: every PN layer is planned with the run's 8 steps, and the
    resumed run's losses and running ψ² are the straight run's, bit for bit (an unplanned PN would
    stay in its warm-up after the resume)."""
    from normbench.run.loop import train

    planned: list[tuple[int, int | None]] = []
    plan = PowerNorm.plan_schedule

    def spy(self: PowerNorm, total_steps: int) -> None:
        plan(self, total_steps)
        planned.append((total_steps, self.warmup_iters))

    monkeypatch.setattr(PowerNorm, "plan_schedule", spy)
    straight = tmp_path / "straight"
    assert train.run(compose_cfg(TINY), straight)["status"] == "finished"
    assert planned and set(planned) == {(8, 4)}  # ResNet8: every PN layer, 8 steps, warm-up 4
    layers, planned[:] = len(planned), []

    step = train.train_step

    def fail_at_step_5(run: object, ep: object, b: object) -> object:
        if run.step == 4:  # after the step-4 checkpoint
            raise RuntimeError("stopped for the test")
        return step(run, ep, b)

    resumed = tmp_path / "resumed"
    monkeypatch.setattr(train, "train_step", fail_at_step_5)
    with pytest.raises(RuntimeError, match="stopped for the test"):
        train.run(compose_cfg(TINY), resumed)
    monkeypatch.setattr(train, "train_step", step)
    assert train.run(compose_cfg([*TINY, "resume=true"]), resumed)["status"] == "finished"
    assert planned == [(8, 4)] * (2 * layers)  # planned in both segments
    (loss_a, psi_a), (loss_b, psi_b) = _final(straight), _final(resumed)
    assert len(loss_a) == 8 and loss_a == loss_b and psi_a.keys() == psi_b.keys()
    assert all(torch.equal(psi_a[k], psi_b[k]) for k in psi_a)


def _planned(overrides: list[str], steps_per_epoch: int) -> dict[str, int | None]:
    cfg = compose_cfg(overrides)
    norm = norm_factory(cfg.norm)(16, "NCHW")
    norm.plan_schedule(cfg.max_steps or cfg.epochs * steps_per_epoch)
    return norm.planned_steps()


@pytest.mark.parametrize(
    ("arm", "images", "counts"),  # the counts these arms held before they were fractions
    [("brn_bs32_cpu", 500, (60, 480, 300)), ("brn_bs8_cpu", 500, (248, 1984, 1240)),
     ("brn_bs2_cpu", 500, (1000, 8000, 5000)), ("brn_bs4", 50_000, (62500, 500000, 312500))],
)  # fmt: skip
def test_gn_batch_size_brn_arms_derive_their_old_step_counts(arm: str, images: int, counts: tuple) -> None:
    preset = "gn_batch_size_cpu" if arm.endswith("_cpu") else "gn_batch_size"
    overrides = [f"experiment={preset}", f"experiment/arms/gn_batch_size@_global_={arm}"]
    batch_size = int(compose_cfg(overrides).batch_size)
    planned = _planned(overrides, images // batch_size)
    assert (planned["warmup_steps"], planned["r_max_steps"], planned["d_max_steps"]) == counts


def test_powernorm_mt_keeps_pn_warmup_at_the_lr_warmup() -> None:
    cfg = compose_cfg(["experiment=powernorm_mt", "experiment/arms/powernorm_mt@_global_=pn"])
    pn = norm_factory(cfg.model.encoder_norm)(16, "NTC")
    pn.plan_schedule(123_456)
    assert pn.warmup_iters == cfg.schedule.warmup_steps == 8000


def test_powernorm_chain_pn_v_arm_differs_from_pn_only_in_the_forward_statistics() -> None:
    """powernorm_chain's PN-V arm is the PN arm (GroupScaling groups, warm-up) with
    forward_stats=batch, and builds a PowerNorm in that mode."""
    arm = "experiment/arms/powernorm_mt@_global_"
    pn, pn_v = (compose_cfg(["experiment=powernorm_chain_cpu", f"{arm}={a}"]) for a in ("pn", "pn_v"))
    a, b = OmegaConf.to_container(pn.model.encoder_norm), OmegaConf.to_container(pn_v.model.encoder_norm)
    assert {k for k in a if a[k] != b[k]} == {"forward_stats"} and (a["forward_stats"], b["forward_stats"]) == (
        "running",
        "batch",
    )
    assert pn_v.model.decoder_norm.name == "ln" and pn_v.max_steps == 350 and pn_v.dataset.max_tokens == 2048
    assert norm_factory(pn_v.model.encoder_norm)(16, "NTC").forward_stats == "batch"
