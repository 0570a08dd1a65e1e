"""What a per-run table (``per_run.csv``, a pilot's or a confirmatory attempt's) must be before a
verdict or a plan is made from it (issue 59, item 1): the same guarantees `load_local_runs` gives
for run folders, on the table's rows.

- not empty (a header alone judges nothing);
- every run once: no ``source`` twice, and no arm identity and seed twice (an arm's identity is
  the row's config-selector columns, `selector_columns`: those between ``rules_hash`` and the
  first ``claim:`` / ``check:`` / ``final:`` column);
- ``status`` is the truth: runs that ended neither ``finished`` nor ``diverged`` (interrupted,
  killed, failed) are refused unless asked for; a finished run's measure is never NaN (it would be
  dropped silently); a diverged run counts at its measure's worst value (−inf when higher is
  better, +inf when lower is; +inf against ``below``, −inf against ``above``) whatever the table
  holds (`honour_status`);
- one commit and one rules hash.

Each failure is one `ConfigError` line naming the table and the bad value.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Sequence
from typing import Any

from normbench.analysis.judging import rules_schema
from normbench.analysis.judging.rules_schema import Rules
from normbench.analysis.loading.runs import RESULT_STATUSES
from normbench.base.errors import ConfigError
from normbench.rules import RULES_DIR, base_preset, load_rules_data

BASE_COLUMNS = ("source", "seed", "status", "commit", "rules_hash")
CLAIM, CHECK, FINAL = "claim:", "check:", "final:"

Row = dict[str, Any]


def selector_columns(columns: Sequence[str]) -> list[str]:
    """The config-selector columns of a per-run table's header: after the base columns, up to the
    first measure or summary column (`normbench.analysis.judging.per_run` writes them there, sorted)."""
    chosen = []
    for column in list(columns)[len(BASE_COLUMNS) :]:
        if column.startswith((CLAIM, CHECK, FINAL)):
            break
        chosen.append(column)
    return chosen


def measure_columns(columns: Sequence[str]) -> list[str]:
    return [c for c in columns if c.startswith((CLAIM, CHECK))]


def _identity(value: Any) -> Any:
    """A config value as a hashable key (1 and 1.0 alike, as `config_matches` compares them)."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else value


def arm_key(row: Row, selectors: Sequence[str]) -> tuple[Any, ...]:
    """The run's arm identity and seed."""
    return (*(_identity(row.get(k)) for k in selectors), row["seed"])


def vouch_rows(rows: Sequence[Row], where: str, columns: Sequence[str] | None = None, unfinished: bool = False) -> None:
    """A one-line `ConfigError` naming ``where`` and the bad value unless ``rows`` are evidence (the
    module docstring; ``unfinished``: runs of any status are kept). ``columns``: the table's header
    (default: the first row's keys)."""
    if not rows:
        raise ConfigError(f"{where} holds no runs (its header only): there is nothing to judge or plan from")
    columns = list(columns if columns is not None else rows[0])
    _every_run_once(rows, where, selector_columns(columns))
    if not unfinished and (others := [r for r in rows if r["status"] not in RESULT_STATUSES]):
        names = ", ".join(f"{r['source']} ({r['status']})" for r in others[:3])
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        raise ConfigError(f"{where}: {len(others)} run(s) ended neither finished nor diverged: {names}{more}; "
                          "they are not evidence: resume or rerun them, or leave their rows out")  # fmt: skip
    for row in rows:
        if row["status"] == "diverged":
            continue
        for column in measure_columns(columns):
            value = row.get(column)
            if isinstance(value, float) and math.isnan(value):
                raise ConfigError(f"{where}: {column} of {row['source']} (status {row['status']}) is nan: a value "
                                  "that is not a number would be dropped; measure the run again")  # fmt: skip
    for key in ("commit", "rules_hash"):
        if len(values := list(dict.fromkeys(str(r[key]) for r in rows))) > 1:
            first = next(r for r in rows if str(r[key]) == values[1])
            raise ConfigError(f"{where} mixes {key} {values[0]!r} and {values[1]!r} (e.g. {first['source']}): one "
                              "table holds one attempt, made at one commit under one rules hash")  # fmt: skip


def _every_run_once(rows: Sequence[Row], where: str, selectors: Sequence[str]) -> None:
    sources: dict[str, int] = {}
    arms: dict[tuple[Any, ...], int] = {}
    for i, row in enumerate(rows):
        j = sources.setdefault(str(row["source"]), i)
        if j != i:
            raise ConfigError(f"{where}: source {row['source']!r} is in rows {j + 1} and {i + 1}: that run would be "
                              "counted twice; keep each run once")  # fmt: skip
        if not selectors:  # a table of no rules: no arm to count a seed in twice
            continue
        j = arms.setdefault(arm_key(row, selectors), i)
        if j != i:
            arm = ", ".join(f"{k}={row.get(k)}" for k in selectors)
            raise ConfigError(f"{where}: seed {row['seed']} of {arm} is in rows {j + 1} ({rows[j]['source']}) and "
                              f"{i + 1} ({row['source']}): one seed of one setting would be counted twice; "
                              "keep each run once")  # fmt: skip


def worst_values(rules: Rules) -> dict[str, float]:
    """The value a diverged run holds in each measure column of ``rules``: −inf where higher is
    better (a check's ``above``), +inf where lower is (``below``)."""
    worst = {}
    for rule in rules.claims:
        value = -math.inf if rule.better == "higher" else math.inf
        worst.update({f"{CLAIM}{rule.id}": value, f"{CLAIM}{rule.id}:a": value, f"{CLAIM}{rule.id}:b": value})
    for check in getattr(rules, "measured_checks", rules.checks):  # the learning bounds are check columns too
        worst[f"{CHECK}{check.id}"] = math.inf if check.below is not None else -math.inf
    return worst


def honour_status(rows: Sequence[Row], rules: Rules) -> list[Row]:
    """``rows`` with every measure of a diverged run set to its worst value (`worst_values`): a
    run's ``status`` decides whether it diverged, not the number it happens to hold. Cells that do
    not apply (empty) stay empty."""
    worst = worst_values(rules)
    out = []
    for row in rows:
        if row["status"] == "diverged":
            row = {k: (worst[k] if k in worst and v is not None else v) for k, v in row.items()}
        out.append(row)
    return out


def finite_diverged(rows: Sequence[Row]) -> tuple[Row, str] | None:
    """The first diverged run holding a finite or NaN measure, and its column; None if none does."""
    for row in rows:
        if row["status"] != "diverged":
            continue
        for column in measure_columns(list(row)):
            value = row[column]
            if value is not None and not math.isinf(value):
                return row, column
    return None


def rules_under(preset: str, digest: str) -> Rules | None:
    """``preset``'s rules as they were under ``digest``: the current ones, or the copy kept in
    ``normbench/rules/superseded/<preset>-<digest>.yaml`` (`rules_schema.load_rules` with the
    hash where it takes one); None when neither holds them."""
    load = rules_schema.load_rules
    for name in ("digest", "rules_hash"):
        if name in inspect.signature(load).parameters:
            try:
                return load(preset, **{name: digest})
            except ConfigError:
                return None
    current = load(preset)
    if current is not None and current.hash == digest:
        return current
    kept = RULES_DIR / "superseded" / f"{base_preset(preset)}-{digest}.yaml"
    if load_rules_data(preset) is None or not kept.is_file():
        return None
    import yaml

    return rules_schema.parse_rules(yaml.safe_load(kept.read_text()), preset, digest)
