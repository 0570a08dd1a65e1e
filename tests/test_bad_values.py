"""Values that the type allows but no run can use (issue 24): each is refused when the config is
parsed, by the dataclass that owns it (or, for model and data set together, by
`normbench.run.loop.validate`), in one line naming the key, the value and what is allowed, before any data
is read. Before, they trained anyway (a negative lr through the schedule, all-black images, a
Transformer with no layers, BLEU on five sentences) or crashed later with a traceback (Adam with one
beta, a seed beyond 64 bits, an interpolation that cannot be resolved).

Most cases parse in process (`normbench.config.parse`, fast); a handful go through the command
to show the one line, exit code 2 and nothing left behind. The NaN and ``eps`` cases run over the
registries, so a new norm, model or data set is checked without a new line here."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from normbench.base.errors import ConfigError
from normbench.cli.main import config_dir
from normbench.config import RunConfig, parse
from normbench.models import MODELS
from normbench.norms import NORMS, list_norms
from normbench.optim import OptimizerConfig, ScheduleConfig
from normbench.run.loop.validate import check_before_data
from normbench.tasks import DATASETS
from tests.conf.test_compose import OPTIONS, compose_cfg
from tests.conf.test_presets import PRESETS, first_job, sweep_params
from tests.conftest import TINY_RUN, run_cli
from tests.faults import fault
from tests.test_validate import run_cli_inprocess

CONF = Path(config_dir())
IMAGES = ("experiment=quickstart",)
TEXT = ("experiment=quickstart_mt",)
TINY_TEXT = (
    *TEXT,
    "dataset.num_train=64",
    "dataset.num_valid=8",
    "dataset.num_test=8",
    "logger.progress_bar=false",
)


def composed(overrides: list[str]) -> DictConfig:
    """``compose_cfg(overrides)``, with the group choices composed once (cached) and the values set
    the way Hydra's compose sets them on the composed tree (`ConfigLoaderImpl._apply_overrides_to_config`,
    in struct mode): ~1 ms a case instead of a compose's ~0.3 s."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed_overrides = OverridesParser.create().parse_overrides(overrides=overrides)
    groups = [o for o in parsed_overrides if (CONF / o.key_or_group).is_dir()]
    cfg = compose_cfg([o.input_line for o in groups])
    OmegaConf.set_struct(cfg, True)
    ConfigLoaderImpl._apply_overrides_to_config([o for o in parsed_overrides if o not in groups], cfg)
    return cfg


def test_setting_values_on_a_composed_config_is_what_compose_gives() -> None:
    """`composed` against Hydra's compose, on a group choice, values, an interpolation and a list."""
    overrides = [*TEXT, "norm@model.encoder_norm=pn", "model.encoder_norm.alpha_fwd=0.5", "seed=${epochs}", "lr=0.3",
                 "optimizer.betas=[0.8,0.9]", "dataset.max_len_a=2"]  # fmt: skip
    assert OmegaConf.to_container(composed(overrides)) == OmegaConf.to_container(compose_cfg(overrides))
    assert composed(overrides).seed == compose_cfg(overrides).epochs


def parsed(*overrides: str) -> RunConfig:
    """The composed config parsed and checked as `normbench.run.loop.train.run` does before any data."""
    config = parse(composed(list(overrides)))
    check_before_data(config.model, config.norm, config.dataset, config.batch_size)
    return config


def refused(*overrides: str) -> str:
    with pytest.raises(ConfigError) as e:
        parsed(*overrides)
    message = str(e.value)
    assert "\n" not in message
    return message


SCHEDULE = [
    (
        ["schedule.min_lr_ratio=-3"],
        "schedule.min_lr_ratio=-3.0 is not allowed; schedule.min_lr_ratio must be in [0, 1]",
    ),
    (["schedule.min_lr_ratio=nan"], "schedule.min_lr_ratio=nan is not allowed"),
    (["schedule.name=step", "schedule.gamma=-2"], "schedule.gamma=-2.0 is not allowed; schedule.gamma must be > 0"),
    (["schedule.gamma=inf"], "schedule.gamma=inf is not allowed; schedule.gamma must be > 0"),
    (["schedule.warmup_steps=-10"], "schedule.warmup_steps=-10 is not allowed; schedule.warmup_steps must be >= 0"),
    (["schedule.milestones=[0.5,-1]"], "schedule.milestones[1]=-1.0 is not allowed; schedule.milestones[1] must be in"),
]
OPTIMIZER = [
    (["optimizer.momentum=-1"], "optimizer.momentum=-1.0 is not allowed; optimizer.momentum must be in [0, 1)"),
    (["optimizer.momentum=1.5"], "optimizer.momentum=1.5 is not allowed"),
    (["optimizer.betas=[0.9]"], "optimizer.betas=[0.9] is not allowed; optimizer.betas must be two values"),
    (["optimizer.betas=[0.9,1.0]"], "optimizer.betas[1]=1.0 is not allowed; optimizer.betas[1] must be in [0, 1)"),
    (["optimizer.betas=[-0.1,0.99]"], "optimizer.betas[0]=-0.1 is not allowed"),
    (
        ["optimizer.nesterov=true", "optimizer.momentum=0"],
        "optimizer.nesterov=True is not allowed; optimizer.nesterov must be false with optimizer.momentum=0",
    ),
    (["optimizer.name=adam", "optimizer.eps=-1e-8"], "optimizer.eps=-1e-08 is not allowed; optimizer.eps must be > 0"),
]
RUN = [
    (["seed=18446744073709551616"], "seed=18446744073709551616 is not allowed; seed must be a 64-bit signed integer"),
    (["seed=-9223372036854775809"], "seed=-9223372036854775809 is not allowed"),
    (["throughput_warmup_steps=-1"], "throughput_warmup_steps=-1 is not allowed"),
]
IMAGE_DATA = [
    (["dataset.noise=nan"], "dataset.noise=nan is not allowed; dataset.noise must be in [0, inf)"),
    (["dataset.noise=-1"], "dataset.noise=-1.0 is not allowed"),
    (["dataset.num_test=0"], "dataset.num_test=0 is not allowed; dataset.num_test must be a positive integer"),
    (["dataset.num_train=-5"], "dataset.num_train=-5 is not allowed"),
    (["dataset.seed=18446744073709551616"], "dataset.seed=18446744073709551616 is not allowed"),
    (["model.depth=2"], "model.depth=2 is not allowed; model.depth must be 6n+2 with n >= 1"),
]
NORM = [
    (["norm.eps=0"], "norm.eps=0.0 is not allowed; norm.eps must be > 0"),
    (["norm.momentum=5"], "norm.momentum=5.0 is not allowed; norm.momentum must be in [0, 1]"),
    (["norm.momentum=nan"], "norm.momentum=nan is not allowed"),
    (["norm=brn", "norm.momentum=-0.1"], "norm.momentum=-0.1 is not allowed"),
    (["norm.population_batches=0"], "norm.population_batches=0 is not allowed"),
    (["norm=pn", "norm.alpha_fwd=1.5"], "norm.alpha_fwd=1.5 is not allowed; norm.alpha_fwd must be in [0, 1]"),
    (["norm=pn", "norm.alpha_fwd=-0.1"], "norm.alpha_fwd=-0.1 is not allowed"),
    (["norm=pn", "norm.alpha_bkw=2"], "norm.alpha_bkw=2.0 is not allowed; norm.alpha_bkw must be in [0, 1]"),
    (["norm=pn", "norm.warmup_iters=-10"], "norm.warmup_iters=-10 must be >= 0"),
    (["norm=pn", "norm.warmup_fraction=1.5"], "norm.warmup_fraction=1.5 must be in [0, 1]"),
    (["norm=pn", "norm.groups=0"], "norm.groups=0 is not allowed; norm.groups must be a positive integer"),
    (["norm=gn", "norm.groups=-2"], "norm.groups=-2 is not allowed"),
    (["norm=prms", "norm.p=0"], "norm.p=0.0 is not allowed; norm.p must be in (0, 1]"),
    (["norm=prms", "norm.p=1.5"], "norm.p=1.5 is not allowed"),
    (["norm=brn", "norm.r_max=0.5"], "norm.r_max=0.5 is not allowed; norm.r_max must be in [1, inf)"),
    (["norm=brn", "norm.d_max=-1"], "norm.d_max=-1.0 is not allowed"),
    (["norm=brn", "norm.warmup_steps=-1"], "norm.warmup_steps=-1 must be >= 0"),
    (["norm=bn_noisy", "norm.n_sigma=0.5"], "norm.n_sigma=0.5 is not allowed; norm.n_sigma must be in [1, inf)"),
    (["norm=noise_only", "norm.r_sigma=-1"], "norm.r_sigma=-1.0 is not allowed"),
]
TRANSFORMER = [
    (["model.encoder_layers=-1"], "model.encoder_layers=-1 is not allowed; model.encoder_layers must be a positive"),
    (["model.decoder_layers=0"], "model.decoder_layers=0 is not allowed"),
    (["model.d_model=0"], "model.d_model=0 is not allowed"),
    (["model.ffn_dim=-8"], "model.ffn_dim=-8 is not allowed"),
    (["model.heads=0"], "model.heads=0 is not allowed; model.heads must be a positive integer"),
    (["model.heads=3"], "model.heads=3 is not allowed; model.heads must be a divisor of model.d_model=128"),
    (["model.dropout=1.5"], "model.dropout=1.5 is not allowed; model.dropout must be in [0, 1)"),
    (["model.attention_dropout=-0.1"], "model.attention_dropout=-0.1 is not allowed"),
    (["model.activation_dropout=1"], "model.activation_dropout=1.0 is not allowed"),
    (
        ["model.max_positions=8"],
        "model.max_positions=8 is not allowed; model.max_positions must be >= dataset.max_positions=1024",
    ),
    (["model.max_positions=1"], "model.max_positions=1 is not allowed"),
    (
        ["norm@model.encoder_norm=pn", "model.encoder_norm.alpha_fwd=2"],
        "model.encoder_norm.alpha_fwd=2.0 is not allowed; model.encoder_norm.alpha_fwd must be in [0, 1]",
    ),
    (["norm@model.decoder_norm=ln", "model.decoder_norm.eps=0"], "model.decoder_norm.eps=0.0 is not allowed"),
]
TEXT_DATA = [
    (["dataset.bleu_max_sentences=0"], "dataset.bleu_max_sentences=0 is not allowed"),
    (["dataset.bleu_max_sentences=-5"], "dataset.bleu_max_sentences=-5 is not allowed"),
    (["dataset.max_len_b=-1"], "dataset.max_len_b=-1 is not allowed; dataset.max_len_b must be >= 0"),
    (["dataset.max_len_a=-1"], "dataset.max_len_a=-1.0 is not allowed"),
    (["dataset.max_len_a=0", "dataset.max_len_b=0"], "dataset.max_len_b=0 is not allowed"),
    (["dataset.max_positions=1"], "dataset.max_positions=1 is not allowed"),
    (["dataset.vocab_size=3"], "dataset.vocab_size=3 is not allowed"),
    (["dataset.pretokenize=moses"], "dataset.pretokenize=moses is not allowed; dataset.pretokenize must be one of"),
    (["dataset.num_valid=0"], "dataset.num_valid=0 is not allowed"),
    (["dataset.num_words=0"], "dataset.num_words=0 is not allowed"),
    (["dataset.min_len=0"], "dataset.min_len=0 is not allowed"),
    (
        ["dataset.min_len=5", "dataset.max_len=4"],
        "dataset.max_len=4 is not allowed; dataset.max_len must be >= dataset",
    ),
]
CASES = [
    *((IMAGES, a, m) for a, m in SCHEDULE + OPTIMIZER + RUN + IMAGE_DATA + NORM),
    *((TEXT, a, m) for a, m in TRANSFORMER + TEXT_DATA),
]


@fault(
    "a value that trains anyway or fails mid-run (schedule, optimizer, seed, data set, model, norm)",
    "one line naming the key, the value and what is allowed, when the config is parsed",
    "one-line",
)
@pytest.mark.parametrize(("base", "args", "message"), CASES, ids=[" ".join(a) for _, a, _ in CASES])
def test_a_value_no_run_can_use_is_refused_when_parsed(base, args, message) -> None:
    assert message in refused(*base, *args)


@fault("norm.eps <= 0 or NaN, on every registered norm", "one line naming norm.eps", "one-line")
@pytest.mark.parametrize("eps", [0.0, -1e-5, math.nan])
@pytest.mark.parametrize("norm", list_norms())
def test_every_norm_refuses_an_eps_that_is_not_positive(norm, eps) -> None:
    with pytest.raises(ConfigError, match=f"^norm.eps={eps} is not allowed; norm.eps must be > 0$"):
        NORMS.typed({"name": norm, "eps": eps})


def _float_fields(config: type) -> list[str]:
    return [f.name for f in dataclasses.fields(config) if str(f.type).split(" | ")[0] == "float"]


FLOATS = [
    (group, name, key)
    for group, registry in (("norm", NORMS), ("model", MODELS), ("dataset", DATASETS))
    for name, config in registry.configs().items()
    for key in _float_fields(config)
] + [
    (group, None, key)
    for group, c in (("optimizer", OptimizerConfig), ("schedule", ScheduleConfig))
    for key in _float_fields(c)
]


@fault(
    "NaN in any float setting of a norm, model, data set, optimizer or schedule",
    "one line naming the key",
    "one-line",
)
@pytest.mark.parametrize(("group", "name", "key"), FLOATS, ids=[f"{g}={n or ''}.{k}" for g, n, k in FLOATS])
def test_nan_is_refused_in_every_float_setting(group, name, key) -> None:
    registries = {"norm": NORMS, "model": MODELS, "dataset": DATASETS}
    with pytest.raises(ConfigError, match=f"{group}.{key}=nan "):
        if name is None:
            {"optimizer": OptimizerConfig, "schedule": ScheduleConfig}[group](**{key: math.nan})
        else:
            registries[group].typed({"name": name, key: math.nan})


@fault(
    "an unresolved or self-referencing interpolation (seed=${oc.env:NOPE}, lr=${lr})",
    "one line naming the key and why it cannot be resolved",
    "one-line",
)
@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("seed=${oc.env:NOPE}", "seed=${oc.env:NOPE} is not allowed; seed must resolve to a value ("),
        ("lr=${lr}", "lr=${lr} is not allowed; lr must resolve to a value (Recursive interpolation detected)"),
        ("lr=${nope}", "lr=${nope} is not allowed; lr must resolve to a value (Interpolation key 'nope' not found)"),
        ("norm.eps=${oc.env:NOPE}", "norm.eps=${oc.env:NOPE} is not allowed; norm.eps must resolve to a value"),
        ("optimizer.betas=[0.9,${nope}]", "optimizer.betas[1]=${nope} is not allowed"),
        ("seed=${oc.env:HOME}", "seed=${oc.env:HOME} is not allowed; seed must resolve to a value (While"),
        ("seed=???", "seed=??? is not allowed; seed must be given a value"),
    ],
)
def test_an_interpolation_that_cannot_be_resolved_is_one_line(monkeypatch, arg, message) -> None:
    monkeypatch.delenv("NOPE", raising=False)
    assert message in refused(*IMAGES, arg)


SLOW = pytest.mark.slow  # each value is refused in the default suite when parsed (CASES); one of each kind here
CLI_CASES = [
    pytest.param(TINY_RUN, "schedule.min_lr_ratio=-3", "schedule.min_lr_ratio=-3.0 is not allowed"),
    pytest.param(TINY_RUN, "dataset.noise=nan", "dataset.noise=nan is not allowed", marks=SLOW),
    pytest.param(TINY_RUN, "dataset.num_test=0", "dataset.num_test=0 is not allowed", marks=SLOW),
    pytest.param(TINY_RUN, "norm.eps=0", "norm.eps=0.0 is not allowed", marks=SLOW),
    pytest.param(TINY_RUN, "norm.momentum=5", "norm.momentum=5.0 is not allowed", marks=SLOW),
    pytest.param(TINY_RUN, "optimizer.momentum=-1", "optimizer.momentum=-1.0 is not allowed", marks=SLOW),
    pytest.param(TINY_RUN, "optimizer.betas=[0.9]", "optimizer.betas=[0.9] is not allowed", marks=SLOW),
    pytest.param(TINY_RUN, "seed=18446744073709551616", "seed=18446744073709551616 is not allowed"),
    pytest.param(TINY_RUN, "seed=${oc.env:NOPE}", "seed=${oc.env:NOPE} is not allowed", marks=SLOW),
    pytest.param(TINY_RUN, "lr=${lr}", "lr=${lr} is not allowed"),
    pytest.param(TINY_TEXT, "model.encoder_layers=-1", "model.encoder_layers=-1 is not allowed"),
    pytest.param(TINY_TEXT, "model.heads=0", "model.heads=0 is not allowed", marks=SLOW),
    pytest.param(TINY_TEXT, "model.max_positions=8", "model.max_positions=8 is not allowed", marks=SLOW),
    pytest.param(TINY_TEXT, "dataset.bleu_max_sentences=0", "dataset.bleu_max_sentences=0 is not allowed", marks=SLOW),
]


@fault(
    "a bad value that trains anyway or fails mid-run, through the command",
    "one line, exit 2; nothing written",
    "one-line",
)
@pytest.mark.parametrize(("base", "arg", "message"), CLI_CASES, ids=[p.values[1] for p in CLI_CASES])
def test_through_the_command_one_line_exit_2_and_nothing_left(
    tmp_path, monkeypatch, capsys, base, arg, message
) -> None:
    monkeypatch.delenv("NOPE", raising=False)
    out = tmp_path / "run"
    code, stdout, stderr = run_cli_inprocess(monkeypatch, capsys, *base, arg, "logger=local", f"hydra.run.dir={out}")
    assert code == 2, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"normbench: error: {message}"), stderr
    assert "Traceback" not in stdout + stderr
    assert not out.exists()


@pytest.mark.e2e
@fault("a self-referencing interpolation, in a process of its own", "one line, exit 2; nothing written", "one-line")
def test_a_self_referencing_interpolation_in_a_real_process(tmp_path) -> None:
    out = tmp_path / "run"
    r = run_cli(*TINY_RUN, "lr=${lr}", "logger=local", f"hydra.run.dir={out}")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (
        "normbench: error: lr=${lr} is not allowed; lr must resolve to a value (Recursive interpolation detected)"
    )
    assert not out.exists()


@pytest.mark.slow  # the default suite parses each of these composes in conf/test_compose.py (the same compose)
@pytest.mark.parametrize(("group", "option"), OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_every_config_file_still_parses(group, option) -> None:
    """The checks refuse no default: every option of every group parses (each on the defaults)."""
    parse(compose_cfg([f"{group}={option}"]))


@pytest.mark.slow  # ~370 composes; the same sweep as conf/test_presets.py::test_every_swept_value_composes (slow)
@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_value_still_parses(preset) -> None:
    """Every value a paper preset sweeps, on the preset's first job, parses."""
    base = first_job(preset)
    parse(compose_cfg(base))
    for key, values in sweep_params(preset).items():
        for value in values[1:]:
            parse(compose_cfg([*base, f"{key}={value}"]))
