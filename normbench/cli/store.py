"""The schemas in Hydra's ConfigStore, and the resolvers the config files use:
``${normbench.checkout:…}`` (data roots independent of the current directory, `normbench.data.roots`)
and ``${normbench.help:}`` (``normbench --help``, `normbench.cli.help`)."""

from __future__ import annotations

from normbench.config import RunSchema
from normbench.run.placement.hardware import HardwareConfig
from normbench.sinks.logger_config import LoggerConfig


def register_configs() -> None:
    """Store the top-level schema and every registry's schemas in the ConfigStore."""
    from hydra.core.config_store import ConfigStore

    import normbench.models
    import normbench.norms
    import normbench.tasks
    from normbench.base.registry import store_schemas
    from normbench.cli.help import register_resolvers as register_help
    from normbench.data.roots import register_resolvers as register_data_roots

    register_data_roots()
    register_help()
    cs = ConfigStore.instance()
    cs.store(group="schema", name="run", node=RunSchema)  # RunConfig, diagnostics loose
    cs.store(group="schema/hardware", name="hardware", node=HardwareConfig)
    cs.store(group="schema/logger", name="logger", node=LoggerConfig)
    for registry in (normbench.norms.NORMS, normbench.models.MODELS, normbench.tasks.DATASETS):
        store_schemas(registry)
