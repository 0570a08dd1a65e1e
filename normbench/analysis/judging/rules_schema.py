"""The schema of a preset's rules (``normbench/rules/<preset>.yaml``), parsed once into typed
dataclasses (`Rules`, `ClaimRule`, `CheckRule`); `normbench.analysis.judging.claims` judges with them.

Every level accepts only its own keys: an unknown key (a typo, a key of another level) is a
one-line `ConfigError` naming the key, where it stands and the valid keys, as is a missing
required one. What a plan still lacks (the paper's short title, an effect of interest for a
directional claim) is not a load error but `missing_plan_keys`: rules written before the plan
keys still load and judge.

The keys of issue 56 (`normbench.analysis.judging.rules_judging`): ``learns`` (learning bounds every
compared arm must pass: `Rules.learning`, check-shaped so that the per-run table measures them as
``check:<id>`` columns), ``benchmark_family`` (Benjamini–Hochberg across presets), ``seeds`` (the
confirmatory seed block per variant) and a claim's ``detectable`` (the planned detectable
difference per variant, beside ``n``). ``full_scale_only`` is documentation only: the CPU plan
does not size the claim (``needs_n``); it never keeps a verdict from a claim whose arms ran.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from normbench.analysis.judging.figure_schema import Figures, parse_figures
from normbench.analysis.judging.figure_schema import keyed_node as _node
from normbench.analysis.judging.rules_judging import (
    BenchmarkFamily,
    SeedBlock,
    Tracks,
    parse_benchmark_family,
    parse_learns,
    parse_seeds,
    parse_tracks,
    planned_detectable,
)
from normbench.analysis.judging.stats import ALPHA, TESTS
from normbench.base.errors import ConfigError
from normbench.rules import is_superseded, load_rules_data, rules_hash

RELATIONS = ("greater", "less", "equivalent", "differs")
"""``differs``: two-sided, no side claimed (a leaderboard's norm against its cell's reference)."""
SCALE_KINDS = ("paper", "reduced", "hardware")
VARIANTS = ("full", "cpu")
SHORT_MAX = 40
"""The most characters of a claim's ``short`` name (forest plots, the findings page)."""

TOP_KEYS = (("preset", "min_seeds", "scale", "claims"),
            ("alpha", "family", "params", "checks", "paper_title", "pilot", "figures", "learns", "benchmark_family",
             "seeds", "about"))  # fmt: skip
CLAIM_KEYS = (("id", "figure", "claim", "measure", "a", "b", "relation", "better", "test"),
              ("paper", "margin", "variants", "scale", "short", "effect", "n", "full_scale_only", "cell",
               "detectable"))  # fmt: skip
CHECK_KEYS = ("id", "figure", "claim", "measure", "select"), ("below", "above", "tracks", "variants", "cell", "gates")
ARM_KEYS = ("label", "select"), ("measure",)
SCALE_KEYS = ("kind",), ("note",)
EFFECT_KEYS = ("value",), ("source", "smallest")
FULL_SCALE_KEYS = ("needs_n", "why"), ()
PILOT_KEYS = ("seeds",), ("note",)


@dataclass(frozen=True)
class Scale:
    """How a preset's runs compare with the paper's: ``kind`` (`SCALE_KINDS`) and by how much."""

    kind: str
    note: str

    def fmt(self) -> str:
        return {"paper": "paper scale", "reduced": "reduced", "hardware": "other hardware"}[self.kind] + (
            f": {self.note}" if self.note else ""
        )


@dataclass(frozen=True)
class Effect:
    """A claim's effect of interest in its measure's units (a difference; a ratio for
    ``welch_log``): the paper's, with its ``source`` (table or figure), or the ``smallest`` that
    matters, with why. Exactly one of the two is set."""

    value: float
    source: str | None = None
    smallest: str | None = None


@dataclass(frozen=True)
class FullScaleOnly:
    """A claim judged at full scale only: the ``_cpu`` variant cannot run the ``needs_n`` seeds
    per arm it would need (``why``)."""

    needs_n: int
    why: str


@dataclass(frozen=True)
class Arm:
    label: str
    select: dict[str, Any]
    measure: str | None = None
    """This arm's own measure (e.g. the same runs evaluated another way; test ``paired``)."""
    params: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ClaimRule:
    id: str
    claim: str
    paper: str
    figure: str
    measure: str
    params: dict[str, Any]
    a: Arm
    b: Arm
    relation: str
    test: str
    better: str
    """``higher`` or ``lower``: which way the measure is better (a diverged run gets the worst)."""
    margin: float | None = None
    variants: tuple[str, ...] = VARIANTS
    scale: dict[str, Scale] = field(default_factory=dict)
    short: str = ""
    """The claim's name on forest plots and the findings page (≤ `SHORT_MAX` characters; the id
    when the rules give none)."""
    effect: Effect | None = None
    planned_n: dict[str, int] = field(default_factory=dict)
    """Seeds per arm the plan asks for, per variant (``normbench-plan``)."""
    planned_detectable: dict[str, float] = field(default_factory=dict)
    """The difference (``welch_log``: ratio) the plan can detect at 80 % power, per variant."""
    full_scale_only: FullScaleOnly | None = None
    """Documentation only: the CPU plan does not size this claim; judged like any other where its
    arms ran."""
    cell: str = ""
    """The claim's Holm family within the preset (a leaderboard's model and data set); claims
    without one form one family."""


@dataclass(frozen=True)
class CheckRule:
    """A setup check: passes when every selected run's measure is below ``below`` (or above
    ``above``), or, arm against arm, when two arms' mean values lie within ``tracks.within`` of
    each other (exactly one of the three); a failed check leaves every claim of its variants
    unjudged (of its ``cell`` only, when it names one; only the claims ``gates`` names, when it
    names some)."""

    id: str
    claim: str
    figure: str
    measure: str
    params: dict[str, Any]
    select: dict[str, Any]
    below: float | None = None
    above: float | None = None
    variants: tuple[str, ...] = VARIANTS
    cell: str = ""
    tracks: Tracks | None = None
    gates: tuple[str, ...] = ()

    def passes(self, value: float) -> bool:
        """Whether one run's ``value`` passes the bound: strictly below ``below``, else above ``above``."""
        return value < self.below if self.below is not None else value > float(self.above)  # type: ignore[arg-type]

    @property
    def bound(self) -> str:
        """The bound in words: ``below 0.6`` / ``above 10``."""
        return f"below {self.below:g}" if self.below is not None else f"above {self.above:g}"


@dataclass(frozen=True)
class Rules:
    preset: str
    hash: str
    alpha: float
    min_seeds: int
    scale: dict[str, Scale]
    params: dict[str, Any]
    claims: tuple[ClaimRule, ...]
    checks: tuple[CheckRule, ...]
    paper_title: str | None = None
    pilot_seeds: tuple[int, ...] = ()
    """The pilot runs' seeds: disjoint from the confirmatory ones, never judged."""
    pilot_note: str = ""
    figures: Figures | None = None
    """What ``normbench-figures`` draws (`normbench.analysis.judging.figure_schema`); not in the rules hash."""
    learning: tuple[CheckRule, ...] = ()
    """The learning bounds (``learns``): every run of an arm compared in a claim must pass those
    that select it; measured as checks (``check:<id>``), judged per arm, never a row of their own."""
    benchmark_family: BenchmarkFamily | None = None
    seeds: dict[str, SeedBlock] = field(default_factory=dict)
    """The confirmatory seed block per variant."""
    superseded: bool = False
    """Loaded from ``normbench/rules/superseded/`` by hash: its claims are never confirmatory."""
    about: str = ""
    """The preset's design in words (``about``: what runs, against what the paper ran, and why the reduction
    keeps its question), shown in its results folder's README; judges nothing, so not in the rules hash."""

    @property
    def measured_checks(self) -> tuple[CheckRule, ...]:
        """The setup checks and the learning bounds: every check-shaped rule the per-run table measures."""
        return self.checks + self.learning


def _variants(node: Any, where: str) -> tuple[str, ...]:
    got = tuple(node)
    if not got or any(v not in VARIANTS for v in got):
        raise ConfigError(f"{where}: variants {list(got)}; valid choices: {', '.join(VARIANTS)}")
    return got


def _scale(node: Any, where: str) -> Scale:
    node = _node(node, where, SCALE_KEYS)
    if node["kind"] not in SCALE_KINDS:
        raise ConfigError(f"{where}: scale kind {node['kind']!r}; valid choices: {', '.join(SCALE_KINDS)}")
    return Scale(node["kind"], str(node.get("note", "")))


def _scales(node: Any, where: str) -> dict[str, Scale]:
    node = _node(node or {}, where, ((), VARIANTS))
    return {k: _scale(v, f"{where} {k}") for k, v in node.items()}


def _measure_spec(node: Any, where: str) -> tuple[str, dict[str, Any]]:
    """A rule's ``measure``: a name, or a mapping of its ``name`` and its parameters."""
    spec = dict(node) if isinstance(node, Mapping) else {"name": node}
    if not isinstance(spec.get("name"), str):
        raise ConfigError(f"{where}: a measure name, or a mapping of 'name' and its parameters, expected; got {node!r}")
    return spec.pop("name"), spec


def _select(node: Any, where: str) -> dict[str, Any]:
    if not isinstance(node, Mapping):
        raise ConfigError(f"{where}: select must map config keys to values, got {node!r}")
    return dict(node)


def _arm(node: Any, where: str) -> Arm:
    """An arm of a rule: its label, selector, and (optionally) its own measure."""
    node = _node(node, where, ARM_KEYS)
    name, params = _measure_spec(node["measure"], f"{where} measure") if "measure" in node else (None, {})
    return Arm(node["label"], _select(node["select"], where), name, params)


def _number(v: Any, where: str, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ConfigError(f"{where}: {what} must be a finite number, got {v!r}")
    return float(v)


def _count(v: Any, where: str, what: str, least: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < least:
        raise ConfigError(f"{where}: {what} must be an integer ≥ {least}, got {v!r}")
    return v


def _text(v: Any, where: str, what: str) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ConfigError(f"{where}: {what} must be a non-empty text, got {v!r}")
    return v


def _effect(node: Any, where: str) -> Effect:
    node = _node(node, where, EFFECT_KEYS)
    if ("source" in node) == ("smallest" in node):
        raise ConfigError(f"{where}: give exactly one of 'source' (the paper's effect: its table or figure) and "
                          "'smallest' (why it is the smallest effect that matters)")  # fmt: skip
    value = _number(node["value"], where, "value")
    if "source" in node:
        return Effect(value, source=_text(node["source"], where, "source"))
    return Effect(value, smallest=_text(node["smallest"], where, "smallest"))


def _planned_n(node: Any, where: str) -> dict[str, int]:
    node = _node(node, where, ((), VARIANTS))
    return {k: _count(v, where, f"n of {k}", 2) for k, v in node.items()}


def _full_scale_only(node: Any, where: str) -> FullScaleOnly:
    node = _node(node, where, FULL_SCALE_KEYS)
    return FullScaleOnly(_count(node["needs_n"], where, "needs_n", 2), _text(node["why"], where, "why"))


def _claim(c: Any, where: str) -> ClaimRule:
    """One claim of a rules file, every key checked."""
    where = f"{where}, {c['id']}" if isinstance(c, Mapping) and "id" in c else f"{where}, a claim"
    c = _node(c, where, CLAIM_KEYS)
    measure_name, measure_params = _measure_spec(c["measure"], f"{where} measure")
    rule = ClaimRule(
        id=c["id"], claim=c["claim"], paper=c.get("paper", ""), figure=c["figure"],
        measure=measure_name, params=measure_params,
        a=_arm(c["a"], f"{where} a"), b=_arm(c["b"], f"{where} b"),
        relation=c["relation"], test=c["test"], better=c["better"], margin=c.get("margin"),
        variants=_variants(c.get("variants", VARIANTS), where), scale=_scales(c.get("scale"), f"{where} scale"),
        short=str(c.get("short", c["id"])),
        effect=_effect(c["effect"], f"{where} effect") if "effect" in c else None,
        planned_n=_planned_n(c["n"], f"{where} n") if "n" in c else {},
        planned_detectable=planned_detectable(c["detectable"], f"{where} detectable") if "detectable" in c else {},
        full_scale_only=_full_scale_only(c["full_scale_only"], f"{where} full_scale_only") if "full_scale_only" in c
        else None,
        cell=_text(c["cell"], where, "cell") if "cell" in c else "",
    )  # fmt: skip
    if rule.relation not in RELATIONS or rule.test not in TESTS or rule.better not in ("higher", "lower"):
        raise ConfigError(f"{where}: relation/test/better {rule.relation!r}/{rule.test!r}/"
                          f"{rule.better!r}; valid: {RELATIONS} / {TESTS} / ('higher', 'lower')")  # fmt: skip
    if (rule.relation == "equivalent") != (rule.margin is not None):
        raise ConfigError(f"{where}: a margin goes with relation 'equivalent', and only with it")
    if rule.effect is not None and rule.relation == "equivalent":
        raise ConfigError(f"{where}: an effect goes with a directional claim (an equivalence claim's margin is its)")
    if len(rule.short) > SHORT_MAX:
        raise ConfigError(f"{where}: short {rule.short!r} has {len(rule.short)} characters; at most {SHORT_MAX}")
    return rule


def _check(c: Any, where: str) -> CheckRule:
    """One setup check of a rules file: exactly one of ``below`` and ``above``."""
    where = f"{where}, {c['id']}" if isinstance(c, Mapping) and "id" in c else f"{where}, a check"
    c = _node(c, where, CHECK_KEYS)
    if sum(k in c for k in ("below", "above", "tracks")) != 1:
        raise ConfigError(f"{where}: give exactly one of 'below', 'above' (the bound every selected run must pass) "
                          "and 'tracks' (two arms' means within a distance)")  # fmt: skip
    bound = {k: _number(c[k], where, k) for k in ("below", "above") if k in c}
    gates = c.get("gates", [])
    if not isinstance(gates, list) or not all(isinstance(g, str) for g in gates):
        raise ConfigError(f"{where}: gates must be a list of claim ids, got {gates!r}")
    return CheckRule(c["id"], c["claim"], c["figure"], *_measure_spec(c["measure"], f"{where} measure"),
                     _select(c["select"], where), **bound,
                     variants=_variants(c.get("variants", VARIANTS), where),
                     cell=_text(c["cell"], where, "cell") if "cell" in c else "",
                     tracks=parse_tracks(c["tracks"], f"{where} tracks") if "tracks" in c else None,
                     gates=tuple(gates))  # fmt: skip


def _pilot(node: Any, where: str) -> tuple[tuple[int, ...], str]:
    node = _node(node, where, PILOT_KEYS)
    seeds = node["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                            for s in seeds):  # fmt: skip
        raise ConfigError(f"{where}: seeds must be a non-empty list of integers, got {seeds!r}")
    return tuple(seeds), str(node.get("note", ""))


def parse_rules(data: Any, preset: str, digest: str) -> Rules:
    """``data`` (a rules file's parsed YAML) as `Rules`; ``digest``: the file's `rules_hash`."""
    where = f"rules of {preset}"
    data = _node(data, where, TOP_KEYS)
    if data.get("family", "holm") != "holm":
        raise ConfigError(f"{where}: family {data['family']!r}; valid choices: holm")
    claims = tuple(_claim(c, where) for c in data["claims"] or [])
    checks = tuple(_check(c, where) for c in data.get("checks") or [])
    for kind, items in (("claim", claims), ("check", checks)):
        ids = [r.id for r in items]
        if dup := sorted({i for i in ids if ids.count(i) > 1}):
            raise ConfigError(f"{where}: {kind} id {dup[0]!r} is used twice; ids name one {kind} each")
    pilot_seeds, pilot_note = _pilot(data["pilot"], f"{where}, pilot") if "pilot" in data else ((), "")
    learning = tuple(_learning_check(spec, f"{where}, learns {spec.id}")
                     for spec in (parse_learns(data["learns"], where) if "learns" in data else ()))  # fmt: skip
    if bad := [g for c in checks for g in c.gates if g not in {r.id for r in claims}]:
        raise ConfigError(f"{where}: a check gates {bad[0]!r}, which is no claim id of these rules")
    ids = [r.id for r in checks + learning]
    if dup := sorted({i for i in ids if ids.count(i) > 1}):
        raise ConfigError(f"{where}: id {dup[0]!r} names a check and a learning bound; ids name one each")
    return Rules(
        preset=data["preset"],
        hash=digest,
        alpha=float(data.get("alpha", ALPHA)),
        min_seeds=_count(data["min_seeds"], where, "min_seeds", 2),
        scale=_scales(data["scale"], f"{where}, scale"),
        params=dict(data.get("params") or {}),
        claims=claims,
        checks=checks,
        paper_title=_text(data["paper_title"], where, "paper_title") if "paper_title" in data else None,
        about=_text(data["about"], where, "about") if "about" in data else "",
        pilot_seeds=pilot_seeds,
        pilot_note=pilot_note,
        figures=parse_figures(data["figures"], where) if "figures" in data else None,
        learning=learning,
        benchmark_family=parse_benchmark_family(data["benchmark_family"], where) if "benchmark_family" in data
        else None,
        seeds=parse_seeds(data["seeds"], where) if "seeds" in data else {},
    )  # fmt: skip


def _learning_check(spec: Any, where: str) -> CheckRule:
    """A learning bound as a check-shaped rule (its ``why`` in ``claim``)."""
    name, params = _measure_spec(spec.measure, f"{where} measure")
    return CheckRule(spec.id, spec.why, "", name, params, spec.select, spec.below, spec.above, spec.variants)


def load_rules(preset: str, rules_hash: str | None = None) -> Rules | None:
    """The parsed rules of ``preset`` (None: it judges no claims), checked for bad values;
    ``rules_hash``: the rules of that hash, current or superseded (`normbench.rules.load_rules_data`:
    a one-line `ConfigError` listing the known hashes when none has it)."""
    data = load_rules_data(preset) if rules_hash is None else load_rules_data(preset, rules_hash)
    if data is None:
        return None
    rules = parse_rules(data, preset, rules_hash or _hash_now(preset))
    return replace(rules, superseded=True) if rules_hash and is_superseded(preset, rules_hash) else rules


def _hash_now(preset: str) -> str:
    """The current rules' hash (the module's `rules_hash`, which `load_rules`' parameter shadows)."""
    return str(rules_hash(preset))


def missing_plan_keys(rules: Rules) -> list[str]:
    """What the rules still lack for a plan (issue 43), one line each: the paper's short title, and
    the effect of interest of every directional claim (an equivalence claim's margin is its effect)."""
    where = f"rules of {rules.preset}"
    missing = [] if rules.paper_title else [f"{where}: no paper_title"]
    missing += [f"{where}, {r.id}: no effect (a directional claim)" for r in rules.claims
                if r.relation != "equivalent" and r.effect is None]  # fmt: skip
    return missing
