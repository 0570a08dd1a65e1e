"""``normbench --help``: the user's config groups and the experiment presets, read from ``conf/``.

Hydra prints ``hydra.help.template`` (``conf/hydra/help/normbench.yaml``); its
``${normbench.help:}`` is `help_text`, which lists what a user picks, as composed for this
command line (the current choice of each group marked ``*``):

- each top-level folder of the config directories (``model``, ``dataset``, ``norm``, ...,
  ``experiment``, ``hparams_search``) with its options; ``schema/*`` (typing, in the ConfigStore)
  and sub-folders such as ``experiment/arms/*`` (building blocks of the presets) are left out;
- the presets of ``experiment`` and ``hparams_search``, one line each: the first comment line of
  the option's file (after ``# @package``), so a new file shows up with its line by itself;
- ``hydra/launcher``: Hydra's ``basic`` and ``submitit_local`` and normbench's own launcher files.

Text only: nothing of normbench is imported, and a failure is reported in the help text
rather than raised (``--help`` must always print). `list_groups_on_demand` spares Hydra's listing
of every group that our template does not print (5 of the 9 s that ``--help`` took).
"""

from __future__ import annotations

import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

DESCRIBED = {"experiment": "Experiment presets", "hparams_search": "Hyperparameter searches"}
"""Groups whose options are listed one per line, with the first comment line of their file."""
LAUNCHER = "hydra/launcher"
HYDRA_LAUNCHERS = {
    "basic": "one job after another in this process (Hydra's default)",
    "submitit_local": "each job in a process of its own on this machine (the 'slurm' extra)",
    "submitit_local_resume": "as submitit_local; a preempted job is requeued with resume=true (the 'slurm' extra)",
    "submitit_slurm": "SLURM jobs through submitit (the 'slurm' extra)",
    "submitit_slurm_resume": "as submitit_slurm; a preempted or timed-out job is requeued with resume=true",
}
"""Launchers without a file in ``conf/hydra/launcher``: Hydra's, and normbench's resuming ones
(`hydra_plugins.normbench_launcher`, stored in Hydra's ConfigStore)."""


def register_resolvers() -> None:
    """``${normbench.help:}`` for ``hydra.help.template`` (idempotent)."""
    if not OmegaConf.has_resolver("normbench.help"):
        OmegaConf.register_new_resolver("normbench.help", help_text)


NOT_SENTENCE_ENDS = ("al.", "e.g.", "i.e.", "vs.", "Fig.", "Figs.", "cf.", "Eq.", "Sec.", "sec.", "Tab.")
"""Abbreviations whose period ends no sentence (``Santurkar et al. 2018`` was cut at ``et al.``)."""


def first_comment(path: Path) -> str:
    """The first sentence of a config file's leading comment (``# @package`` aside), without the
    ``#``: a sentence that runs over several comment lines is joined, never cut mid-way."""
    words: list[str] = []
    for line in path.read_text().splitlines():
        text = line.strip()
        if not text.startswith("#") or (words and not text.lstrip("#").strip()):
            break
        if not text.lstrip("# ").startswith("@package"):
            words += text.lstrip("#").split()
    joined = " ".join(words)
    end = next((i for i, w in enumerate(words) if w.endswith(".") and not w.endswith("..")
                and w.strip("(") not in NOT_SENTENCE_ENDS), None)  # fmt: skip
    return " ".join(words[: end + 1]) if end is not None else joined


def config_dirs(root: DictConfig) -> list[Path]:
    """The config directories on Hydra's search path that are folders on disk (``conf/`` and any
    ``--config-dir``), in search order."""
    sources = OmegaConf.select(root, "hydra.runtime.config_sources") or []
    return [Path(s.path) for s in sources if s.schema == "file" and Path(s.path).is_dir()]


def user_groups(dirs: list[Path], choices: dict[str, Any]) -> list[str]:
    """Top-level folders of ``dirs`` (not ``hydra``), in the order of the defaults list, then by name."""
    found = {p.name for d in dirs for p in d.iterdir() if p.is_dir() and p.name != "hydra"}
    ordered = [g for g in reversed(list(choices)) if g in found]  # Hydra lists choices last-first
    return ordered + sorted(found - set(ordered))


def group_options(group: str, dirs: list[Path]) -> list[str]:
    """The options of ``group``: Hydra's own listing when Hydra is running, else the files."""
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return sorted(GlobalHydra.instance().config_loader().get_group_options(group))
    return sorted({p.stem for d in dirs for p in (d / group).glob("*.yaml")})


def option_file(group: str, option: str, dirs: list[Path]) -> Path | None:
    return next((d / group / f"{option}.yaml" for d in dirs if (d / group / f"{option}.yaml").is_file()), None)


def described(group: str, options: list[str], dirs: list[Path], chosen: Any) -> list[str]:
    """One line per option: name (``*`` if chosen) and its file's first comment line."""
    rows = []
    for option in options:
        path = option_file(group, option, dirs)
        text = first_comment(path) if path is not None else HYDRA_LAUNCHERS.get(option, "")
        rows.append((option + ("*" if option == chosen else ""), text))
    width = max(len(name) for name, _ in rows)
    return [f"  {name.ljust(width)}  {text}".rstrip() for name, text in rows]


def help_text(*, _root_: DictConfig) -> str:
    """The groups, presets and launchers of ``normbench --help`` (``$`` doubled for Hydra's
    ``string.Template``)."""
    try:
        text = _help_text(_root_)
    except Exception as e:  # --help must print whatever happens to the config files
        text = f"(the config groups could not be listed: {type(e).__name__}: {e})"
    return text.replace("$", "$$")


def _help_text(root: DictConfig) -> str:
    choices = OmegaConf.to_container(OmegaConf.select(root, "hydra.runtime.choices") or {}) or {}
    assert isinstance(choices, dict)
    dirs = config_dirs(root)
    groups = user_groups(dirs, choices)
    inline = [g for g in groups if g not in DESCRIBED]
    width = max(len(g) for g in [*inline, LAUNCHER])
    lines = ["== Config groups: group=option (* the current choice) =="]
    for group in inline:
        options = [o + ("*" if o == choices.get(group) else "") for o in group_options(group, dirs)]
        lines.append(f"  {group.ljust(width)}  {', '.join(options)}")
    for group in [g for g in DESCRIBED if g in groups]:
        lines += ["", f"== {DESCRIBED[group]}: normbench -m {group}=<name> =="]
        lines += described(group, group_options(group, dirs), dirs, choices.get(group))
    launchers = [o for o in group_options(LAUNCHER, dirs) if o in HYDRA_LAUNCHERS or option_file(LAUNCHER, o, dirs)]
    lines += ["", f"== Launchers of a sweep: normbench -m {LAUNCHER}=<name> ... =="]
    lines += described(LAUNCHER, launchers, dirs, choices.get(LAUNCHER))
    return "\n".join(lines)


class _OnDemand(dict):
    """Template values made when the template names them (``$NAME`` looks up ``NAME``)."""

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key)()


def list_groups_on_demand() -> None:
    """Hydra's ``--help`` (and ``--hydra-help``) formats ``$APP_CONFIG_GROUPS`` and
    ``$HYDRA_CONFIG_GROUPS`` before it reads the template, and each group it lists copies the whole
    config repository (about 200 copies with our schemas). Our template prints neither, so they are
    formatted only when a template names them; the text is what Hydra's ``Hydra.get_help`` gives."""
    from hydra._internal.hydra import Hydra

    def get_help(self: Hydra, help_cfg: DictConfig, cfg: DictConfig, args_parser: Any, resolve: bool) -> str:
        def groups(hydra_groups: bool) -> Callable[[], str]:
            return lambda: self.format_config_groups(lambda g: (g == "hydra" or g.startswith("hydra/")) == hydra_groups)

        values = _OnDemand(
            FLAGS_HELP=lambda: self.format_args_help(args_parser),
            HYDRA_CONFIG_GROUPS=groups(True),
            APP_CONFIG_GROUPS=groups(False),
            CONFIG=lambda: OmegaConf.to_yaml(cfg, resolve=resolve),
        )
        return string.Template(help_cfg.template).substitute(values)

    Hydra.get_help = get_help  # type: ignore[method-assign]
