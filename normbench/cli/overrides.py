"""The command line's overrides, checked against ``conf/`` before Hydra runs anything.

`check_overrides` raises `ConfigError` with one line that names the key, the bad value and what
is allowed: a config-group choice that does not exist (``norm=batchnorm``, ``hardware=tpu``), a
key that the chosen group option does not have (``model.norm_position=pre`` on
``model=resnet20``: a sequence-model option on an image model), or a value of the wrong type. The
config is composed once (the first job's, as Hydra will compose it); a key inside a swept group
(``-m norm=gn,bn norm.groups=4``) is also checked against each other swept option, read from its
own file on its schema (`option_node`), and so is the hint naming the options that have the key.
Hydra itself composes every job of a sweep before it launches any (``validate_batch_is_legal``),
so a sweep with a job that cannot compose never starts.

The composed config's values are checked when it is parsed (`normbench.config.parse`), the
combination of model, norm and data set by `normbench.run.loop.validate`.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from normbench.base.errors import ConfigError

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
    """The group's files, and its options stored in the ConfigStore (a plugin's norm:
    `normbench.cli.store.store_plugin_norms`)."""
    from hydra.core.config_store import ConfigStore

    try:
        stored = [Path(n).stem for n in ConfigStore.instance().list(group) if n.endswith(".yaml")]
    except OSError:  # no option of this group is stored
        stored = []
    return sorted({p.stem for p in (conf_dir / group).glob("*.yaml")} | set(stored))


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def check_yaml(path: Path) -> None:
    """``path`` parses as YAML without Python tags (else yaml's error, which names the file, line and
    column, and which the command turns into one line): a preset's typo is found here, not in Hydra."""
    import yaml

    if path.is_file():
        with open(path) as f:
            yaml.safe_load(f)


CFG_FLAGS = ("--cfg", "-c")
CFG_VALUES = ("job", "hydra", "all")


def without_cfg(args: Sequence[str]) -> list[str]:
    """``args`` without ``--cfg``/``-c`` and its value (``job``, ``hydra``, ``all``)."""
    out: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            if a in CFG_VALUES:
                continue
        if a.split("=")[0] in CFG_FLAGS:
            skip = "=" not in a
            continue
        out.append(a)
    return out


def check_overrides(args: Sequence[str], conf_dir: str | Path) -> None:
    """Check the command line's overrides against ``conf/`` before Hydra runs anything."""
    conf_dir = Path(conf_dir)
    args = without_cfg(args)  # ``--cfg job <overrides>``: the overrides are checked as for a run
    if any(a.split("=")[0] in HYDRA_FLAGS_WITHOUT_RUN + HYDRA_FLAGS_OTHER_CONFIG for a in args):
        return
    groups = {p.name for p in conf_dir.iterdir() if p.is_dir() and p.name != "hydra"}
    parsed = _parse(conf_dir, groups, [a for a in args if not a.startswith("-")])
    multirun = any(a in ("-m", "--multirun") for a in args)
    group_values: dict[str, list[str]] = {}
    placed: dict[str, list[str]] = {}  # ``experiment/arms/x@_global_=bn``: a group placed elsewhere
    value_overrides = []
    placements: list[Any] = []  # ``norm@model.encoder_norm=pn``: the model must have that key
    for o in parsed:
        key = o.key_or_group
        if key.startswith("hydra") or o.is_delete():
            continue
        try:
            values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        except Exception:
            continue
        if o.is_sweep_override() and not multirun:
            raise ConfigError(
                f"{o.input_line} gives several values, a sweep: add -m to run one job per value, or give one value"
                f" (a list is written {shown_key(o)}=[a,b])"
            )
        if o.package is not None:
            if (conf_dir / key).is_dir():
                placed[f"{key}@{o.package}"] = values
                placements.append(o)
            continue
        if key in groups:
            valid = _choices(conf_dir, key)
            for v in values:
                if v not in valid:
                    raise ConfigError(f"{key}={v} is not an option of {key}; valid choices: {', '.join(valid)}")
            group_values[key] = values
            for v in values:
                check_yaml(conf_dir / key / f"{v}.yaml")
        elif key.partition(".")[0] not in FREE_FORM:
            value_overrides.append(o)  # ``+key`` and ``++key`` too: an unknown key is refused
    if placements:
        _check_placements(conf_dir, groups, group_values, placements)
    if value_overrides:
        _check_keys_and_types(conf_dir, groups, group_values, value_overrides, placed)
    composing = [o for o in parsed if o.key_or_group.startswith("hydra/") or
                 (o.input_line.startswith("+") and o.key_or_group.partition(".")[0] in FREE_FORM)]  # fmt: skip
    if composing or len(group_values) > 1:  # what only Hydra's composition finds: said here in one line
        first = [f"{g}={values[0]}" for g, values in group_values.items()]
        first += [o.input_line for o in composing if not o.is_sweep_override()]
        _compose(conf_dir, first, strict=True)


def _parse(conf_dir: Path, groups: set[str], args: list[str]) -> list[Any]:
    """Hydra's parse of each override; what it cannot read is one `ConfigError` (Hydra's own
    message spans lines): an invisible character (named), an unquoted value beyond ASCII, which
    Hydra's grammar reads only in quotes (`normbench.cli.override_text`), or any other syntax it
    refuses."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from normbench.cli.override_text import invisible_message, non_ascii_message

    parser = OverridesParser.create()
    parsed = []
    for arg in args:
        key, _, value = arg.partition("=")
        if (invisible := invisible_message(arg)) is not None:  # a zero-width space: named, not quoted
            raise ConfigError(invisible)
        if not arg.isascii() and key.lstrip("+~") in groups:  # the value beyond ASCII, of a sweep's
            bad = next(v for v in value.split(",") if not v.isascii())
            valid = ", ".join(_choices(conf_dir, key.lstrip("+~")))
            raise ConfigError(f"{key}={bad} is not an option of {key.lstrip('+~')}; valid choices: {valid}")
        try:
            parsed += parser.parse_overrides([arg])
        except Exception as e:
            if not arg.isascii():
                raise ConfigError(non_ascii_message(arg)) from None
            reason = _one_line(str(e).splitlines()[0])
            raise ConfigError(
                f"{arg} is not an override Hydra can read ({reason}); "
                "see https://hydra.cc/docs/advanced/override_grammar/basic"
            ) from None
    return parsed


def _check_placements(conf_dir: Path, groups: set[str], group_values: dict[str, list[str]], placements: list) -> None:
    """A group placed under another group's option (``norm@model.encoder_norm=pn``) needs a key of
    that name in each option chosen (``model=transformer_tiny`` has ``encoder_norm``; ``resnet20`` not)."""
    for o in placements:
        head, _, rest = o.package.partition(".")
        if head not in groups or not rest:
            continue
        options = group_values.get(head)
        if options is None:
            composed = _compose(conf_dir, [f"{g}={values[0]}" for g, values in group_values.items()])
            if composed is None:
                return  # Hydra will say what is wrong with the composition itself
            options = [composed[1][head]]
        having = [other for other in _choices(conf_dir, head) if rest in option_node(conf_dir, head, other)]
        for option in options:
            if rest not in option_node(conf_dir, head, option):
                raise ConfigError(
                    f"{o.input_line} places a {o.key_or_group} at {o.package}, but {head}={option} has no {rest}; "
                    f"{head}s that have it: {head}={','.join(having) or 'none'}"
                )


def _check_keys_and_types(
    conf_dir: Path,
    groups: set[str],
    group_values: dict[str, list[str]],
    overrides: list[Any],
    placed: dict[str, list[str]] | None = None,
) -> None:
    """Each value override against the first job's composed config (as Hydra will compose it)
    and, for a key inside a swept group, against each other swept option's node. A group placed
    in another package (``experiment/arms/bn_dropout@_global_=bn,standard``: an arm that chooses
    the norm) is composed with each of its values in turn, the other choices at their first."""
    first = [f"{g}={values[0]}" for g, values in group_values.items()]
    placed = placed or {}
    first += [f"{g}={values[0]}" for g, values in placed.items()]
    jobs = [first] + [
        [*first[: len(group_values)], *(f"{h}={v if h == g else vs[0]}" for h, vs in placed.items())]
        for g, values in placed.items()
        for v in values[1:]
    ]
    for i, job in enumerate(jobs):
        composed = _compose(conf_dir, job)
        if composed is None:
            return  # Hydra will say what is wrong with the composition itself
        cfg, chosen = composed
        for o in overrides:
            key = o.key_or_group
            head, _, rest = key.partition(".")
            if head not in groups or not rest:
                _check_key(cfg, key, o)
                continue
            options = (group_values.get(head) or [chosen[head]]) if i == 0 else [chosen[head]]
            for j, option in enumerate(options):
                node = cfg[head] if j == 0 else option_node(conf_dir, head, option)
                _check_key(node, rest, o, conf_dir=conf_dir, group=head, option=option)


def composition_error(e: Exception, overrides: list[str]) -> str:
    """Hydra's (or OmegaConf's) reason a command line cannot compose, in one line, with the remedy
    where the reason is one a user meets: an unknown launcher or sweeper, ``+key`` on a key that is
    there, a preset's keys that the data set chosen beside it does not have."""
    text = " ".join(str(e).replace("\t", " ").split()).split(" Config search path:")[0]
    if "Could not append to config. An item is already at" in text:
        return text  # Hydra's own words name both remedies
    if (missing := re.search(r"Key '(\w+)' not in '(\w+)' full_key: ([\w.]+)", text)) and overrides:
        key, schema, full = missing.groups()
        chosen = [o for o in overrides if o.split("=")[0] == full.split(".")[0]]
        return (f"{full} is not a key of {schema} ({' '.join(chosen) or 'the chosen option'}): a preset's settings "
                "for another option of that group do not fit it; choose a preset made for it, or drop the switch")
    return f"the command line does not compose: {text}"


_COMPOSED: dict[tuple[str, tuple[str, ...], tuple[tuple[str, int, int], ...]], Any] = {}


def _conf_state(conf_dir: Path) -> tuple[tuple[str, int, int], ...]:
    """Every file under ``conf_dir`` with its modification time and size: what a composed config
    depends on besides the overrides (~1 ms for conf/'s files)."""
    state = []
    for root, _, files in os.walk(conf_dir):
        for name in files:
            st = os.stat(os.path.join(root, name))
            state.append((os.path.join(root, name), st.st_mtime_ns, st.st_size))
    return tuple(sorted(state))


def _compose(conf_dir: Path, overrides: list[str], strict: bool = False) -> tuple[DictConfig, dict[str, Any]] | None:
    """The job's config without its ``hydra`` node, and the group choices; None where Hydra
    cannot compose it (``strict``: a `ConfigError` with Hydra's reason in one line instead).
    Composed once per command line and state of ``conf_dir`` in a process (~0.3 s each): a process
    that starts several runs (a test session, a notebook) checks the same command lines again; each
    caller gets its own copy."""
    key = (str(conf_dir), tuple(overrides), _conf_state(conf_dir))
    if key not in _COMPOSED:
        if len(_COMPOSED) >= 64:
            _COMPOSED.clear()
        _COMPOSED[key] = _compose_uncached(conf_dir, overrides)
    found = _COMPOSED[key]
    if isinstance(found, ConfigError):
        if strict:
            raise found
        return None
    return copy.deepcopy(found)


def _compose_uncached(conf_dir: Path, overrides: list[str]) -> tuple[DictConfig, dict[str, Any]] | ConfigError:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base="1.3"):
            cfg = compose("config", overrides=overrides, return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as e:
        return ConfigError(composition_error(e, overrides))
    finally:
        GlobalHydra.instance().clear()
    chosen = dict(cfg.hydra.runtime.choices)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, chosen


def option_node(conf_dir: Path, group: str, option: str) -> DictConfig:
    """``conf/<group>/<option>.yaml`` on the schema its defaults name, as Hydra places it under
    ``<group>`` (without composing the whole config)."""
    from hydra.core.config_store import ConfigStore
    from hydra.errors import HydraException

    if not (conf_dir / group / f"{option}.yaml").is_file():  # stored in the ConfigStore only (a plugin's)
        return OmegaConf.structured(ConfigStore.instance().load(f"{group}/{option}.yaml").node)
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
        if group and not o.is_sweep_override():  # every job takes it: its section's own checks, now
            check_section(trial)


def check_section(node: DictConfig) -> None:
    """A group's section (``model``, ``norm``, …) as its dataclass: a value the type allows but the
    run cannot use (``model.depth=7``) is the dataclass's one-line `ConfigError` here, before Hydra
    composes the run (`normbench.config.parse` would say the same, later). What only the whole
    config can say (an interpolation, a value left ``???``) is left to the run."""
    try:
        OmegaConf.to_object(node)
    except ConfigError:
        raise
    except Exception:  # not this check's to say: the run's parse says it in one line
        return
