"""``normbench-plan``: how many seeds per arm a preset needs, read from its pilot runs and every
earlier attempt of the same recipe.

    normbench-plan santurkar_vgg_cpu --pilot results/santurkar_vgg_cpu/pilot/per_run.csv
    normbench-plan santurkar_vgg_cpu --pilot … --earlier results/santurkar_vgg_cpu

The pilot runs are the preset's sweep at the rules' pilot seeds (``pilot: {seeds: [...]}`` in
``normbench/rules/<preset>.yaml``; ``bash scripts/reproduce_cpu.sh --pilot <preset>`` runs them and
writes their ``per_run.csv``); ``--earlier`` adds earlier attempts' tables (a results folder: its
``per_run.csv`` and ``pilot/per_run.csv``), pooled per arm (`normbench.analysis.judging.plan_inputs`).
Every table is vouched for (no run twice, no empty table, no NaN, status honoured, one commit and
rules hash: `normbench.analysis.judging.evidence`); a pilot table holds pilot seeds only, no table's seeds
lie in the rules' confirmatory block, and tables of different recipes are not pooled.

Per claim of the preset's variant: the pilot's spread and the upper 80 % confidence limit that n
is sized from, the effect of interest the rules name (an equivalence claim: its margin), the seeds
per arm for 80 % power at the claim's Holm level α/m, or for equivalence the n at which TOST passes
with 80 % power at a true difference of 0 (not planned, in one line, where that does not fit), the
seeds the plan runs and the difference they detect at α/m, and what the n costs on 2 cores
(`normbench.analysis.judging.plan`). Below the table: the preset's whole sweep at the largest n a planned
claim runs, against the budget. ``--seconds-per-run`` and ``--budget-min`` must be > 0.

The pilot's values are read as measured (``per_run.csv``): the rules may have changed since only
by the plan's own keys (``n``, ``full_scale_only``); the hash recorded with the pilot is printed.

``--size-full-scale`` sizes the claims the rules mark ``full_scale_only`` too, as if unmarked, so a
new pilot re-sizes their ``needs_n`` (printed as that key, beside the n the sweep affords and what it
detects) without editing the rules file; the budget line then counts them as well.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Collection, Sequence
from typing import Any, NoReturn

from normbench.analysis.judging.claims import judged_at_this_scale
from normbench.analysis.judging.evidence import arm_key
from normbench.analysis.judging.per_run import Row, judged_here
from normbench.analysis.judging.plan import (
    BUDGET_MIN,
    CORES,
    ClaimPlanInput,
    PlanInput,
    PlanRow,
    plan_claims,
    plan_table,
)
from normbench.analysis.judging.plan_inputs import Table, check_same_recipe, check_seeds, pooled_values, read_tables
from normbench.analysis.judging.plan_learning import reach_lines
from normbench.analysis.judging.power import SD_LEVEL
from normbench.analysis.judging.rules_schema import Rules, load_rules
from normbench.base.errors import ConfigError
from normbench.rules import variant

WALL_TIME = "final:wall_time_s"


def plan_input(rules: Rules, ids: Sequence[str], also_judged: Sequence[str] = ()) -> PlanInput:
    """The claims ``ids`` of ``rules`` as the planner takes them (effect of interest, margin, ratio);
    ``also_judged``: claims judged in their Holm family but not sized here."""
    by_id = {c.id: c for c in rules.claims}
    claims = tuple(
        ClaimPlanInput(i, by_id[i].relation, by_id[i].test, by_id[i].effect.value if by_id[i].effect else None,
                       by_id[i].margin, by_id[i].test == "welch_log", by_id[i].cell)
        for i in ids
    )  # fmt: skip
    return PlanInput(claims, rules.alpha, rules.min_seeds, tuple(by_id[i].cell for i in also_judged))


def arms_run(values: dict[str, tuple[list[list[float]], list[list[float]]]], claim_id: str) -> bool:
    """Whether the tables hold values of both arms of ``claim_id`` (so the sweep runs them)."""
    a, b = values.get(claim_id, ([], []))
    return any(len(g) for g in a) and any(len(g) for g in b)


def full_scale_only_here(rules: Rules, preset: str) -> dict[str, int]:
    """The claims ``preset``'s variant does not judge because the rules mark them full-scale only
    (``full_scale_only``, on the CPU variant), with the n they would need."""
    return {c.id: c.full_scale_only.needs_n for c in rules.claims
            if c.full_scale_only is not None and not judged_at_this_scale(c, preset)}  # fmt: skip


def seconds_per_run(rows: Sequence[Row]) -> float:
    """The median wall time of the runs (``summary.json``'s ``wall_time_s``)."""
    times = [float(r[WALL_TIME]) for r in rows if r.get(WALL_TIME) is not None]
    if not times:
        raise ConfigError(f"the tables have no {WALL_TIME!r} column values: pass --seconds-per-run")
    return statistics.median(times)


def settings_of(tables: Sequence[Table]) -> int:
    """The settings the sweep runs: the distinct arm identities (selector values) of the tables."""
    return len({arm_key(r, t.selectors)[:-1] for t in tables for r in t.rows})


def sweep_minutes(rows: Sequence[Row], n: int, seconds: float, settings: int | None = None) -> tuple[int, float]:
    """Runs and wall-clock minutes of the preset's whole sweep at ``n`` seeds per setting:
    ``settings`` (default: the rows over their distinct seeds), ``n`` runs each, ``CORES`` at a time."""
    settings = settings or len(rows) / max(1, len({r["seed"] for r in rows}))
    runs = round(settings * n)
    return runs, runs * seconds / CORES / 60.0


def summary_line(preset: str, rows: Sequence[Row], plan: Sequence[PlanRow], seconds: float, budget: float,
                 settings: int | None = None) -> str:  # fmt: skip
    """The whole sweep at the largest n a planned claim runs (``n_run``), against the budget."""
    needed = [p.n_run for p in plan if p.n_run is not None and p.planned]
    if not needed:
        return f"{preset}: no claim can be planned within the budget and the search range (see each row's note)"
    n = max(needed)
    runs, minutes = sweep_minutes(rows, n, seconds, settings)
    fits = "fits" if minutes <= budget else "does NOT fit"
    return (f"{preset}: the whole sweep at n = {n} seeds per setting: {runs} runs × {seconds:.0f} s / {CORES} cores "
            f"≈ {minutes:.0f} min, {fits} the {budget:.0f} min budget")  # fmt: skip


def rules_lines(plan: Sequence[PlanRow], marked: Collection[str] = ()) -> str:
    """The plan's keys for the rules, per planned claim: the seeds it runs and what they detect at
    the Holm level (``n`` and ``detectable`` of this variant); a claim in ``marked`` (sized with
    ``--size-full-scale``): its ``full_scale_only`` ``needs_n``, then what the n run detects."""
    keys = []
    for p in (p for p in plan if p.planned and p.n_run is not None):
        run = f"n: {{{p.variant}: {p.n_run}}}" + ("" if p.equivalence else
              f", detectable: {{{p.variant}: {float(f'{p.detectable_run:.3g}')}}}")  # fmt: skip
        if p.id in marked:
            needs = "beyond the search range" if p.n is None else str(p.n)
            run = f"full_scale_only: {{needs_n: {needs}}}  (the sweep's {run})"
        keys.append(f"  {p.id}: {run}")
    head = "[plan] for the rules (each planned claim's n and detectable at its Holm level):"
    return "\n".join([head, *keys]) if keys else "[plan] for the rules: no claim is planned"


class _Parser(argparse.ArgumentParser):
    """argparse whose usage errors are one line (``normbench-plan: error: …``), exit 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def positive(what: str) -> Any:
    """An argparse type: a finite number > 0 (``what``: its unit, for the message); 0 and negatives
    are refused, never replaced."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {what} > 0")
        return value

    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(prog="normbench-plan", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("preset", help="experiment preset, e.g. santurkar_vgg_cpu")
    parser.add_argument("--pilot", nargs="+", default=[], metavar="PER_RUN_CSV",
                        help="the pilot runs' per_run.csv (normbench-figures --pilot writes it): the rules' pilot "
                             "seeds only")  # fmt: skip
    parser.add_argument("--earlier", nargs="+", default=[], metavar="PER_RUN_CSV_OR_FOLDER",
                        help="earlier attempts of the same recipe (a results folder: its per_run.csv and "
                             "pilot/per_run.csv), pooled with the pilot per arm")  # fmt: skip
    parser.add_argument("--seconds-per-run", type=positive("seconds"),
                        help="cost of one run, > 0 (default: the pilot's median)")  # fmt: skip
    parser.add_argument("--budget-min", type=positive("minutes"), default=BUDGET_MIN,
                        help="wall-clock budget on 2 cores, > 0")  # fmt: skip
    parser.add_argument("--size-full-scale", action="store_true",
                        help="size the claims the rules mark full_scale_only too (as if unmarked): their needs_n "
                             "from this pilot, the rules file untouched")  # fmt: skip
    args = parser.parse_args(argv)
    if not args.pilot and not args.earlier:
        parser.error("one of the arguments --pilot --earlier is required")
    return args


def _plan(args: argparse.Namespace) -> tuple[Rules, list[Table], list[PlanRow], dict[str, tuple[int, bool]], float]:
    rules = load_rules(args.preset)
    if rules is None:
        raise ConfigError(f"preset {args.preset!r} has no rules (normbench/rules/): nothing to plan")
    tables = read_tables(args.preset, args.pilot, args.earlier)
    check_seeds(rules, args.preset, tables)
    full_scale = {} if args.size_full_scale else full_scale_only_here(rules, args.preset)
    ids = [c.id for c in rules.claims if c.id not in full_scale and judged_here(c.variants, args.preset)]
    check_same_recipe(args.preset, rules, tables, ids)
    pooled = pooled_values(args.preset, tables)
    values = {i: v for i, v in pooled.items() if i not in full_scale}
    judged = [i for i in full_scale if arms_run(pooled, i)]  # not sized, but judged in its Holm family
    rows = [r for t in tables for r in t.rows]
    seconds = args.seconds_per_run if args.seconds_per_run is not None else seconds_per_run(rows)
    settings = settings_of(tables)  # the whole sweep's runs per seed: what the budget buys
    plan = plan_claims(plan_input(rules, list(values), judged), values, variant(args.preset), seconds, args.budget_min,
                       runs_per_seed=settings)  # fmt: skip
    return rules, tables, plan, {i: (n, i in judged) for i, n in full_scale.items()}, seconds


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        rules, tables, plan, full_scale, seconds = _plan(args)
    except (ConfigError, ValueError) as e:
        print(f"normbench-plan: error: {e}", file=sys.stderr)
        return 2
    pilot_rows = [r for t in tables if not t.earlier for r in t.rows]
    if pilot_rows:
        hashes = sorted({str(r["rules_hash"]) for r in pilot_rows})
        print(f"[plan] {args.preset}: {len(pilot_rows)} pilot runs, seeds {sorted({r['seed'] for r in pilot_rows})}, "
              f"measured under rules {', '.join(hashes)} (now {rules.hash})")  # fmt: skip
    for t in (t for t in tables if t.earlier):
        print(f"[plan] pooled with an earlier attempt: {t.path}, {len(t.rows)} runs, seeds {t.seeds}, "
              f"rules {t.rows[0]['rules_hash']}")  # fmt: skip
    print(f"[plan] n is sized from the upper {SD_LEVEL:.0%} one-sided confidence limit of each arm's sd "
          f"(χ², the sd pooled per arm over {len(tables)} table(s)), not the point sd; α is the Holm level α/m "
          "of each claim's family")  # fmt: skip
    marked = full_scale_only_here(rules, args.preset) if args.size_full_scale else {}
    if marked:
        print(f"[plan] --size-full-scale: {', '.join(marked)} sized as if judged at this scale (the rules mark them "
              "full_scale_only); the budget line below counts them")  # fmt: skip
    print(plan_table(plan))
    print(rules_lines(plan, marked))
    arms = [arm for c in rules.claims if judged_here(c.variants, args.preset) for arm in (c.a, c.b)]
    for line in reach_lines(rules.learning, [r for t in tables for r in t.rows], arms):  # can the runs pass it at all?
        print(line)
    for row in (p for p in plan if not p.planned):
        print(f"{row.id}: {row.note}")
    for claim_id, (needs, judged) in full_scale.items():
        where = "its arms run here, so it is judged in its Holm family" if judged else "outside its Holm family"
        print(f"{claim_id}: full-scale only (needs n ≈ {needs}): not sized at this scale; {where}")
    print(summary_line(args.preset, [r for t in tables for r in t.rows], plan, seconds, args.budget_min,
                       settings_of(tables)))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
