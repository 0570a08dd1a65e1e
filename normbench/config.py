"""Typed config schemas, stored in Hydra's ConfigStore, and the boundary where a composed config
becomes them.

The top-level `RunConfig` types the run-level keys down to the leaves: each group as its registry's
base config (a group entry is a subclass of it: `BatchNormConfig` of `NormConfig`), the hardware and
logger as their dataclasses, the diagnostics as their typed configs. Hydra composes `RunSchema`
(``schema/run``): the same, with the diagnostics still loose, since each diagnostic's keys are its
own dataclass's and ``conf/diagnostics/*.yaml`` cannot name them; `parse` types them. Each group's
entries carry their own schema through their registry (``conf/<group>/<name>.yaml`` lists
``/schema/<group>@_here_: <name>`` in its defaults). Unknown keys and wrong types fail when Hydra
composes the config; a value the type allows but the run cannot use fails in the dataclass that
owns it (``__post_init__``).

`parse` is the boundary: the composed ``DictConfig`` in, the typed `RunConfig` out (each group as
its registered dataclass, the diagnostics typed, the probe direction chosen). Nothing below the
runner sees a ``DictConfig`` or the whole config: each room takes its own dataclass. `as_recorded`
is the config as composed (plain python, the probe direction written in), which checkpoints and
the logged config store.

`objective` is the one number a sweeper optimizes: ``optimized_metric`` of the run's final
metrics. Storing the schemas in Hydra's ConfigStore is the CLI's (`normbench.cli.store`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING, DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, MissingMandatoryValue

from normbench.base.errors import ConfigError, require, require_seed
from normbench.base.output import warn
from normbench.data.registry import DatasetConfig
from normbench.diagnostics import diagnostics_config
from normbench.diagnostics.probe import choose_probe_directions
from normbench.diagnostics.registry import CadenceConfig
from normbench.divergence import DivergenceConfig
from normbench.models.registry import ModelConfig
from normbench.norms.registry import NormConfig
from normbench.optim import OptimizerConfig, ScheduleConfig
from normbench.placement.hardware import HardwareConfig
from normbench.resume.checkpoint import CheckpointConfig
from normbench.sinks.logger_config import LoggerConfig


@dataclass
class RunConfig:
    model: ModelConfig = MISSING
    """The model group's entry: its registered config, a subclass of `ModelConfig`."""
    dataset: DatasetConfig = MISSING
    norm: NormConfig = MISSING
    hardware: HardwareConfig = MISSING
    logger: LoggerConfig = MISSING
    diagnostics: dict[str, CadenceConfig] = field(default_factory=dict)
    """Each named diagnostic's typed settings (`normbench.diagnostics.diagnostics_config`), its
    probe direction chosen (`choose_probe_directions`)."""
    seed: int = 0
    epochs: int = 10
    max_steps: int | None = None
    """Stop after this many optimizer steps (overrides ``epochs`` when set)."""
    batch_size: int = 128
    eval_batch_size: int = 500
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    lr: float = 0.1
    weight_decay: float = 5e-4
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    eval_every_epochs: int = 1
    throughput_warmup_steps: int = 3
    """Steps at the start of the run left out of ``perf/*`` (allocator, autotuning, compile)."""
    resume: bool = False
    """Continue from the last checkpoint in the run directory (``hydra.run.dir=<that dir>``)."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    divergence: DivergenceConfig = field(default_factory=DivergenceConfig)
    optimized_metric: str | None = None
    """The final metric the task function returns, for sweepers that optimize (Optuna); None:
    the task's (`DEFAULT_METRICS`: ``val/acc`` for image classification, ``val/bleu`` for translation)."""

    def __post_init__(self) -> None:
        require(self.lr > 0, "lr", self.lr, "> 0")
        require(math.isfinite(self.lr), "lr", self.lr, "finite")
        require(self.batch_size > 0, "batch_size", self.batch_size, "a positive integer")
        require(self.eval_batch_size > 0, "eval_batch_size", self.eval_batch_size, "a positive integer")
        require(self.weight_decay >= 0, "weight_decay", self.weight_decay, ">= 0")
        require(math.isfinite(self.weight_decay), "weight_decay", self.weight_decay, "finite")
        if self.max_steps is None:
            require(self.epochs > 0, "epochs", self.epochs, "a positive integer (or set max_steps)")
        else:
            require(self.max_steps > 0, "max_steps", self.max_steps, "a positive integer (or null)")
        require(self.eval_every_epochs > 0, "eval_every_epochs", self.eval_every_epochs, "a positive integer")
        require(self.throughput_warmup_steps >= 0, "throughput_warmup_steps", self.throughput_warmup_steps, ">= 0")
        require_seed("seed", self.seed)


@dataclass
class RunSchema(RunConfig):
    """`RunConfig` as Hydra composes it (``schema/run``, stored by `normbench.cli.store`), the Hydra
    boundary's: the same keys and types, but ``diagnostics`` loose (name -> its settings), since
    each diagnostic's keys are its own dataclass's; `parse` types them into a `RunConfig`."""

    diagnostics: dict[str, Any] = field(default_factory=dict)  # type: ignore[assignment]


def parse(cfg: DictConfig) -> RunConfig:
    """The composed config as typed objects: `RunConfig` with each group's registered dataclass,
    the diagnostics typed (`diagnostics_config`) and their probe direction chosen
    (`choose_probe_directions`). A bad value is a one-line `ConfigError`, and so is a value that
    cannot be resolved (``seed=${oc.env:NOPE}``, ``lr=${lr}``: `unresolved`)."""
    from normbench.base.registry import check_keys
    from normbench.models import MODELS
    from normbench.norms import NORMS
    from normbench.norms.registry import keys_under
    from normbench.tasks import DATASETS

    try:
        diagnostics = typed_diagnostics(cfg.get("diagnostics"), cfg.optimizer.name, cfg.optimizer.momentum)
        for section, registry in (("norm", NORMS), ("model", MODELS), ("dataset", DATASETS)):
            name = cfg[section].name
            if name not in registry:
                valid = ", ".join(registry.names())
                raise ConfigError(f"{section}.name={name!r} is not registered; valid choices: {valid}")
            check_keys(registry.entry(name), cfg[section], section)  # a key added some other way than the command line
        for key, node in cfg.model.items():  # a norm config of its own (model.encoder_norm): errors name its keys
            if isinstance(node, DictConfig) and issubclass(OmegaConf.get_type(node) or object, NormConfig):
                with keys_under(f"model.{key}"):
                    OmegaConf.to_object(node)
        composed = OmegaConf.to_object(cfg)
    except (InterpolationResolutionError, MissingMandatoryValue) as e:
        raise unresolved(cfg, e) from None
    if not isinstance(composed, RunSchema):
        raise TypeError(f"parse takes the composed normbench config (RunSchema), not {type(composed).__name__}")
    return RunConfig(**{**vars(composed), "diagnostics": diagnostics})


def typed_diagnostics(settings: Any, optimizer_name: str, momentum: float) -> dict[str, CadenceConfig]:
    """The diagnostics' settings (composed or recorded) typed, each probe's ``direction: auto``
    chosen for the run's optimizer first (`choose_probe_directions`), so that each typed config is
    made once, as the run uses it."""
    if OmegaConf.is_config(settings):
        settings = OmegaConf.to_container(settings, resolve=True)
    return diagnostics_config(choose_probe_directions(settings, optimizer_name, momentum))


def unresolved(cfg: DictConfig, e: InterpolationResolutionError | MissingMandatoryValue) -> ConfigError:
    """One line for a value that cannot be resolved: an interpolation to a missing key or
    environment variable, one that refers to itself (``lr=${lr}``), or a value left ``???``."""
    key = str(e.full_key)
    raw: Any = OmegaConf.to_container(cfg, resolve=False)
    for part in re.findall(r"[^.\[\]]+", key):
        raw = raw[int(part)] if isinstance(raw, list) else raw.get(part) if isinstance(raw, dict) else None
    if isinstance(e, MissingMandatoryValue):
        return ConfigError(f"{key}=??? is not allowed; {key} must be given a value")
    reason = " ".join(str(e).splitlines()[0].split())
    return ConfigError(f"{key}={raw} is not allowed; {key} must resolve to a value ({reason})")


def as_recorded(cfg: DictConfig, config: RunConfig) -> dict[str, Any]:
    """The config as composed, in plain python (what checkpoints are checked against and the
    logged config holds), with each probe diagnostic's chosen direction written in."""
    record: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)  # type: ignore[assignment]
    for name, typed in config.diagnostics.items():
        entry = (record.get("diagnostics") or {}).get(name)
        if isinstance(entry, dict) and hasattr(typed, "direction"):
            entry["direction"] = typed.direction
    return record


DEFAULT_METRICS = {"image": "val/acc", "sequence": "val/bleu"}
"""The metric to optimize by the kind of input the model takes (the task's kind)."""


TASK_METRICS = {
    "image": ("val/acc", "val/loss", "train/acc", "train/loss", "perf/samples_per_s"),
    "sequence": ("val/bleu", "test/bleu", "val/loss", "train/loss", "perf/tokens_per_s"),
}
"""The final metrics every finished run of a task's kind reports (a diagnostic's keys besides)."""


def check_optimized_metric(metric: str | None, model: str) -> None:
    """``optimized_metric`` is a final metric that model ``model``'s task reports (or a diagnostic's
    key, ``<diagnostic>/…``); else a `ConfigError` naming the valid ones, before any trial trains."""
    from normbench.diagnostics.registry import list_diagnostics
    from normbench.models import model_input_kind

    if metric is None:
        return
    valid = TASK_METRICS[model_input_kind(model)]
    if metric not in valid and metric.split("/", 1)[0] not in list_diagnostics():
        raise ConfigError(f"optimized_metric={metric} is not a metric of {model}'s runs; valid choices: "
                          f"{', '.join(valid)} (or a diagnostic's key, <diagnostic>/...)")  # fmt: skip


def optimized_metric(metric: str | None, model: str) -> str:
    """``metric`` (the config's ``optimized_metric``), or the default of model ``model``'s task."""
    from normbench.models import model_input_kind

    return metric or DEFAULT_METRICS[model_input_kind(model)]


def objective(metric: str | None, model: str, result: Mapping[str, Any], optimizing: bool = True) -> float | None:
    """The number a sweeper optimizes: ``optimized_metric`` of a finished run's final metrics.

    None (which Optuna records as a failed trial, and the basic sweeper ignores) for a run that
    did not finish (diverged, interrupted, failed) or a metric the run did not report (with a
    warning naming the ones it did, when a sweeper ``optimizing`` reads it: a single run or a grid
    sweep of a preset that reports no BLEU is not warned about a number nobody asked for); never NaN,
    which Optuna's sweeper cannot record."""
    if not isinstance(result, Mapping) or result.get("status") != "finished":
        return None
    name = optimized_metric(metric, model)
    value = result.get(name)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        reported = ", ".join(k for k, v in result.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
        if optimizing:
            warn(f"optimized_metric={name} is not among the run's final metrics ({reported}); the job returns None")
        return None
    return float(value)


RECORDED_GROUPS = ("norm", "model", "dataset")
"""The groups whose dataclass a record's ``name`` picks from its registry (they have no default)."""
RECORD_ONLY = {"": ("hydra",), "hardware": ("resolved",)}
"""Keys a record holds beside the config (by section; ``""``: the top level): what the run found
(``hardware.resolved``: device, world size, threads), written by the runner into the logged config,
and Hydra's choices and overrides that the W&B sink adds (``hydra``)."""


def load_record(record: Mapping[str, Any]) -> RunConfig:
    """A recorded run's config as the typed `RunConfig` it was made from: a run directory's
    ``config.yaml`` or the config logged to W&B (what `as_recorded` wrote), possibly by an older
    version with keys missing, which get their schema's defaults (``optimizer.momentum`` 0.9).

    Each of ``norm`` / ``model`` / ``dataset`` through its registry's dataclass (a model's own
    ``*_norm`` too), ``hardware`` and ``logger`` through theirs, the diagnostics typed with their
    recorded probe direction; `RECORD_ONLY` keys are left out. A record it cannot read (not a
    mapping, no ``norm``, an unknown name or key, a wrong type, a value out of range) is a
    one-line `ConfigError` saying so."""
    from omegaconf.errors import OmegaConfBaseException

    try:
        return _load_record(record)
    except ConfigError as e:
        raise ConfigError(f"a recorded run's config cannot be read: {str(e).splitlines()[0]}") from None
    except (OmegaConfBaseException, TypeError, ValueError) as e:
        reason = " ".join(str(e).splitlines()[0].split())
        raise ConfigError(f"a recorded run's config cannot be read ({type(e).__name__}: {reason})") from None


def _load_record(record: Mapping[str, Any]) -> RunConfig:
    from normbench.placement.hardware import HardwareConfig
    from normbench.sinks.logger_config import LoggerConfig

    if not isinstance(record, Mapping):
        raise ConfigError(f"a run's record is a mapping of its config keys, not {type(record).__name__}")
    record = _literal(record)
    if missing := [g for g in RECORDED_GROUPS if not record.get(g)]:
        raise ConfigError(f"it has no {', '.join(missing)} (is it a normbench run's config.yaml?)")
    sections = {"hardware": HardwareConfig, "logger": LoggerConfig}
    typed: dict[str, Any] = {g: _registered(g, record[g]) for g in RECORDED_GROUPS}
    for key, schema in sections.items():
        given = {k: v for k, v in (record.get(key) or {}).items() if k not in RECORD_ONLY.get(key, ())}
        typed[key] = _structured(schema, given, key)
    rest = {k: v for k, v in record.items() if k not in (*typed, "diagnostics", *RECORD_ONLY[""])}
    # the run-level keys over a skeleton of defaults (the record's own texts are typed already, and
    # OmegaConf would read a ``${`` in them as an interpolation a second time)
    skeleton = {key: type(value)(**_required(value)) for key, value in typed.items()}
    config = OmegaConf.to_object(_merged(OmegaConf.structured(RunConfig(**skeleton, diagnostics={})), rest))
    assert isinstance(config, RunConfig)
    for key, value in typed.items():  # as their registries typed them
        setattr(config, key, value)
    config.diagnostics = typed_diagnostics(record.get("diagnostics"), config.optimizer.name, config.optimizer.momentum)
    return config


def _required(config: Any) -> dict[str, Any]:
    """The values of ``config``'s fields that have no default (a registered config's ``name``)."""
    import dataclasses

    none = (dataclasses.MISSING, MISSING)
    fields = dataclasses.fields(config)
    return {f.name: getattr(config, f.name) for f in fields if f.default in none and f.default_factory in none}


def _registered(group: str, spec: Any) -> Any:
    """``spec`` (a mapping with ``name``, or a bare name) as its registry's dataclass; a model's
    own norm configs (``model.encoder_norm``) as the norms' dataclasses."""
    import dataclasses

    from normbench.models import MODELS
    from normbench.norms import NORMS
    from normbench.norms.registry import keys_under
    from normbench.tasks import DATASETS

    typed = {"norm": NORMS, "model": MODELS, "dataset": DATASETS}[group].typed(spec)
    if group != "model":
        return typed
    own = {}
    for f in dataclasses.fields(typed):
        spec = getattr(typed, f.name)
        if f.name.endswith("_norm") and spec is not None:
            with keys_under(f"model.{f.name}"):
                own[f.name] = NORMS.typed(spec)
    return dataclasses.replace(typed, **own) if own else typed


def _structured(schema: type, given: Mapping[str, Any], where: str) -> Any:
    """``given`` over ``schema``'s defaults, as the dataclass; a key it lacks names the valid ones."""
    import dataclasses

    valid = [f.name for f in dataclasses.fields(schema)]
    if unknown := [k for k in given if k not in valid]:
        raise ConfigError(f"{where}.{unknown[0]} is not a key of {where}; valid keys: {', '.join(valid)}")
    return OmegaConf.to_object(_merged(OmegaConf.structured(schema), given, f"{where}."))


def _merged(base: DictConfig, given: Mapping[str, Any], prefix: str = "") -> DictConfig:
    """``given`` merged over ``base``: a key the schema lacks or a value of the wrong type is a
    one-line `ConfigError` naming the key."""
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    try:
        return OmegaConf.merge(base, dict(given))  # type: ignore[return-value]
    except OmegaConfBaseException as e:
        full_key = str(getattr(e, "full_key", "") or "?")
        reason = " ".join(str(getattr(e, "msg", e)).splitlines()[0].split())
        owner = OmegaConf.select(base, full_key.rpartition(".")[0]) if "." in full_key else base
        if isinstance(e, ConfigKeyError) and isinstance(owner, DictConfig):
            reason += f"; valid keys: {', '.join(str(k) for k in owner)}"
        raise ConfigError(f"{prefix}{full_key}: {reason}") from None


def _literal(value: Any) -> Any:
    """``value`` with every ``${`` escaped: a record is data, and a text that looks like an
    interpolation (Hydra's ``.hydra/config.yaml`` of a run that never started) stays that text."""
    if isinstance(value, str):
        return value.replace("${", "\\${")
    if isinstance(value, Mapping):
        return {k: _literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_literal(v) for v in value]
    return value


def comparable_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` as `load_record` reads it, in plain python: the form in which a checkpoint's
    record and the run's are compared (`normbench.resume.checkpoint.record_difference`), so
    that a key an older version did not write compares at its schema's default."""
    import dataclasses

    return dataclasses.asdict(load_record(record))
