"""A preset's claims, judged from its runs by the rules fixed before them (``normbench/rules/``).

A rule names two arms (config selectors), a *measure* (a function of one run, registered here by
the preset's analysis module with `measure`), the relation the paper claims between the arms
(``greater`` / ``less``: a directional claim; ``equivalent``: equal within ``margin``) and the
test (`normbench.analysis.stats.TESTS`). Judging a claim:

1. each arm's runs give one value per seed; a run that diverged counts with the worst value of
   the measure (−inf when higher is better, +inf when lower is), so it is never dropped;
2. an arm with fewer finite-or-diverged values than the rules' ``min_seeds`` is `NOT_JUDGED`;
3. `normbench.analysis.stats.compare` gives the difference (or ratio) with its interval and the
   p-values; the preset's judged claims form one family, adjusted by Holm's step-down;
4. the verdict: *supported* / *opposite* / *inconclusive* (directional), *equivalent* /
   *different* / *inconclusive* (equivalence). The scale (paper, reduced, other hardware) is a
   column of its own and never changes a verdict.

Checks (``checks`` in a rules file) are conditions on the setup, not paper claims (e.g. "the run is
long enough"): *passed* when every selected run's measure is below the declared bound.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from normbench.analysis.runs import Run, check_seeds_only, matching
from normbench.analysis.stats import (
    ALPHA,
    NOT_JUDGED,
    TESTS,
    ArmSummary,
    Comparison,
    compare,
    directional_verdict,
    equivalence_verdict,
    holm,
    summarize_arm,
)
from normbench.errors import ConfigError
from normbench.rules import load_rules_data, rules_hash, variant

PASSED, FAILED = "passed", "failed"
RELATIONS = ("greater", "less", "equivalent")
SCALE_KINDS = ("paper", "reduced", "hardware")

Measure = Callable[..., float]
MEASURES: dict[str, Measure] = {}


def measure(name: str) -> Callable[[Measure], Measure]:
    """Register ``fn(run, **params) -> float`` as the measure ``name`` that rules refer to."""

    def register(fn: Measure) -> Measure:
        if name in MEASURES and MEASURES[name] is not fn:
            raise ValueError(f"measure {name!r} is registered twice")
        MEASURES[name] = fn
        return fn

    return register


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
    variants: tuple[str, ...] = ("full", "cpu")
    scale: dict[str, Scale] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckRule:
    id: str
    claim: str
    figure: str
    measure: str
    params: dict[str, Any]
    select: dict[str, Any]
    below: float


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


def _scale(node: Mapping[str, Any], where: str) -> Scale:
    if node.get("kind") not in SCALE_KINDS:
        raise ConfigError(f"{where}: scale kind {node.get('kind')!r}; valid choices: {', '.join(SCALE_KINDS)}")
    return Scale(node["kind"], str(node.get("note", "")))


def _arm(node: Mapping[str, Any]) -> Arm:
    """An arm of a rule: its label, selector, and (optionally) its own measure."""
    name, params = _measure_spec(node["measure"]) if "measure" in node else (None, {})
    return Arm(node["label"], dict(node["select"]), name, params)


def _measure_spec(node: Any) -> tuple[str, dict[str, Any]]:
    """A rule's ``measure``: a name, or a mapping of its name and its parameters."""
    spec = dict(node) if isinstance(node, Mapping) else {"name": node}
    return spec.pop("name"), spec


def load_rules(preset: str) -> Rules | None:
    """The parsed rules of ``preset`` (None: it judges no claims), checked for bad values."""
    data = load_rules_data(preset)
    if data is None:
        return None
    where = f"rules of {preset}"
    if data.get("family", "holm") != "holm":
        raise ConfigError(f"{where}: family {data['family']!r}; valid choices: holm")
    claims = []
    for c in data.get("claims", []):
        measure_name, measure_params = _measure_spec(c["measure"])
        rule = ClaimRule(
            id=c["id"], claim=c["claim"], paper=c.get("paper", ""), figure=c["figure"],
            measure=measure_name, params=measure_params,
            a=_arm(c["a"]), b=_arm(c["b"]),
            relation=c["relation"], test=c["test"], better=c["better"], margin=c.get("margin"),
            variants=tuple(c.get("variants", ("full", "cpu"))),
            scale={k: _scale(v, f"{where}, {c['id']}") for k, v in (c.get("scale") or {}).items()},
        )  # fmt: skip
        if rule.relation not in RELATIONS or rule.test not in TESTS or rule.better not in ("higher", "lower"):
            raise ConfigError(f"{where}, {rule.id}: relation/test/better {rule.relation!r}/{rule.test!r}/"
                              f"{rule.better!r}; valid: {RELATIONS} / {TESTS} / ('higher', 'lower')")  # fmt: skip
        if (rule.relation == "equivalent") != (rule.margin is not None):
            raise ConfigError(f"{where}, {rule.id}: a margin goes with relation 'equivalent', and only with it")
        claims.append(rule)
    checks = []
    for c in data.get("checks", []):
        checks.append(CheckRule(c["id"], c["claim"], c["figure"], *_measure_spec(c["measure"]), dict(c["select"]),
                                float(c["below"])))  # fmt: skip
    return Rules(
        preset=data["preset"],
        hash=str(rules_hash(preset)),
        alpha=float(data.get("alpha", ALPHA)),
        min_seeds=int(data["min_seeds"]),
        scale={k: _scale(v, where) for k, v in data["scale"].items()},
        params=dict(data.get("params") or {}),
        claims=tuple(claims),
        checks=tuple(checks),
    )


@dataclass
class Claim:
    """One judged claim (or setup check): what the paper says, what we measured, the verdict."""

    id: str
    claim: str
    paper: str
    figure: str
    verdict: str
    scale: str = ""
    test: str = ""
    a_label: str = ""
    b_label: str = ""
    a: ArmSummary | None = None
    b: ArmSummary | None = None
    comparison: Comparison | None = None
    p_holm: float = math.nan
    relation: str = ""
    margin: float | None = None
    note: str = ""
    rules_hash: str = ""

    @property
    def measured(self) -> str:
        """The numbers in one line: arms, difference (or ratio) with its interval, test, p."""
        if self.comparison is None:
            return self.note
        c = self.comparison
        what = "ratio a/b" if c.ratio else ("HL shift a−b" if c.test == "rank" else "a−b")
        parts = [
            f"{self.a_label}: {_fmt_arm(self.a)} (n={self.a.n if self.a else 0})",
            f"{self.b_label}: {_fmt_arm(self.b)} (n={self.b.n if self.b else 0})",
            f"{what} {_g(c.estimate)} [{_g(c.lo)}, {_g(c.hi)}]",
            f"{c.test}{' (log)' if c.ratio and c.test == 'rank' else ''}, p={_g(c.p, 2)}, Holm p={_g(self.p_holm, 2)}",
            f"effect {'P(a>b)' if c.test == 'rank' else 'g'}={_g(c.effect_size, 2)}, detectable {_g(c.detectable, 2)}",
        ]
        if self.margin is not None:
            parts.append(f"margin ±{_g(self.margin)}{' (ratio)' if c.ratio else ''}: TOST p={_g(c.p_eq, 2)}")
        return "; ".join(parts) + (f"; {self.note}" if self.note else "")


def _g(v: float, digits: int = 4) -> str:
    return "n/a" if v is None or math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf
                                                      else f"{v:.{digits}g}")  # fmt: skip


def _fmt_arm(s: ArmSummary | None) -> str:
    return "n/a" if s is None else s.fmt()


def registered_measure(name: str, where: str) -> Measure:
    """The measure a rule names (``where``: which rule, for the error)."""
    if name not in MEASURES:
        raise ConfigError(f"{where}: unknown measure {name!r}; valid choices: {', '.join(sorted(MEASURES))}")
    return MEASURES[name]


def _call(fn: Measure, run: Run, params: Mapping[str, Any], runs: Sequence[Run] = ()) -> float:
    """``fn(run, **params)``, with the params its signature names; a measure that names
    ``all_runs`` also gets every run judged (a value at a point common to all runs: equal time)."""
    names = inspect.signature(fn).parameters
    kw = {k: v for k, v in params.items() if k in names}
    if "all_runs" in names:
        kw["all_runs"] = runs
    return float(fn(run, **kw))


def arm_runs(runs: Sequence[Run], arm: Arm) -> list[Run]:
    """The runs of ``arm``, in the order of their seeds; they must be seeds of one setting
    (`check_seeds_only`)."""
    members = sorted(matching(runs, arm.select), key=lambda r: r.seed)
    check_seeds_only(members, f"arm {arm.label!r}")
    return members


def arm_values(
    members: Sequence[Run], runs: Sequence[Run], fn: Measure, params: Mapping[str, Any], better: str
) -> list[float]:
    """One value per run of ``members`` (an arm's runs: `arm_runs`), a diverged run the worst value
    of the measure; ``runs`` (every judged run) for measures that read them all."""
    worst = -math.inf if better == "higher" else math.inf
    return [worst if r.status == "diverged" else _call(fn, r, params, runs) for r in members]


def judge(preset: str, runs: Sequence[Run]) -> list[Claim]:
    """Every claim and check of ``preset``'s rules, judged on ``runs`` (Holm over the claims)."""
    rules = load_rules(preset)
    if rules is None:
        return []
    var = variant(preset)
    out: list[Claim] = []
    family: list[tuple[Claim, ClaimRule, float]] = []
    for rule in rules.claims:
        scale = rule.scale.get(var) or rules.scale[var]
        claim = Claim(rule.id, rule.claim, rule.paper, rule.figure, NOT_JUDGED, scale.fmt(), rule.test,
                      rule.a.label, rule.b.label, relation=rule.relation, margin=rule.margin,
                      rules_hash=rules.hash)  # fmt: skip
        out.append(claim)
        if var not in rule.variants:
            claim.note = f"not run in {preset} (the rules judge it in: {', '.join(rule.variants)})"
            continue
        where = f"rules of {preset}, {rule.id}"
        members_a, members_b = arm_runs(runs, rule.a), arm_runs(runs, rule.b)
        seeds_a, seeds_b = [r.seed for r in members_a], [r.seed for r in members_b]
        if rule.test == "paired" and seeds_a != seeds_b:
            raise ConfigError(f"{where}: test paired needs the same seeds in both arms; got {seeds_a} and {seeds_b}")
        va, vb = (
            arm_values(members, runs, registered_measure(arm.measure or rule.measure, where),
                       {**rules.params, **(arm.params if arm.measure else rule.params)}, rule.better)
            for arm, members in ((rule.a, members_a), (rule.b, members_b))
        )  # fmt: skip
        claim.a, claim.b = summarize_arm(va, rule.test, rules.alpha), summarize_arm(vb, rule.test, rules.alpha)
        if min(claim.a.n, claim.b.n) < rules.min_seeds:
            claim.note = (f"n = {claim.a.n} and {claim.b.n}: the rules ask for {rules.min_seeds} seeds per arm; "
                          f"{claim.a_label}: {claim.a.fmt()}, {claim.b_label}: {claim.b.fmt()}")  # fmt: skip
            claim.a = claim.b = None
            continue
        claim.comparison = compare(va, vb, rule.test, rule.margin, rules.alpha)
        claim.test = claim.comparison.test
        if claim.comparison.test != rule.test:
            claim.note = f"a run diverged: {rule.test} → rank (the rule for diverged runs)"
        c = claim.comparison
        family.append((claim, rule, c.p if rule.margin is None else min(c.p_eq, c.p_diff)))
    adjusted = holm([p for _, _, p in family])
    for (claim, rule, _), p_adj in zip(family, adjusted):
        claim.p_holm = p_adj
        c = claim.comparison
        assert c is not None
        if rule.relation == "equivalent":
            eq_first = c.p_eq <= c.p_diff
            claim.verdict = equivalence_verdict(p_adj if eq_first else 1.0, 1.0 if eq_first else p_adj, rules.alpha)
        else:
            claim.verdict = directional_verdict(c.estimate, 1.0 if c.ratio else 0.0, rule.relation == "greater",
                                                p_adj, rules.alpha)  # fmt: skip
    for check in rules.checks:
        out.append(_check(check, runs, rules, var))
    return out


def _run_label(run: Run) -> str:
    """A run's name in a check's note: its sweep overrides, an arm file by its name (``g8 seed=0``),
    after the norm's name where no arm file names the run (``gn seed=0``; no overrides: ``gn seed 0``).
    Every selected run is listed, also where two labels coincide."""
    arms = [o.rpartition("=")[2] for o in run.overrides if o.startswith("experiment/arms/")]
    rest = [o for o in run.overrides if not o.startswith(("experiment=", "experiment/arms/"))]
    return " ".join(arms or [str(run.get("norm.name"))]) + " " + (" ".join(rest) or f"seed {run.seed}")


def _check(check: CheckRule, runs: Sequence[Run], rules: Rules, var: str) -> Claim:
    params = {**rules.params, **check.params}
    fn = registered_measure(check.measure, f"rules of {rules.preset}, {check.id}")
    values = [(_run_label(r), math.inf if r.status == "diverged" else _call(fn, r, params, runs))
              for r in matching(runs, check.select)]  # fmt: skip
    ok = bool(values) and all(v < check.below for _, v in values)
    note = ", ".join(f"{k} {v:.3g}" for k, v in values) or "no runs selected"
    return Claim(check.id, check.claim, "a check of the setup, not a paper claim", check.figure,
                 PASSED if ok else FAILED, rules.scale[var].fmt(), note=f"{note} (passes when every run's is below "
                 f"{check.below:g})", rules_hash=rules.hash)  # fmt: skip


CSV_FIELDS = (
    "id", "figure", "claim", "paper", "a", "a_centre", "a_lo", "a_hi", "a_n", "a_diverged", "b", "b_centre", "b_lo",
    "b_hi", "b_n", "b_diverged", "relation", "margin", "test", "ratio", "estimate", "lo", "hi", "p", "p_holm",
    "effect_size", "detectable", "p_eq", "p_diff", "verdict", "scale", "measured", "rules_hash",
)  # fmt: skip


def csv_row(c: Claim) -> dict[str, Any]:
    """The flat row of ``claims.csv``: every number beside the one-line ``measured`` text."""
    row: dict[str, Any] = dict.fromkeys(CSV_FIELDS, "")
    row.update(id=c.id, figure=c.figure, claim=c.claim, paper=c.paper, a=c.a_label, b=c.b_label,
               relation=c.relation, margin="" if c.margin is None else c.margin, test=c.test, verdict=c.verdict,
               scale=c.scale, measured=c.measured, rules_hash=c.rules_hash)  # fmt: skip
    for side, s in (("a", c.a), ("b", c.b)):
        if s is not None:
            row.update({f"{side}_centre": s.centre, f"{side}_lo": s.lo, f"{side}_hi": s.hi, f"{side}_n": s.n,
                        f"{side}_diverged": s.diverged})  # fmt: skip
    if c.comparison is not None:
        k = c.comparison
        row.update(ratio=k.ratio, estimate=k.estimate, lo=k.lo, hi=k.hi, p=k.p, p_holm=c.p_holm,
                   effect_size=k.effect_size, detectable=k.detectable, p_eq=k.p_eq, p_diff=k.p_diff)  # fmt: skip
    return row


def claims_markdown(claims: Sequence[Claim]) -> str:
    lines = [
        "| claim | paper | measured (arm: mean [95 % interval]; difference or ratio [95 % interval]; test) "
        "| verdict | scale | figure |",
        "|---|---|---|---|---|---|",
    ]
    for c in claims:
        cells = [c.claim, c.paper, c.measured, f"**{c.verdict}**", c.scale, c.figure]
        lines.append("| " + " | ".join(s.replace("|", "/").replace("\n", " ") for s in cells) + " |")
    return "\n".join(lines) + "\n"
