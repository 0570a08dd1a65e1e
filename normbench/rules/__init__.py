"""Each preset's claims as data, fixed before its runs: ``normbench/rules/<preset>.yaml``.

A rules file names, for every claim the preset judges, the measure (a function of one run, named
in the preset's analysis module, with its parameters here), the two arms (config selectors), the
relation (``less`` / ``greater`` / ``equivalent`` within a margin), the test, the smallest number
of seeds per arm and the scale of each variant (the full preset and its ``_cpu`` variant share
one file). `rules_hash` is the SHA-256 of the file's parsed content (canonical JSON) but its
``figures:`` block (what is drawn judges nothing, so redrawing needs no rerun): a run
records the hash it was made under (``summary.json``: ``rules``), ``normbench-figures`` writes it
into ``claims.csv``, and ``normbench-reports index --check`` fails when a results folder was
judged under a hash that is no longer its preset's — changing a rule after looking means
rerunning.

Superseded rules: before a rules file changes, the file as it was is copied byte-identical to
``superseded/<preset>-<hash>.yaml`` (its `rules_hash` is the one in its name), so that runs
measured under it can still be judged under it (`load_rules_data` with ``rules_hash``);
`list_rule_presets` lists the current files only.

This module reads YAML only (no torch, no matplotlib), so the runner can import it.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from normbench.base.errors import ConfigError, yaml_error_line

RULES_DIR = Path(__file__).resolve().parent
SUPERSEDED_DIR = RULES_DIR / "superseded"
SCALE_SUFFIXES = ("_cpu",)
UNHASHED = ("figures", "about")
"""Top-level keys of a rules file that judge nothing and stay out of `rules_hash`."""


def base_preset(preset: str) -> str:
    """The preset whose rules ``preset`` uses: ``santurkar_vgg_cpu`` → ``santurkar_vgg``."""
    for suffix in SCALE_SUFFIXES:
        preset = preset.removesuffix(suffix)
    return preset


def variant(preset: str) -> str:
    """``cpu`` for a ``_cpu`` preset, ``full`` otherwise (the key of its scale in the rules)."""
    return "cpu" if preset != base_preset(preset) else "full"


def rules_path(preset: str) -> Path:
    return RULES_DIR / f"{base_preset(preset)}.yaml"


def list_rule_presets() -> list[str]:
    return sorted(p.stem for p in RULES_DIR.glob("*.yaml"))


def superseded_rules(preset: str) -> dict[str, Path]:
    """The superseded rules files of ``preset``'s rules, by their hash (``superseded/<preset>-<hash>.yaml``)."""
    base = base_preset(preset)
    return {p.stem.rsplit("-", 1)[1]: p for p in sorted(SUPERSEDED_DIR.glob(f"{base}-*.yaml"))
            if p.stem.rsplit("-", 1)[0] == base}  # fmt: skip


def is_superseded(preset: str, digest: str | None) -> bool:
    """Whether ``digest`` names a superseded rules file of ``preset`` (not its current rules)."""
    return bool(digest) and digest != rules_hash(preset) and digest in superseded_rules(preset)


def load_rules_data(preset: str, digest: str | None = None) -> dict[str, Any] | None:
    """The parsed rules file of ``preset`` (None when the preset judges no claims): the caller's own
    copy. ``digest``: the rules of that hash, the current ones or a superseded file's; a one-line
    `ConfigError` listing the known hashes when none has it."""
    if digest is None or digest == rules_hash(preset):
        return copy.deepcopy(_parsed(preset))
    known = superseded_rules(preset)
    if digest not in known:
        choices = ", ".join([f"{rules_hash(preset)} (current)", *known])
        raise ConfigError(f"rules hash {digest!r} is not one of {base_preset(preset)}'s rules; known: {choices}")
    return copy.deepcopy(_parse(known[digest].read_text()))


def file_hash(path: Path) -> str:
    """`rules_hash` of the rules file at ``path`` (a superseded file's: the hash in its name)."""
    return canonical_hash({k: v for k, v in _parse(path.read_text()).items() if k not in UNHASHED})


def _parsed(preset: str) -> Any:
    """The parse shared by every reader in this process (None without a rules file): read it, never change it."""
    path = rules_path(preset)
    if not path.is_file():
        return None
    try:
        return _parse(path.read_text())
    except yaml.YAMLError as e:  # a typo or a Python tag: one line naming the file, never a traceback
        raise ConfigError(yaml_error_line(e, path)) from None


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser where PyYAML was built with it (the same resolver and constructor as
``yaml.safe_load``, so the same data), about 10x faster: the analysis reads the rules of every
preset many times (``normbench-reports index`` ~170 times)."""


@functools.lru_cache(maxsize=64)
def _parse(text: str) -> Any:
    """A rules file's text parsed once per process (keyed by the text itself, so an edited file is
    parsed again); `load_rules_data` hands out deep copies."""
    return yaml.load(text, Loader=_LOADER)  # a safe loader


def canonical_hash(data: Any) -> str:
    """SHA-256 (hex, first 16 digits) of ``data`` as canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def rules_hash(preset: str | None) -> str | None:
    """The hash of ``preset``'s rules (None: no preset, or a preset without rules)."""
    if not preset:
        return None
    data = _parsed(preset)  # read only: no copy
    return None if data is None else canonical_hash({k: v for k, v in data.items() if k not in UNHASHED})
