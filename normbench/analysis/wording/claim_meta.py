"""What the rules say about each claim of a ``claims.csv``, for presenting it: its short name, the
unit of its measure (`normbench.analysis.wording.units`), its effect of interest and where that comes from.

A folder's claims were judged under the rules whose hash its ``claims.csv`` records; when the
preset's rules have changed since (a planned rerun), the rules as they were are read from
``normbench/rules/superseded/<preset>-<hash>.yaml``, so that an old folder keeps its names and units.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from normbench.analysis.judging.rules_schema import Rules, load_rules, parse_rules
from normbench.analysis.wording.present import readable
from normbench.analysis.wording.units import Unit, rule_unit
from normbench.rules import RULES_DIR, base_preset, rules_hash

GENERIC = Unit("measure")
"""The unit of a claim whose rule is gone or whose measure declares none (the units test fails first)."""


@dataclass(frozen=True)
class ClaimMeta:
    """One claim as the rules describe it: ``short`` name, measure ``unit``, the effect of interest
    (stored units, a − b or a / b; NaN: none) and whether the paper gave it (``source``) or it is
    the smallest that matters (``smallest``)."""

    short: str
    unit: Unit
    effect: float = math.nan
    source: str = ""
    smallest: str = ""


def rules_as_judged(preset: str, judged_hash: str | None = None) -> Rules | None:
    """The rules ``preset``'s claims were judged under: today's, or the superseded copy of that hash."""
    if judged_hash and judged_hash != rules_hash(preset):
        old = RULES_DIR / "superseded" / f"{base_preset(preset)}-{judged_hash}.yaml"
        if old.is_file():
            return _superseded(str(old), preset, judged_hash)
    return load_rules(preset)


@functools.lru_cache(maxsize=128)
def _superseded(path: str, preset: str, judged_hash: str) -> Rules:
    """A superseded rules file, parsed once per process (those files never change: their hash is their name)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml where built with it: the same data, ~10x faster
    return parse_rules(yaml.load(Path(path).read_text(), Loader=loader), preset, judged_hash)  # noqa: S506 (safe)


def _unit(measure: str, params: Mapping[str, Any]) -> Unit:
    try:
        return rule_unit(measure, params)
    except KeyError:
        return GENERIC


def claim_meta(preset: str, judged_hash: str | None = None) -> tuple[str, dict[str, ClaimMeta]]:
    """The preset's ``paper_title`` (default: its base name) and, per claim id, its `ClaimMeta`."""
    rules = rules_as_judged(preset, judged_hash)
    if rules is None:
        return base_preset(preset), {}
    out = {}
    for c in rules.claims:
        e = c.effect
        value = e.value if e else (c.margin if c.margin is not None else math.nan)
        out[c.id] = ClaimMeta(c.short or c.id, _unit(c.measure, c.params), value,
                              (e.source or "") if e else "", (e.smallest or "") if e else "")  # fmt: skip
    return rules.paper_title or base_preset(preset), out


def check_units(preset: str, judged_hash: str | None = None) -> dict[str, Unit]:
    """Per setup check id, the unit of its measure (`GENERIC` where it declares none)."""
    rules = rules_as_judged(preset, judged_hash)
    return {} if rules is None else {c.id: _unit(c.measure, c.params) for c in rules.checks}


def annotate(rows: Sequence[Mapping[str, Any]], preset: str, prefix: str = "") -> list[dict[str, Any]]:
    """``rows`` (of ``claims.csv``) with ``short`` (``prefix`` + the short name), ``unit`` (a
    `Unit`), ``effect_rule`` (the rules' effect of interest), ``effect_source``, ``preset`` and
    ``check`` (a setup check, not a claim: its verdict passed / failed, or its id a check's)."""
    hashes = {str(r.get("rules_hash") or "") for r in rows} - {""}
    judged_hash = next(iter(hashes)) if len(hashes) == 1 else None
    _, meta = claim_meta(preset, judged_hash)
    checks = set(check_units(preset, judged_hash))
    out = []
    for row in rows:
        info = meta.get(str(row.get("id")))
        short = readable(info.short if info else str(row.get("short") or row.get("id")))
        check = row.get("verdict") in ("passed", "failed") or (info is None and str(row.get("id")) in checks)
        out.append({**row, "short": prefix + short, "unit": info.unit if info else GENERIC, "preset": preset,
                    "check": check,
                    "effect_rule": info.effect if info else math.nan,
                    "effect_source": info.source if info else ""})  # fmt: skip
    return out
