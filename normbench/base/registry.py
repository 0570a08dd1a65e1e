"""A small name → builder registry shared by norms, models, datasets and diagnostics.

Each entry may carry a config dataclass; `register_configs()` stores those in Hydra's
ConfigStore (``schema/<group>/<name>``) so that the YAML file ``conf/<group>/<name>.yaml`` can
list ``/schema/<group>@_here_: <name>`` in its defaults and get typed keys: an unknown key or a
wrong type then fails when Hydra composes the config.

A name is written once, in the ``register`` call: it fills the stored schema's ``name`` key (the
config dataclasses declare ``name`` without a default, the YAML files leave it out), and a
registered class that carries a ``name`` attribute (the diagnostic hooks) gets it too.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from normbench.base.errors import ConfigError

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
        """Decorator: enter ``obj`` as ``name`` (with its config dataclass); see `name_class`."""
        return functools.partial(self._add, name, config)

    def _add(self, name: str, config: type | None, obj: T) -> T:
        if name in self._entries:
            raise ValueError(f"{self.group} {name!r} is registered twice")
        self._entries[name] = Entry(name, name_class(obj, name), config)
        return obj

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

    def typed(self, spec: Any) -> Any:
        """``spec`` as its entry's config dataclass: a bare name (the registered defaults), a
        mapping with ``name`` and any of its keys (for the Python API and tests; a key the schema
        lacks, `check_keys`, or a wrong type is a one-line `ConfigError`), or the dataclass itself."""
        if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
            return spec
        values = {"name": spec} if isinstance(spec, str) else dict(spec)
        name = values.get("name")
        if not isinstance(name, str):
            raise ConfigError(f"a {self.group} config needs a name, one of {', '.join(self.names())}; got {spec!r}")
        entry = self.entry(name)
        if entry.config is None:
            raise TypeError(f"{self.group} {name!r} is registered without a config dataclass")
        check_keys(entry, values, self.group)
        try:
            return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(entry.config), values))
        except OmegaConfBaseException as e:
            raise ConfigError(f"{self.group} {name!r}: {str(e).splitlines()[0]}") from None

    def configs(self) -> dict[str, type]:
        return {e.name: e.config for e in self._entries.values() if e.config is not None}


def name_class(obj: T, name: str) -> T:
    """A registered class with a ``name`` attribute (inherited, e.g. ``DiagnosticHook.name``) is
    given its registered name; a class that spells out another name is refused."""
    if isinstance(obj, type) and hasattr(obj, "name"):
        own = vars(obj).get("name")
        if own is not None and own != name:
            raise ValueError(f"{obj.__name__}.name={own!r} but it is registered as {name!r}")
        obj.name = name  # type: ignore[attr-defined]
    return obj


def schema(name: str, config: type) -> Any:
    """``config``'s defaults with ``name`` (when it has that key) set to ``name``: what Hydra's
    ConfigStore stores as ``schema/<group>/<name>``."""
    if "name" in {f.name for f in dataclasses.fields(config)}:
        return config(name=name)
    return config()


def store_schemas(registry: Registry[Any]) -> None:
    """Store each entry's config in Hydra's ConfigStore as ``schema/<group>/<name>``, named."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    for name, config in registry.configs().items():
        cs.store(group=f"schema/{registry.group}", name=name, node=schema(name, config))


def check_keys(entry: Entry[Any], given: Iterable[Any], where: str, owner: str | None = None) -> None:
    """The one check for keys a schema lacks: `ConfigError` ``<where>.<key> is not an option of
    <owner>; did you mean …? <owner> takes: …`` (``owner``: ``<where>=<name>`` unless given)."""
    valid = [f.name for f in dataclasses.fields(entry.config)] if entry.config is not None else ["name"]
    unknown = [str(k) for k in given if k not in valid]
    if unknown:
        owner = owner or f"{where}={entry.name}"
        close = difflib.get_close_matches(unknown[0], valid, n=1)
        hint = f"; did you mean {where}.{close[0]}? " if close else "; "
        takes = ", ".join(v for v in valid if v != "name") or "no keys"
        raise ConfigError(f"{where}.{unknown[0]} is not an option of {owner}{hint}{owner} takes: {takes}")
