"""The rules' keys for judging beyond the claims themselves (issue 56), parsed for
`normbench.analysis.judging.rules_schema`:

- ``learns``: learning bounds, fixed before the runs, that every run of an arm compared in a claim
  must pass (`LearnBound`); a bound's number comes from the task (a multiple of chance accuracy, a
  BLEU floor, a perplexity against the vocabulary), its ``why`` says how;
- ``benchmark_family``: how verdicts are controlled across all presets (`BenchmarkFamily`:
  Benjamini–Hochberg at q, `normbench.analysis.judging.stats.benjamini_hochberg`);
- ``seeds``: the confirmatory seed block of each variant (`SeedBlock`), one no earlier attempt of
  the preset used;
- a check's ``tracks``: arm against arm, two arms' mean values within a distance (`Tracks`: Batch
  Renorm at a large batch within 3 points of BN).

This module imports no rules loader (`rules_schema` imports it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from normbench.analysis.judging.figure_schema import keyed_node as _node
from normbench.base.errors import ConfigError

VARIANTS = ("full", "cpu")
LEARN_KEYS = ("id", "measure", "why"), ("below", "above", "select", "variants")
FAMILY_KEYS = ("method", "q"), ("note",)
FAMILY_METHODS = ("bh",)
SEED_KEYS = ("start", "stop"), ("note",)
TRACKS_KEYS = ("a", "b", "within"), ()


@dataclass(frozen=True)
class Tracks:
    """An arm-against-arm check: among the check's selected runs, those matching ``a`` and those
    matching ``b`` have mean values within ``within`` of each other (both arms must have runs)."""

    a: dict[str, Any]
    b: dict[str, Any]
    within: float


def parse_tracks(node: Any, where: str) -> Tracks:
    node = _node(node, where, TRACKS_KEYS)
    for side in ("a", "b"):
        if not isinstance(node[side], Mapping) or not node[side]:
            raise ConfigError(f"{where}: {side} must map config keys to values, got {node[side]!r}")
    within = _bound(node["within"], where, "within")
    if within <= 0:
        raise ConfigError(f"{where}: within must be > 0, got {within!r}")
    return Tracks(dict(node["a"]), dict(node["b"]), within)


@dataclass(frozen=True)
class LearnSpec:
    """One learning bound as parsed (`rules_schema` makes it a check-shaped rule, so that the
    per-run table measures it like a check: column ``check:<id>``)."""

    id: str
    why: str
    measure: Any
    select: dict[str, Any]
    below: float | None
    above: float | None
    variants: tuple[str, ...]


@dataclass(frozen=True)
class BenchmarkFamily:
    """Multiplicity over every judged claim of the benchmark: ``method`` (``bh``:
    Benjamini–Hochberg) at false-discovery rate ``q``."""

    method: str
    q: float
    note: str = ""


@dataclass(frozen=True)
class SeedBlock:
    """The confirmatory seeds of a variant: ``start`` ≤ seed < ``stop``."""

    start: int
    stop: int
    note: str = ""

    def __contains__(self, seed: object) -> bool:
        return isinstance(seed, int) and self.start <= seed < self.stop


def _variants(node: Any, where: str) -> tuple[str, ...]:
    got = tuple(node) if isinstance(node, (list, tuple)) else ()
    if not got or any(v not in VARIANTS for v in got):
        raise ConfigError(f"{where}: variants {node!r}; valid choices: {', '.join(VARIANTS)}")
    return got


def _bound(v: Any, where: str, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"{where}: {what} must be a finite number, got {v!r}")
    return float(v)


def parse_learns(node: Any, where: str) -> tuple[LearnSpec, ...]:
    """The ``learns`` list: each bound with its id, measure, ``why`` and exactly one of ``above``
    and ``below``; ``select`` (default: every run) and ``variants`` (default: both) optional."""
    if not isinstance(node, list) or not node:
        raise ConfigError(f"{where}, learns: a non-empty list of learning bounds expected, got {node!r}")
    out = []
    for item in node:
        at = f"{where}, learns {item.get('id', '?')}" if isinstance(item, Mapping) else f"{where}, learns"
        item = _node(item, at, LEARN_KEYS)
        if ("below" in item) == ("above" in item):
            raise ConfigError(f"{at}: give exactly one of 'below' and 'above' (the bound every run must pass)")
        why = item["why"]
        if not isinstance(why, str) or not why.strip():
            raise ConfigError(f"{at}: why must say where the bound comes from (the task), got {why!r}")
        select = item.get("select") or {}
        if not isinstance(select, Mapping):
            raise ConfigError(f"{at}: select must map config keys to values, got {select!r}")
        bounds = {k: _bound(item[k], at, k) for k in ("below", "above") if k in item}
        out.append(LearnSpec(str(item["id"]), why, item["measure"], dict(select), bounds.get("below"),
                             bounds.get("above"), _variants(item.get("variants", list(VARIANTS)), at)))  # fmt: skip
    return tuple(out)


def parse_benchmark_family(node: Any, where: str) -> BenchmarkFamily:
    node = _node(node, f"{where}, benchmark_family", FAMILY_KEYS)
    if node["method"] not in FAMILY_METHODS:
        raise ConfigError(f"{where}, benchmark_family: method {node['method']!r}; valid choices: "
                          f"{', '.join(FAMILY_METHODS)}")  # fmt: skip
    q = _bound(node["q"], f"{where}, benchmark_family", "q")
    if not 0 < q < 1:
        raise ConfigError(f"{where}, benchmark_family: q={q!r}; valid: 0 < q < 1")
    return BenchmarkFamily(node["method"], q, str(node.get("note", "")))


def parse_seeds(node: Any, where: str) -> dict[str, SeedBlock]:
    """``seeds``: per variant, the confirmatory block ``{start, stop}`` (half-open, stop > start)."""
    node = _node(node, f"{where}, seeds", ((), VARIANTS))
    out = {}
    for variant, block in node.items():
        at = f"{where}, seeds {variant}"
        block = _node(block, at, SEED_KEYS)
        start, stop = block["start"], block["stop"]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (start, stop)) or stop <= start:
            raise ConfigError(f"{at}: start {start!r} and stop {stop!r} must be integers ≥ 0 with stop > start")
        out[variant] = SeedBlock(start, stop, str(block.get("note", "")))
    return out


def planned_detectable(node: Any, where: str) -> dict[str, float]:
    """A claim's ``detectable``: per variant, the difference (``welch_log``: ratio) its plan can
    detect with 80 % power at the family's level (the plan's output, beside ``n``)."""
    node = _node(node, where, ((), VARIANTS))
    out = {k: _bound(v, where, f"detectable of {k}") for k, v in node.items()}
    if bad := [k for k, v in out.items() if v <= 0]:
        raise ConfigError(f"{where}: detectable of {bad[0]} must be > 0, got {out[bad[0]]!r}")
    return out
