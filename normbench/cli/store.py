"""The schemas in Hydra's ConfigStore, and the resolvers the config files use:
``${normbench.checkout:…}`` (data roots independent of the current directory, `normbench.data.roots`),
``${normbench.help:}`` (``normbench --help``, `normbench.cli.help`) and ``${normbench.norms:…}``
(the registered norms, for a preset that sweeps them all: `norm_list`).

A registered norm without a file ``conf/norm/<name>.yaml`` (a plugin's: `normbench.base.plugins`)
gets its option ``norm/<name>`` stored here, its schema's defaults, so ``norm=<name>`` is an option
like any other."""

from __future__ import annotations

from pathlib import Path

from normbench.base import layout

NORM_KINDS = ("all", "causal", "mixing")
"""``${normbench.norms:<kind>}``: every registered norm, those that never mix positions in training
(a decoder may use them), those that do (`normbench.norms.probes.mixes_positions`)."""


def config_dir() -> str:
    """``conf/`` beside the package in a checkout; the copy packed into the wheel otherwise."""
    found = layout.conf_dir()
    if found is None:
        raise FileNotFoundError(f"normbench's conf/ not found beside {layout.PACKAGE_DIR}")
    return str(found)


def norm_list(kind: str = "all") -> str:
    """The registered norms of ``kind`` (`NORM_KINDS`), comma-separated: a sweep's values."""
    from normbench.base.errors import ConfigError
    from normbench.norms import list_norms, norm_factory
    from normbench.norms.probes import mixes_positions

    kind = kind or "all"
    if kind not in NORM_KINDS:
        raise ConfigError(f"${{normbench.norms:{kind}}}: unknown kind {kind!r}; valid choices: {', '.join(NORM_KINDS)}")
    names = list_norms()
    if kind != "all":
        names = [n for n in names if mixes_positions(norm_factory(n), training=True) == (kind == "mixing")]
    return ",".join(names)


def store_plugin_norms(conf_dir: str | Path) -> list[str]:
    """Store ``norm/<name>`` (the schema's defaults) for each registered norm that has no YAML file
    in ``conf_dir``; their names."""
    from hydra.core.config_store import ConfigStore

    from normbench.base.registry import schema
    from normbench.norms import NORMS

    cs = ConfigStore.instance()
    stored = []
    for name, config in NORMS.configs().items():
        if not (Path(conf_dir) / "norm" / f"{name}.yaml").is_file():
            cs.store(group="norm", name=name, node=schema(name, config))
            stored.append(name)
    return stored


def register_configs(conf_dir: str | Path | None = None) -> None:
    """Store the top-level schema and every registry's schemas in the ConfigStore, and the plugins'
    norms' options (`store_plugin_norms`; ``conf_dir``: `config_dir` unless given). Everything of
    normbench is imported here, not at the module's import: a plugin that fails to import
    (`normbench.base.plugins.PluginError`, raised by `normbench.norms`) fails this call, which
    `normbench.cli.main` reports in one line."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    import normbench.models
    import normbench.norms
    import normbench.tasks
    from normbench.base.registry import store_schemas
    from normbench.cli.help import register_resolvers as register_help
    from normbench.config import RunSchema
    from normbench.data.roots import register_resolvers as register_data_roots
    from normbench.placement.hardware import HardwareConfig
    from normbench.sinks.logger_config import LoggerConfig

    register_data_roots()
    register_help()
    if not OmegaConf.has_resolver("normbench.norms"):
        OmegaConf.register_new_resolver("normbench.norms", norm_list)
    cs = ConfigStore.instance()
    cs.store(group="schema", name="run", node=RunSchema)  # RunConfig, diagnostics loose
    cs.store(group="schema/hardware", name="hardware", node=HardwareConfig)
    cs.store(group="schema/logger", name="logger", node=LoggerConfig)
    for registry in (normbench.norms.NORMS, normbench.models.MODELS, normbench.tasks.DATASETS):
        store_schemas(registry)
    store_plugin_norms(conf_dir or config_dir())
