"""Whole-config validation, before any data is loaded or any W&B run is created.

Two stages, each raising `ConfigError` with one line that names the key, the bad value and what
is allowed:

- `check_overrides` runs on the command line before Hydra runs anything: a config-group
  choice that does not exist (``norm=batchnorm``, ``hardware=tpu``), a key that the chosen group
  option does not have (``model.norm_position=pre`` on ``model=resnet20``: a sequence-model
  option on an image model), or a value of the wrong type. The config is composed once (the
  first job's, as Hydra will compose it); a key inside a swept group (``-m norm=gn,bn
  norm.groups=4``) is also checked against each other swept option, read from its own file on
  its schema (`option_node`), and so is the hint naming the options that have the key. Hydra
  itself composes every job of a sweep before it launches any (``validate_batch_is_legal``), so
  a sweep with a job that cannot compose never starts.
- `validate_config` runs on the composed config of each job: registered names (norm, model,
  dataset, optimizer, schedule, hardware device and precision, diagnostics), positive numbers,
  ``dataset.root``, and the norm inside the model: the model is built on the ``meta`` device with
  probe norms, then the real norm is built for each layer (a GroupNorm whose group count does not
  divide a layer's channels names that layer) and tested for batch statistics when the
  per-device batch holds one sample.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf, open_dict
from torch import nn

from normbench.errors import ConfigError
from normbench.norms.probes import uses_batch_statistics

HYDRA_FLAGS_WITHOUT_RUN = ("--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c", "--shell-completion", "-sc")
HYDRA_FLAGS_OTHER_CONFIG = ("--config-path", "-cp", "--config-dir", "-cd", "--config-name", "-cn")


FREE_FORM = ("diagnostics",)
"""Sections where ``+key=value`` may add a key that ``conf/`` does not have: the runner checks
what is there against its own registry (``diagnostics``: each diagnostic's dataclass). Anywhere
else an unknown key is refused, with ``+`` or without: it would be ignored."""

ADD_NOTE = f"+ adds keys only under {', '.join(FREE_FORM)}"


def shown_key(o: Any) -> str:
    """The override's key as written: ``+lrr``, ``++lr``, ``lr``."""
    return ("++" if o.is_force_add() else "+" if o.is_add() else "") + o.key_or_group


def _choices(conf_dir: Path, group: str) -> list[str]:
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def check_overrides(args: Sequence[str], conf_dir: str | Path) -> None:
    """Check the command line's overrides against ``conf/`` before Hydra runs anything."""
    conf_dir = Path(conf_dir)
    if any(a.split("=")[0] in HYDRA_FLAGS_WITHOUT_RUN + HYDRA_FLAGS_OTHER_CONFIG for a in args):
        return
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        parsed = OverridesParser.create().parse_overrides([a for a in args if not a.startswith("-")])
    except Exception:  # Hydra reports its own syntax errors
        return
    groups = {p.name for p in conf_dir.iterdir() if p.is_dir() and p.name != "hydra"}
    group_values: dict[str, list[str]] = {}
    value_overrides = []
    for o in parsed:
        key = o.key_or_group
        if key.startswith("hydra") or o.package is not None or o.is_delete():
            continue
        try:
            values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        except Exception:
            continue
        if key in groups:
            valid = _choices(conf_dir, key)
            for v in values:
                if v not in valid:
                    raise ConfigError(f"{key}={v} is not an option of {key}; valid choices: {', '.join(valid)}")
            group_values[key] = values
        elif key.partition(".")[0] not in FREE_FORM:
            value_overrides.append(o)  # ``+key`` and ``++key`` too: an unknown key is refused
    if value_overrides:
        _check_keys_and_types(conf_dir, groups, group_values, value_overrides)


def _check_keys_and_types(
    conf_dir: Path, groups: set[str], group_values: dict[str, list[str]], overrides: list[Any]
) -> None:
    """Each value override against the first job's composed config (composed once, as Hydra will
    compose it) and, for a key inside a swept group, against each other swept option's node."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException

    first = [f"{g}={values[0]}" for g, values in group_values.items()]
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            cfg = compose("config", overrides=first, return_hydra_config=True)
    except HydraException:
        return  # Hydra will say what is wrong with the composition itself
    finally:
        GlobalHydra.instance().clear()
    chosen = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    for o in overrides:
        key = o.key_or_group
        head, _, rest = key.partition(".")
        if head not in groups or not rest:
            _check_key(cfg, key, o)
            continue
        for i, option in enumerate(group_values.get(head) or [chosen[head]]):
            node = cfg[head] if i == 0 else option_node(conf_dir, head, option)
            _check_key(node, rest, o, conf_dir=conf_dir, group=head, option=option)


def option_node(conf_dir: Path, group: str, option: str) -> DictConfig:
    """``conf/<group>/<option>.yaml`` on the schema its defaults name, as Hydra places it under
    ``<group>`` (without composing the whole config)."""
    from hydra.core.config_store import ConfigStore
    from hydra.errors import HydraException

    raw = OmegaConf.load(conf_dir / group / f"{option}.yaml")
    assert isinstance(raw, DictConfig)
    node: DictConfig = OmegaConf.create({})
    for entry in raw.pop("defaults", None) or []:
        for target, name in entry.items() if isinstance(entry, DictConfig) else []:
            path = f"{target.split('@')[0].lstrip('/')}/{name}.yaml"  # /schema/norm@_here_: bn
            if path.startswith("schema/"):
                with contextlib.suppress(HydraException):  # schema not stored: the file alone
                    node = OmegaConf.structured(ConfigStore.instance().load(path).node)
    return OmegaConf.merge(node, raw)  # type: ignore[return-value]


def _check_key(
    node: DictConfig, path: str, o: Any, *, conf_dir: Path | None = None, group: str = "", option: str = ""
) -> None:
    """``path`` (the override's key below ``node``) exists in ``node`` and takes each value."""
    key = shown_key(o)
    parent_key, _, leaf = path.rpartition(".")
    parent = OmegaConf.select(node, parent_key) if parent_key else node
    keys = list(parent) if isinstance(parent, DictConfig) else []
    if leaf in keys and o.is_add():
        raise ConfigError(f"{key} adds a key, but {o.key_or_group} exists; drop the + to set it")
    if leaf not in keys:
        close = difflib.get_close_matches(leaf, keys, n=1)
        prefix = f"{o.key_or_group.rpartition('.')[0]}." if "." in o.key_or_group else ""
        hint = f"; did you mean {prefix}{close[0]}? " if close else "; "
        adds = f" ({ADD_NOTE})" if o.is_add() or o.is_force_add() else ""
        if conf_dir is None:
            raise ConfigError(f"{key} is not a config key{adds}{hint}valid keys here: {', '.join(keys)}")
        others = [
            other
            for other in _choices(conf_dir, group)
            if other != option and OmegaConf.select(option_node(conf_dir, group, other), path) is not None
        ]
        where = f"; it is an option of {group}={','.join(others)}; " if others else hint
        raise ConfigError(
            f"{key} is not an option of {group}={option}{adds}{where}{group}={option} takes: "
            f"{', '.join(keys) or 'no such keys'}"
        )
    values = list(o.sweep_iterator()) if o.is_sweep_override() else [o.value()]
    for value in values:
        trial = OmegaConf.create(node)  # typed copy (keeps the schema's node types)
        try:
            OmegaConf.update(trial, path, value, merge=True)
        except Exception as e:
            reason = _one_line(str(e).splitlines()[0])
            raise ConfigError(f"{key}={value!r} is not allowed: {reason}") from None


# ---------------------------------------------------------------------------------------------
# The composed config


def _require(cond: bool, key: str, value: Any, allowed: str) -> None:
    if not cond:
        raise ConfigError(f"{key}={value} is not allowed; {key} must be {allowed}")


def _check_numbers(cfg: DictConfig) -> None:
    _require(cfg.lr > 0, "lr", cfg.lr, "> 0")
    _require(math.isfinite(cfg.lr), "lr", cfg.lr, "finite")
    _require(cfg.batch_size > 0, "batch_size", cfg.batch_size, "a positive integer")
    _require(cfg.eval_batch_size > 0, "eval_batch_size", cfg.eval_batch_size, "a positive integer")
    _require(cfg.weight_decay >= 0, "weight_decay", cfg.weight_decay, ">= 0")
    _require(math.isfinite(cfg.weight_decay), "weight_decay", cfg.weight_decay, "finite")
    if cfg.max_steps is None:
        _require(cfg.epochs > 0, "epochs", cfg.epochs, "a positive integer (or set max_steps)")
    else:
        _require(cfg.max_steps > 0, "max_steps", cfg.max_steps, "a positive integer (or null)")
    _require(cfg.eval_every_epochs > 0, "eval_every_epochs", cfg.eval_every_epochs, "a positive integer")
    _require(
        cfg.logger.log_every_n_steps > 0,
        "logger.log_every_n_steps",
        cfg.logger.log_every_n_steps,
        "a positive integer",
    )
    ckpt = cfg.get("checkpoint")
    if ckpt is not None:
        _require(ckpt.every_n_steps >= 0, "checkpoint.every_n_steps", ckpt.every_n_steps, ">= 0 (0: epoch ends only)")
    div = cfg.get("divergence")
    if div is not None:
        factor = div.loss_factor
        _require(factor == 0 or factor > 1, "divergence.loss_factor", factor, "> 1 (or 0: non-finite loss only)")


def _check_name(key: str, name: Any, valid: Sequence[str]) -> None:
    if name not in valid:
        raise ConfigError(f"{key}={name!r} is not registered; valid choices: {', '.join(valid)}")


def _check_names(cfg: DictConfig) -> None:
    from normbench import hardware
    from normbench.diagnostics import list_diagnostics
    from normbench.models import list_models
    from normbench.norms import list_norms
    from normbench.optim import OPTIMIZERS, SCHEDULES
    from normbench.tasks import list_datasets

    _check_name("norm.name", cfg.norm.name, list_norms())
    _check_name("model.name", cfg.model.name, list_models())
    _check_name("dataset.name", cfg.dataset.name, list_datasets())
    _check_name("optimizer.name", cfg.optimizer.name, OPTIMIZERS)
    _check_name("schedule.name", cfg.schedule.name, SCHEDULES)
    _check_name("hardware.precision", cfg.hardware.precision, hardware.PRECISIONS)
    hardware.resolve_device(cfg.hardware)
    for name in cfg.diagnostics or {}:
        _check_name("diagnostics", name, list_diagnostics())


def _check_dataset_root(cfg: DictConfig) -> None:
    """``dataset.root`` must be a directory, unless the data set creates it (download, synthetic)."""
    root = cfg.dataset.get("root")
    if root is None:
        return
    path = Path(str(root)).expanduser()
    if path.exists() and not path.is_dir():
        raise ConfigError(f"dataset.root={str(path)!r} is a file, not a directory; pass the folder that holds the data")
    creates = bool(cfg.dataset.get("download", False)) or str(cfg.dataset.name).startswith("synthetic")
    if not path.exists() and not creates and not cfg.dataset.get("hub"):
        if "hub" in cfg.dataset:  # a translation data set: local text files or a Hub data set
            remedies = "dataset.hub=<Hub data set> (needs network), or dataset=synthetic_translation"
        else:
            remedies = "dataset.download=true (needs network), or dataset=synthetic_images"
        raise ConfigError(
            f"dataset.root={str(path)!r} is not a directory (it does not exist); pass dataset.root=<the data "
            f"folder>, {remedies} for offline runs"
        )


class _NormProbe(nn.Module):
    """Stands where a norm goes while the model is probed; remembers what it was built with."""

    def __init__(self, num_features: int, layout: str = "NCHW") -> None:
        super().__init__()
        self.num_features = num_features
        self.layout = layout


def per_device_batch(batch_size: int) -> int:
    return int(batch_size) // max(int(os.environ.get("WORLD_SIZE", "1")), 1)


def _per_sample_norms() -> str:
    from normbench.norms import list_norms, norm_factory

    names = []
    for name in list_norms():
        with contextlib.suppress(Exception):
            if not uses_batch_statistics(norm_factory(name), 8, "NCHW"):
                names.append(name)
    return ", ".join(names)


def check_norm_in_model(cfg: DictConfig, task_kwargs: Mapping[str, Any] | None = None) -> None:
    """Build the model on ``meta`` with probe norms, then build the real norm for each layer.

    A model that needs the data set's sizes (``task_kwargs``) to be built is skipped when they are
    not given; the runner calls this again with them once the data set is loaded."""
    from normbench.models import build_model
    from normbench.norms import norm_factory

    try:
        with torch.device("meta"):
            model = build_model(cfg.model, _NormProbe, **dict(task_kwargs or {}))
    except ConfigError:
        raise
    except Exception:  # needs sizes known only from the data: checked when the model is built
        return
    factory = norm_factory(cfg.norm)
    seen: set[tuple[int, str]] = set()
    for name, module in model.named_modules():
        if not isinstance(module, _NormProbe) or (module.num_features, module.layout) in seen:
            continue
        seen.add((module.num_features, module.layout))
        try:
            factory(module.num_features, module.layout)
        except ConfigError as e:
            raise ConfigError(f"layer {name} ({module.num_features} channels): {e}") from None
    if seen and per_device_batch(cfg.batch_size) == 1:
        num_features, layout = min(seen)
        if uses_batch_statistics(factory, num_features, layout):
            raise ConfigError(
                f"norm={cfg.norm.name} normalizes with batch statistics but batch_size={cfg.batch_size} gives one "
                f"sample per device; use batch_size >= 2 per device, or a per-sample norm ({_per_sample_norms()})"
            )


def _check_section_keys(cfg: DictConfig) -> None:
    """``norm``, ``model`` and ``dataset`` hold only their schema's keys: a key added some other way
    than the command line (a config file, the Python API) would reach the builder as an unexpected
    keyword (a TypeError) or be ignored."""
    from normbench.models import MODELS
    from normbench.norms import NORMS
    from normbench.tasks import DATASETS

    for section, registry in (("norm", NORMS), ("model", MODELS), ("dataset", DATASETS)):
        node, name = cfg[section], cfg[section].name
        schema_cls = registry.entry(name).config
        if schema_cls is None:
            continue
        valid = [f.name for f in dataclasses.fields(schema_cls)]
        unknown = [k for k in node if k not in valid and k != "name"]
        if unknown:
            close = difflib.get_close_matches(str(unknown[0]), valid, n=1)
            hint = f"; did you mean {section}.{close[0]}? " if close else "; "
            raise ConfigError(
                f"{section}.{unknown[0]} is not an option of {section}={name}{hint}"
                f"{section}={name} takes: {', '.join(v for v in valid if v != 'name')}"
            )


def dataset_input_kind(name: str) -> str | None:
    """The input kind (``image``, ``sequence``) of the task that data set ``name``'s builder makes,
    read from the task class defined beside the builder (its ``kind``) without loading any data;
    None when that module does not name exactly one kind (then the runner checks after loading)."""
    import sys

    from normbench.tasks import DATASETS

    module = sys.modules[DATASETS.get(name).__module__]
    classes = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__]
    kinds = {c.kind for c in classes if isinstance(getattr(c, "kind", None), str)}
    return kinds.pop() if len(kinds) == 1 else None


def _check_model_takes_dataset(cfg: DictConfig) -> None:
    """A model for images on a data set of sentences (or the other way round), before any data is read."""
    from normbench.models import model_input_kind

    takes, gives = model_input_kind(cfg.model.name), dataset_input_kind(cfg.dataset.name)
    if gives is not None and takes != gives:
        raise ConfigError(
            f"model={cfg.model.name} takes {takes} inputs but dataset={cfg.dataset.name} gives {gives} inputs; "
            f"choose a model and a data set of one kind"
        )


def validate_config(cfg: DictConfig) -> None:
    """Every check that needs no data: raise `ConfigError` on the first problem."""
    _check_numbers(cfg)
    _check_names(cfg)
    _check_section_keys(cfg)
    _check_model_takes_dataset(cfg)
    _check_dataset_root(cfg)
    check_norm_in_model(cfg)
