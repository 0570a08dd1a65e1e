"""Each preset's claims as data, fixed before its runs: ``normbench/rules/<preset>.yaml``.

A rules file names, for every claim the preset judges, the measure (a function of one run, named
in the preset's analysis module, with its parameters here), the two arms (config selectors), the
relation (``less`` / ``greater`` / ``equivalent`` within a margin), the test, the smallest number
of seeds per arm and the scale of each variant (the full preset and its ``_cpu`` variant share
one file). `rules_hash` is the SHA-256 of the file's parsed content (canonical JSON) but its
``figures:`` block (what is drawn judges nothing, so redrawing needs no rerun): a run
records the hash it was made under (``summary.json``: ``rules``), ``normbench-figures`` writes it
into ``claims.csv``, and ``scripts/results_index.py --check`` fails when a results folder was
judged under a hash that is no longer its preset's — changing a rule after looking means
rerunning.

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

RULES_DIR = Path(__file__).resolve().parent
SCALE_SUFFIXES = ("_cpu",)
UNHASHED = ("figures",)
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


def load_rules_data(preset: str) -> dict[str, Any] | None:
    """The parsed rules file of ``preset`` (None when the preset judges no claims): the caller's own copy."""
    return copy.deepcopy(_parsed(preset))


def _parsed(preset: str) -> Any:
    """The parse shared by every reader in this process (None without a rules file): read it, never change it."""
    path = rules_path(preset)
    return _parse(path.read_text()) if path.is_file() else None


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser where PyYAML was built with it (the same resolver and constructor as
``yaml.safe_load``, so the same data), about 10x faster: the analysis reads the rules of every
preset many times (``scripts/results_index.py`` ~170 times)."""


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
