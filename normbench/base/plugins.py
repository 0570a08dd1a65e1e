"""Plugins: a user's own modules, imported so that their ``register_norm`` (``register_model``,
``register_dataset``, …) calls run as a built-in module's do, without a fork of normbench.

Two sources, in this order:

- ``NORMBENCH_PLUGINS``: comma-separated module names importable from ``sys.path`` (e.g.
  ``NORMBENCH_PLUGINS=mypkg.mynorm`` with ``PYTHONPATH`` holding ``mypkg``);
- the entry-point group ``normbench.plugins`` of the installed packages
  (``[project.entry-points."normbench.plugins"] mynorm = "mypkg.mynorm"``).

`load_plugins` is called at the end of `normbench.norms`' own discovery, so every process that
reaches a registry (``normbench``, ``normbench-leaderboard``, ``normbench-figures``, the
dashboards, a notebook) sees the plugins' entries; ``normbench`` imports them before Hydra composes
the config. A plugin that fails to import is one `PluginError` naming the module (exit 2).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import os
from collections.abc import Mapping

from normbench.base.errors import ConfigError

ENV = "NORMBENCH_PLUGINS"
GROUP = "normbench.plugins"

_loaded: list[str] = []
_loading = False


class PluginError(ConfigError):
    """A plugin module that cannot be imported (or raised while it was)."""


def plugin_modules(environ: Mapping[str, str] | None = None) -> list[tuple[str, str]]:
    """(module name, where it was named) for each plugin: ``NORMBENCH_PLUGINS``'s names first,
    then the ``normbench.plugins`` entry points' modules; each once."""
    environ = os.environ if environ is None else environ
    found = [(name.strip(), ENV) for name in environ.get(ENV, "").split(",") if name.strip()]
    for ep in importlib.metadata.entry_points(group=GROUP):
        found.append((ep.value.partition(":")[0].strip(), f"entry point {ep.name!r} of group {GROUP}"))
    unique: dict[str, str] = {}
    for name, where in found:
        unique.setdefault(name, where)
    return list(unique.items())


def import_plugin(name: str, where: str) -> None:
    """Import ``name``; any failure is one `PluginError` line naming the module and the cause."""
    try:
        importlib.import_module(name)
    except Exception as e:
        first = (str(e).splitlines() or [""])[0]
        raise PluginError(
            f"plugin module {name!r} (from {where}) failed to import: {type(e).__name__}: {first}"
        ) from None


def load_plugins(environ: Mapping[str, str] | None = None) -> list[str]:
    """Import every plugin module (`plugin_modules`) not imported yet; the names imported so far.

    Re-entrant: a plugin that imports `normbench.norms` (which calls this at the end of its
    discovery) while it is being imported gets the call back at once."""
    global _loading
    if _loading:
        return list(_loaded)
    _loading = True
    try:
        for name, where in plugin_modules(environ):
            if name not in _loaded:
                import_plugin(name, where)
                _loaded.append(name)
    finally:
        _loading = False
    return list(_loaded)
