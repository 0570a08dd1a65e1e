"""A small name → builder registry shared by norms, models, datasets and diagnostics.

Each entry may carry a config dataclass; `register_configs()` stores those in Hydra's
ConfigStore (``schema/<group>/<name>``) so that the YAML file
``conf/<group>/<name>.yaml`` can list ``/schema/<group>@_here_: <name>`` in its defaults and get typed keys:
an unknown key or a wrong type then fails when Hydra composes the config.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from normbench.errors import ConfigError

T = TypeVar("T")


class UnknownNameError(ConfigError):
    """A registry lookup with a name that is not registered."""


@dataclass(frozen=True)
class Entry(Generic[T]):
    name: str
    obj: T
    config: type | None


class Registry(Generic[T]):
    """A plain dict of named entries, one per Hydra config group."""

    def __init__(self, group: str) -> None:
        self.group = group
        self._entries: dict[str, Entry[T]] = {}

    def register(self, name: str, config: type | None = None) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.group} {name!r} is registered twice")
            self._entries[name] = Entry(name, obj, config)
            return obj

        return decorator

    def get(self, name: str) -> T:
        return self.entry(name).obj

    def entry(self, name: str) -> Entry[T]:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(f"unknown {self.group} {name!r}; valid choices: {', '.join(self.names())}") from None

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def configs(self) -> dict[str, type]:
        return {e.name: e.config for e in self._entries.values() if e.config is not None}


def store_schemas(registry: Registry[Any]) -> None:
    """Store each entry's config dataclass in Hydra's ConfigStore as ``schema/<group>/<name>``."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    for name, config in registry.configs().items():
        cs.store(group=f"schema/{registry.group}", name=name, node=config)
