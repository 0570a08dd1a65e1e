"""Where presets find their data, whatever the current directory, and one check before a sweep.

A preset names its data as ``${oc.env:NORMBENCH_DATA,${normbench.checkout:../shared/data}}/<set>``:
the folder in ``$NORMBENCH_DATA``, else ``../shared/data`` beside the checkout, resolved against
this package's location (`from_checkout`), never against the directory normbench is started in.
A relative ``dataset.root`` is read against the directory normbench was started in, also where
``hydra.job.chdir=true`` runs the job inside its run directory (`anchor_root`, `started_in`), as
a sweep's check (in the launching process) reads it.
``NORMBENCH_DATA`` set but empty (``NORMBENCH_DATA=$DATA`` with ``$DATA`` unset) is not taken as
unset: OmegaConf's ``oc.env`` reads it as given, so the presets would read ``/<set>``; a root made
so that does not exist is one line naming the variable (`blank_env_error`), and ``normbench-data``
refuses it alike.

`check_sweep_data_roots` runs when a sweep starts (`normbench.cli.callbacks.DataRootCallback`, before
the sweeper makes the sweep directory): it composes every job as the basic sweeper will, and a
data root that does not exist fails the sweep there, in one line that names the root, how many
jobs read it and the key to set, instead of failing each job in turn. Data sets that make their
own files (``download``, a Hub data set, ``synthetic_*``) are not checked. The check runs on the
machine that launches the sweep (with ``hydra/launcher=slurm``, the login node: data on a file
system the compute nodes share is seen alike).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from normbench.base.errors import ConfigError

CHECKOUT = Path(__file__).resolve().parents[2]
"""The folder that holds ``normbench/`` (and ``conf/`` in a checkout)."""
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def from_checkout(relative: str) -> str:
    """``relative`` resolved against the checkout: ``../shared/data`` → ``<checkout>/../shared/data``
    normalized to an absolute path (the ``normbench.checkout`` resolver)."""
    return os.path.normpath(CHECKOUT / str(relative))


DATA_ENV = "NORMBENCH_DATA"


def blank_data_env() -> str | None:
    """``$NORMBENCH_DATA`` when it is set but blank (empty or spaces); None when unset or a folder."""
    value = os.environ.get(DATA_ENV)
    return value if value is not None and not value.strip() else None


MISSING_OUTCOME = "dataset.root is {root}, which does not exist"


def blank_env_error(root: str | Path, outcome: str = MISSING_OUTCOME) -> ConfigError | None:
    """The one line for a data root that a blank ``$NORMBENCH_DATA`` made (``/cifar10-subset``:
    the variable's value, a slash, one folder), ``outcome`` saying what came of it; None for any
    other root."""
    value, text = blank_data_env(), str(root)
    if value is None or not text.startswith(value + "/") or "/" in text[len(value) + 1 :]:
        return None
    leaf = text[len(value) + 1 :]
    return ConfigError(
        f"{DATA_ENV}={value!r} is set but empty, so {outcome.format(root=repr(text))}; set {DATA_ENV}="
        f"<the folder holding {leaf}/>, or unset it for the preset's folder beside the checkout"
    )


def register_resolvers() -> None:
    """``${normbench.checkout:<path>}`` for the config files (idempotent)."""
    if not OmegaConf.has_resolver("normbench.checkout"):
        OmegaConf.register_new_resolver("normbench.checkout", from_checkout)


def missing_root(dataset: Any) -> Path | None:
    """``dataset.root`` when it is set, does not exist and the data set would not make it."""
    root = dataset.get("root") if dataset is not None else None
    if root is None or dataset.get("download") or dataset.get("hub"):
        return None
    if str(dataset.get("name", "")).startswith("synthetic"):
        return None
    path = Path(str(root)).expanduser()
    return None if path.exists() else path


def started_in() -> Path:
    """The directory normbench was started in: Hydra's original working directory when the job
    runs inside its output directory (``hydra.job.chdir=true``), else the current one (also where
    Hydra's config is left over from an earlier job in this process, as in a test session)."""
    from hydra.core.hydra_config import HydraConfig

    here = Path.cwd()
    if HydraConfig.initialized():
        hc = HydraConfig.get()
        if hc.job.get("chdir") and Path(hc.runtime.output_dir).resolve() == here.resolve():
            return Path(hc.runtime.cwd)
    return here


def anchored(root: str) -> str:
    """``root`` with ``~`` expanded, a relative one made absolute against `started_in`."""
    path = Path(root).expanduser()
    return str(path if path.is_absolute() else started_in() / path)


def anchor_root(dataset: Any) -> None:
    """Set ``dataset.root`` (a data set's config) to `anchored` ``dataset.root``, so that the check and
    the loader read the folder the user named whether or not Hydra changed directory
    (``hydra.job.chdir=true``); a data set without a root is left as it is."""
    root = getattr(dataset, "root", None)
    if root and blank_env_error(str(root)) is None:  # a blank NORMBENCH_DATA's root is named as it is
        dataset.root = anchored(str(root))


def sweep_jobs(config: DictConfig) -> list[list[str]]:
    """Each job's overrides as the basic sweeper will make them (``hydra.sweeper.params`` and the
    command line); for another sweeper (Optuna samples its jobs) the command line's overrides only."""
    task = [str(o) for o in config.hydra.overrides.task]
    if OmegaConf.select(config, "hydra.sweeper._target_") != BASIC_SWEEPER:
        return [task]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = OmegaConf.select(config, "hydra.sweeper.params") or {}
    arguments = [f"{k}={v}" for k, v in params.items()] + task
    (jobs,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(arguments), None)
    return [list(job) for job in jobs]


def _job_dataset(config: DictConfig, overrides: list[str]) -> tuple[Any, str]:
    """The job's ``dataset`` node, composed as the launcher will compose it and resolved, and its
    ``root`` as written; (None, "") when it does not compose (Hydra reports that itself when it
    validates the sweep)."""
    from hydra.core.global_hydra import GlobalHydra

    try:
        job = GlobalHydra.instance().config_loader().load_sweep_config(config, overrides)
        node = job.dataset
        written = node._get_node("root")._value() if "root" in node else None
        return OmegaConf.to_container(node, resolve=True), str(written)
    except Exception:
        return None, ""


def check_sweep_data_roots(config: DictConfig) -> None:
    """Raise `ConfigError` when a job of the sweep would read a data root that does not exist."""
    from hydra.core.global_hydra import GlobalHydra

    if not GlobalHydra.instance().is_initialized() or "dataset" not in config:
        return
    jobs = sweep_jobs(config)
    readers: dict[Path, int] = {}
    from_env = False
    for overrides in jobs:
        dataset, written = _job_dataset(config, overrides)
        path = missing_root(dataset)
        if path is not None:
            readers[path] = readers.get(path, 0) + 1
            from_env = from_env or "NORMBENCH_DATA" in written
    if not readers:
        return
    if from_env and (blank := blank_env_error(next(iter(readers)))) is not None:
        raise blank
    roots = ", ".join(str(p) for p in readers)
    folders = ", ".join(f"{p.name}/" for p in readers)
    remedy = "pass dataset.root=<the data folder>"
    if from_env:
        remedy = f"set NORMBENCH_DATA=<the folder holding {folders}> or {remedy}"
    exist = "does not exist" if len(readers) == 1 else "do not exist"
    raise ConfigError(
        f"dataset.root={roots} {exist} ({sum(readers.values())} of the sweep's {len(jobs)} jobs read it; "
        f"no job was started); {remedy}"
    )
