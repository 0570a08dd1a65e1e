"""The checks that need more than one section of the config and no data: model, norm and data set
together, before any data is loaded or any W&B run is created.

Each value is checked by the dataclass that owns it when the config is parsed
(`normbench.config.parse`); what is left here is the combination, raising `ConfigError` with one
line that names the keys:

- the model takes the kind of input the data set gives (both registries declare it);
- ``dataset.root`` is a directory, unless the data set creates it;
- the model's positions hold the longest sentence the data set keeps (``model.max_positions`` >=
  ``dataset.max_positions``), so that no batch indexes past the position table mid-run;
- the norm compiles exactly where ``hardware.compile`` asks for it (a norm's ``COMPILE_ISSUE``);
- the norm inside the model: the model is built with probe norms and its initialisation skipped
  (`_SkipInit`), then the real norm is built for each layer (a GroupNorm whose group count does not divide a layer's
  channels names that layer) and tested for batch statistics when the per-device batch holds one
  sample.

The run's norm factory is built once, here (`RunNorm`): the checks and the model take it. The model
is probed once: before the data where it can be built without the data's sizes, else (a model that
needs its vocabulary) by the runner once the data set is loaded. The sizes the data gives (classes,
vocabulary) shape a model's input and output layers, never the norms between them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from normbench.base.errors import ConfigError
from normbench.data.registry import DatasetConfig
from normbench.data.roots import anchor_root, blank_env_error, missing_root
from normbench.models import ModelConfig, build_model, model_input_kind
from normbench.norms import NormConfig, list_norms, norm_factory
from normbench.norms.probes import uses_batch_statistics
from normbench.norms.registry import NormLayer
from normbench.tasks import dataset_input_kind


class RunNorm(NamedTuple):
    """The run's norm factory, built once (`check_before_data`), and whether it has been checked
    in the model (False: the model needs the data's sizes to be built; `check_norm_in_model` then)."""

    layer: NormLayer
    checked: bool


def check_before_data(
    model: ModelConfig, norm: NormConfig, dataset: DatasetConfig, batch_size: int, compile: bool = False
) -> RunNorm:
    """Every check of the combination that needs no data: raise `ConfigError` on the first problem.
    The run's norm factory, as checked. Each section is asked once for what the checks need (its
    root, its positions, its factory, the model built with probe norms); the checks take the values."""
    check_model_takes_dataset(model.name, dataset.name)
    anchor_root(dataset)  # a relative root read where normbench started, not in the run dir (hydra.job.chdir)
    check_dataset_root(dataclasses.asdict(dataset))
    longest = dataset.longest_sequence()
    check_norm_compiles(model, norm, compile)
    layer = norm_factory(norm)
    checked = check_norm_in_model(partial(build_model, model), layer, norm.name, batch_size)
    check_positions(model.positions(), longest)
    return RunNorm(layer, checked)


def check_norm_compiles(model: ModelConfig, norm: NormConfig, compile: bool) -> None:
    """``hardware.compile=true`` with a norm whose compiled gradients are known to differ from
    eager's (`Norm.COMPILE_ISSUE`): the run's ``norm`` or a model's own per-stack norm
    (``model.encoder_norm``, any ``model.*_norm``) is refused with the reason."""
    from normbench.norms import NORMS
    from normbench.norms.registry import norm_config

    if not compile:
        return
    for name in [norm.name, *(norm_config(spec).name for spec in model.stack_norms())]:
        issue = getattr(NORMS.get(name), "COMPILE_ISSUE", "")
        if issue:
            raise ConfigError(f"hardware.compile=true with norm={name}: {issue}; use hardware.compile=false")


def check_model_takes_dataset(model: str, dataset: str) -> None:
    """A model for images on a data set of sentences (or the other way round), before any data is read."""
    takes, gives = model_input_kind(model), dataset_input_kind(dataset)
    if takes != gives:
        raise ConfigError(
            f"model={model} takes {takes} inputs but dataset={dataset} gives {gives} inputs; "
            f"choose a model and a data set of one kind"
        )


def check_dataset_root(keys: Mapping[str, Any]) -> None:
    """``dataset.root`` (``keys``: the data set's settings) must be a directory, unless the data set
    creates it (download, synthetic, a Hub data set: `normbench.data.roots.missing_root`, which a
    sweep's check uses too)."""
    path = missing_root(keys)
    root = keys.get("root")  # a data set without files has no root
    if root is not None and Path(str(root)).expanduser().is_file():
        raise ConfigError(
            f"dataset.root={str(Path(str(root)).expanduser())!r} is a file, not a directory; "
            "pass the folder that holds the data"
        )
    if path is not None and (blank := blank_env_error(path)) is not None:  # NORMBENCH_DATA='': /cifar10-subset
        raise blank
    if path is not None:
        if "hub" in keys:  # a translation data set: local text files or a Hub data set
            remedies = "dataset.hub=<Hub data set> (needs network), or dataset=synthetic_translation"
        else:
            remedies = "dataset.download=true (needs network), or dataset=synthetic_images"
        raise ConfigError(
            f"dataset.root={str(path)!r} is not a directory (it does not exist); pass dataset.root=<the data "
            f"folder>, {remedies} for offline runs"
        )


def check_positions(positions: int | None, longest: int | None) -> None:
    """A sequence model with fewer positions (``model.positions()``) than the data set's sentences
    take (``dataset.longest_sequence()``: source + EOS, BOS + target, up to ``dataset.max_positions``
    each) would fail at the first long batch."""
    if positions is not None and longest is not None and positions < longest:
        raise ConfigError(
            f"model.max_positions={positions} is not allowed; model.max_positions must be >= dataset.max_positions="
            f"{longest} (the longest sentence the data keeps, EOS included; dataset.max_positions={positions} keeps "
            "shorter ones)"
        )


class _NormProbe(nn.Module):
    """Stands where a norm goes while the model is probed; remembers what it was built with."""

    def __init__(self, num_features: int, layout: str = "NCHW") -> None:
        super().__init__()
        self.num_features = num_features
        self.layout = layout


_RANDOM_FILLS = frozenset(
    {"normal_", "uniform_", "random_", "bernoulli_", "exponential_", "cauchy_", "log_normal_", "geometric_"}
)


class _SkipInit(TorchFunctionMode):
    """While the probe model is built: every ``torch.nn.init`` function and every in-place random
    fill returns its tensor untouched, so a big model's probe costs its allocation (pages of
    ``torch.empty`` that nothing writes) and no sampling.

    The probe is built on the CPU, not on ``meta``: meta kernels of many ops (``normal_``,
    ``arange``, ...) are Python references whose wrapper imports ``torch._dynamo`` (~3 s), which a
    run that does not compile must not pay. The probe runs inside ``fork_rng``: whatever draws it
    makes leave the run's generator as it was."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__module__", None) == "torch.nn.init":
            return args[0] if args else kwargs["tensor"]
        if getattr(func, "__name__", None) in _RANDOM_FILLS:
            return args[0]
        return func(*args, **kwargs)


def per_device_batch(batch_size: int) -> int:
    return int(batch_size) // max(int(os.environ.get("WORLD_SIZE", "1")), 1)


def _per_sample_norms() -> str:
    names = []
    for name in list_norms():
        with contextlib.suppress(Exception):
            if not uses_batch_statistics(norm_factory(name), 8, "NCHW"):
                names.append(name)
    return ", ".join(names)


def check_norm_in_model(
    build: Callable[..., nn.Module], factory: NormLayer, norm_name: str, batch_size: int
) -> bool:
    """Build the model (``build(norm_layer, **sizes)``: `build_model` with the model's config, and the
    data's sizes where it needs them) with probe norms and no initialisation (`_SkipInit`), then build
    the real norm (``factory``, the run's norm ``norm_name``) for each layer; True when done.

    A model that needs the data set's sizes to be built, and is not given them, is skipped (False);
    the runner calls this again with them once the data set is loaded."""
    try:
        with torch.random.fork_rng(devices=[]), torch.device("cpu"), _SkipInit():
            probed = build(_NormProbe)
    except ConfigError:
        raise
    except Exception:  # needs sizes known only from the data: checked when the model is built
        return False
    seen: set[tuple[int, str]] = set()
    for name, module in probed.named_modules():
        if not isinstance(module, _NormProbe) or (module.num_features, module.layout) in seen:
            continue
        seen.add((module.num_features, module.layout))
        try:
            factory(module.num_features, module.layout)
        except ConfigError as e:
            raise ConfigError(f"layer {name} ({module.num_features} channels): {e}") from None
    if seen and per_device_batch(batch_size) == 1:
        num_features, layout = min(seen)
        if uses_batch_statistics(factory, num_features, layout):
            raise ConfigError(
                f"norm={norm_name} normalizes with batch statistics but batch_size={batch_size} gives one "
                f"sample per device; use batch_size >= 2 per device, or a per-sample norm ({_per_sample_norms()})"
            )
    return True
