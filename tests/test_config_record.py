"""`normbench.config.load_record`: a recorded run's config (``config.yaml``, W&B's config) read
back as the typed `RunConfig`, old records with keys missing at their schemas' defaults."""

from __future__ import annotations

import dataclasses

import pytest

from normbench.base.errors import ConfigError
from normbench.config import as_recorded, load_record, parse
from tests.conftest import compose_cfg

OLD_RECORD = {  # as an earlier version wrote it: most keys absent
    "norm": {"name": "bn"},
    "model": {"name": "resnet20"},
    "dataset": {"name": "cifar10"},
    "optimizer": {"name": "sgd"},
    "lr": 0.05,
    "seed": 3,
    "hardware": {"device": "cpu", "resolved": {"device": "cpu", "world_size": 1}},
}


@pytest.mark.parametrize("overrides", [["experiment=quickstart"], ["experiment=quickstart_mt"]])
def test_a_record_loads_back_as_the_config_it_was_made_from(overrides: list[str]) -> None:
    cfg = compose_cfg(overrides)
    config = parse(cfg)
    assert load_record(as_recorded(cfg, config)) == config


def test_a_model_s_own_norm_is_typed_as_a_norm() -> None:
    cfg = compose_cfg(["model=transformer_tiny", "dataset=synthetic_translation", "norm@model.encoder_norm=pn"])
    record = load_record(as_recorded(cfg, parse(cfg)))
    assert type(record.model.encoder_norm).__name__ == "PowerNormConfig"
    assert record.model.encoder_norm.forward_stats == "running"  # PowerNorm's default
    assert record.model.decoder_norm is None


def test_an_old_record_gets_its_schemas_defaults() -> None:
    record = load_record(OLD_RECORD)
    assert (record.norm.name, record.lr, record.seed) == ("bn", 0.05, 3)
    assert record.optimizer.momentum == 0.9  # the optimizer's default, not 0
    assert record.optimizer.nesterov is False
    assert (record.epochs, record.batch_size, record.weight_decay) == (10, 128, 5e-4)
    assert record.schedule.name == "cosine"
    assert record.hardware.device == "cpu" and record.hardware.compile is False  # `resolved` is no config key
    assert record.logger.group is None and record.logger.project == "normbench"
    assert record.diagnostics == {}
    assert type(record.norm).__name__ == "BatchNormConfig" and record.norm.momentum == 0.1  # BN's default


def test_what_the_sinks_add_beside_the_config_is_left_out() -> None:
    """W&B's logged config: the record, ``hardware.resolved`` and Hydra's choices (``hydra``)."""
    logged = {**OLD_RECORD, "hydra": {"choices": {"norm": "bn"}, "overrides": ["seed=3"]}}
    assert load_record(logged) == load_record(OLD_RECORD)


def test_a_recorded_probe_direction_is_kept() -> None:
    cfg = compose_cfg(["experiment=quickstart"])
    recorded = as_recorded(cfg, parse(cfg))
    probes = [k for k, v in recorded["diagnostics"].items() if isinstance(v, dict) and "direction" in v]
    assert probes, "quickstart records no probe direction: pick a preset that does"
    recorded["diagnostics"][probes[0]]["direction"] = "gradient"  # a record of another optimizer's choice
    assert load_record(recorded).diagnostics[probes[0]].direction == "gradient"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"norm": None}, "no norm"),
        ({"norm": {"name": "bnx"}}, "'bnx'"),
        ({"optimizer": {"momentun": 0.9}}, "momentun"),
        ({"lr": "fast"}, "lr"),
        ({"lr": -1.0}, "lr=-1.0"),
        ({"hardware": {"precision": "fp8"}}, "fp8"),
        ({"logger": {"projekt": "x"}}, "logger.projekt"),
        ({"epoks": 3}, "epoks"),
        ({"diagnostics": {"nope": {}}}, "'nope'"),
    ],
)
def test_a_record_it_cannot_read_is_one_line(change: dict, named: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_record({**OLD_RECORD, **change})
    message = str(e.value)
    assert "\n" not in message and named in message and "recorded run" in message


@pytest.mark.parametrize("record", [[1, 2], "norm: bn", None])
def test_a_record_that_is_no_mapping_is_one_line(record: object) -> None:
    with pytest.raises(ConfigError, match="^a recorded run's config cannot be read: a run's record is a mapping"):
        load_record(record)  # type: ignore[arg-type]


def test_the_loaded_record_is_plain_dataclasses() -> None:
    """What `dataclasses.asdict` turns into the mapping that checkpoints compare."""
    plain = dataclasses.asdict(load_record(OLD_RECORD))
    assert plain["optimizer"]["momentum"] == 0.9 and plain["norm"]["name"] == "bn"


def test_a_text_that_looks_like_an_interpolation_stays_that_text() -> None:
    """Hydra's ``.hydra/config.yaml`` of a run that never started holds its interpolations unresolved."""
    root = "${normbench.checkout:../shared/data}/cifar10-subset"
    record = load_record({**OLD_RECORD, "dataset": {"name": "cifar10", "root": root}, "logger": {"group": "a${b}"}})
    assert (record.dataset.root, record.logger.group) == (root, "a${b}")


def test_an_unknown_key_names_the_valid_ones() -> None:
    with pytest.raises(ConfigError, match=r"optimizer\.momentun: .*; valid keys: name, momentum, nesterov"):
        load_record({**OLD_RECORD, "optimizer": {"momentun": 0.9}})
