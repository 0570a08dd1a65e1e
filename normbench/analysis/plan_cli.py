"""``normbench-plan``: how many seeds per arm a preset needs, read from its pilot runs.

    normbench-plan santurkar_vgg_cpu --pilot results/santurkar_vgg_cpu/pilot/per_run.csv

The pilot runs are the preset's sweep at the rules' pilot seeds (``pilot: {seeds: [...]}`` in
``normbench/rules/<preset>.yaml``; ``bash scripts/reproduce_cpu.sh --pilot <preset>`` runs them and
writes their ``per_run.csv``). Per claim of the preset's variant: the pilot's spread, the effect of
interest the rules name (an equivalence claim: its margin), the seeds per arm for 80 % power at
the preset's α after Holm (planned at Holm's first step, α/k), or for equivalence the n at which
TOST passes with 80 % power at a true difference of 0, the difference the rules' current seeds
could detect, and what the n costs on 2 cores (`normbench.analysis.plan`). Below the table: the
preset's whole sweep at the largest n any judged claim needs, against the budget. A claim whose
n does not fit belongs in the rules as ``full_scale_only: {needs_n: …}``.

The pilot's values are read as measured (``per_run.csv``): the rules may have changed since only
by the plan's own keys (``n``, ``full_scale_only``); the hash recorded with the pilot is printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence

from normbench.analysis.claims import claim_values, judged_at_this_scale
from normbench.analysis.per_run import Row, read_per_run
from normbench.analysis.plan import BUDGET_MIN, CORES, ClaimPlanInput, PlanInput, PlanRow, plan_claims, plan_table
from normbench.analysis.rules_schema import Rules, load_rules
from normbench.base.errors import ConfigError
from normbench.rules import variant

WALL_TIME = "final:wall_time_s"


def plan_input(rules: Rules, ids: Sequence[str]) -> PlanInput:
    """The claims ``ids`` of ``rules`` as the planner takes them (effect of interest, margin, ratio)."""
    by_id = {c.id: c for c in rules.claims}
    claims = tuple(
        ClaimPlanInput(i, by_id[i].relation, by_id[i].test, by_id[i].effect.value if by_id[i].effect else None,
                       by_id[i].margin, by_id[i].test == "welch_log", by_id[i].cell)
        for i in ids
    )  # fmt: skip
    return PlanInput(claims, rules.alpha, rules.min_seeds)


def full_scale_only_here(rules: Rules, preset: str) -> dict[str, int]:
    """The claims ``preset``'s variant does not judge because the rules mark them full-scale only
    (``full_scale_only``, on the CPU variant), with the n they would need."""
    return {c.id: c.full_scale_only.needs_n for c in rules.claims
            if c.full_scale_only is not None and not judged_at_this_scale(c, preset)}  # fmt: skip


def seconds_per_run(rows: Sequence[Row]) -> float:
    """The median wall time of the pilot's runs (``summary.json``'s ``wall_time_s``)."""
    times = [float(r[WALL_TIME]) for r in rows if r.get(WALL_TIME) is not None]
    if not times:
        raise ConfigError(f"the pilot's per_run.csv has no {WALL_TIME!r} column values: pass --seconds-per-run")
    return statistics.median(times)


def sweep_minutes(rows: Sequence[Row], n: int, seconds: float) -> tuple[int, float]:
    """Runs and wall-clock minutes of the preset's whole sweep at ``n`` seeds per setting: the
    pilot's settings (its rows over its distinct seeds), ``n`` runs each, ``CORES`` at a time."""
    settings = len(rows) / max(1, len({r["seed"] for r in rows}))
    runs = round(settings * n)
    return runs, runs * seconds / CORES / 60.0


def summary_line(preset: str, rows: Sequence[Row], plan: Sequence[PlanRow], seconds: float, budget: float) -> str:
    needed = [p.n for p in plan if p.n is not None]
    if not needed:
        return f"{preset}: no claim reaches 80 % power within the search range: mark them full_scale_only"
    n = max(needed)
    runs, minutes = sweep_minutes(rows, n, seconds)
    fits = "fits" if minutes <= budget else "does NOT fit"
    return (f"{preset}: the whole sweep at n = {n} seeds per setting: {runs} runs × {seconds:.0f} s / {CORES} cores "
            f"≈ {minutes:.0f} min, {fits} the {budget:.0f} min budget")  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="normbench-plan", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("preset", help="experiment preset, e.g. santurkar_vgg_cpu")
    parser.add_argument("--pilot", nargs="+", required=True, metavar="PER_RUN_CSV",
                        help="the pilot runs' per_run.csv (normbench-figures --pilot writes it)")  # fmt: skip
    parser.add_argument("--seconds-per-run", type=float, help="cost of one run (default: the pilot's median)")
    parser.add_argument("--budget-min", type=float, default=BUDGET_MIN, help="wall-clock budget on 2 cores")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        rules = load_rules(args.preset)
        if rules is None:
            raise ConfigError(f"preset {args.preset!r} has no rules (normbench/rules/): nothing to plan")
        rows = [row for path in args.pilot for row in read_per_run(path)]
        if not rows:
            raise ConfigError(f"the pilot's per_run.csv ({', '.join(args.pilot)}) holds no runs")
        values = claim_values(args.preset, rows)
        full_scale = full_scale_only_here(rules, args.preset)
        values = {i: v for i, v in values.items() if i not in full_scale}  # they leave the Holm family here
        seconds = args.seconds_per_run or seconds_per_run(rows)
        plan = plan_claims(plan_input(rules, list(values)), values, variant(args.preset), seconds)
    except (ConfigError, ValueError) as e:
        print(f"normbench-plan: error: {e}", file=sys.stderr)
        return 2
    hashes = sorted({str(r["rules_hash"]) for r in rows})
    print(f"[plan] {args.preset}: {len(rows)} pilot runs, seeds {sorted({r['seed'] for r in rows})}, "
          f"measured under rules {', '.join(hashes)} (now {rules.hash})")  # fmt: skip
    print(plan_table(plan))
    for claim_id, needs in full_scale.items():
        print(f"{claim_id}: full-scale only (needs n ≈ {needs}): not planned at this scale, outside its Holm family")
    print(summary_line(args.preset, rows, plan, seconds, args.budget_min))
    return 0


if __name__ == "__main__":
    sys.exit(main())
