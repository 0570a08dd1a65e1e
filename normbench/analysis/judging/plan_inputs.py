"""What ``normbench-plan`` sizes from (issue 56, item 4; issue 59, item 3): the pilot's tables and
the tables of every earlier attempt of the same recipe, each vouched for
(`normbench.analysis.judging.evidence`), then checked together. Each refusal is one `ConfigError` line.

- ``--pilot`` tables hold the rules' pilot seeds only (a confirmatory run is not a pilot), and
  the pilot seeds stay out of the rules' confirmatory seed block;
- ``--earlier`` tables (a results folder stands for its ``per_run.csv`` and ``pilot/per_run.csv``)
  are earlier attempts: their seeds must stay out of the confirmatory block (the next attempt's
  seeds are fresh);
- every table has the same config-selector columns; a table measured under rules that are known
  (current or superseded) must measure every planned claim as the current rules do (the same
  measure, parameters, arms, test and direction); where the tables' hashes differ, every hash's
  rules must be known; a run (a source, or a seed of one setting) is in one table only.

Per claim and arm, the values of each table are kept apart (`pooled_values`), so that the plan pools
the spread around each attempt's own mean (`normbench.analysis.judging.power.pooled_sd`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from normbench.analysis.judging.claims import claim_values
from normbench.analysis.judging.evidence import arm_key, rules_under, selector_columns
from normbench.analysis.judging.per_run import Row, read_per_run, vouch_measures
from normbench.analysis.judging.rules_schema import Rules, load_rules
from normbench.base.errors import ConfigError
from normbench.rules import variant

PER_RUN = "per_run.csv"


@dataclass(frozen=True)
class Table:
    """One vouched-for per-run table: its path, rows and selector columns; ``earlier``: an earlier
    attempt's (else a pilot's)."""

    path: str
    rows: list[Row]
    selectors: tuple[str, ...]
    earlier: bool

    @property
    def seeds(self) -> list[int]:
        return sorted({int(r["seed"]) for r in self.rows})


def table_paths(paths: Sequence[str]) -> list[Path]:
    """The tables ``paths`` name: a file as it is, a folder as its ``per_run.csv`` and its
    ``pilot/per_run.csv`` (those that exist; a folder with neither is refused)."""
    out = []
    for text in paths:
        path = Path(text)
        if not path.is_dir():
            out.append(path)
            continue
        found = [p for p in (path / PER_RUN, path / "pilot" / PER_RUN) if p.is_file()]
        if not found:
            raise ConfigError(f"{text!r} holds no {PER_RUN} nor pilot/{PER_RUN}; pass a results folder or a table")
        out += found
    return out


def read_tables(preset: str, pilots: Sequence[str], earlier: Sequence[str] = ()) -> list[Table]:
    """Every table, read and vouched for (`read_per_run` with ``preset``: diverged runs at their
    worst value); a table named twice, or a run in two tables, is refused."""
    tables: list[Table] = []
    seen: dict[str, str] = {}
    for paths, is_earlier in ((table_paths(pilots), False), (table_paths(earlier), True)):
        for path in paths:
            real = str(path.resolve())
            if real in seen:
                raise ConfigError(f"{path} is passed twice ({seen[real]}): its runs would be counted twice")
            seen[real] = str(path)
            rows = read_per_run(path, preset)
            if (rules := load_rules(preset)) is not None:  # the pilot's own rules are often not kept
                vouch_measures(rows, rules, preset, str(path))
            tables.append(Table(str(path), rows, tuple(selector_columns(list(rows[0]))), is_earlier))
    _runs_once(tables)
    return tables


def _runs_once(tables: Sequence[Table]) -> None:
    where: dict[object, str] = {}
    for table in tables:
        for row in table.rows:
            for key in (("source", str(row["source"])), ("arm", arm_key(row, table.selectors))):
                other = where.setdefault(key, table.path)
                if other != table.path:
                    what = f"run {row['source']}" if key[0] == "source" else f"seed {row['seed']} of one setting"
                    raise ConfigError(f"{what} is in {other} and in {table.path}: a run (or a seed re-run with the "
                                      "same recipe) would be counted twice; pass each attempt's runs once")  # fmt: skip


def check_seeds(rules: Rules, preset: str, tables: Sequence[Table]) -> None:
    """Pilot tables hold the rules' pilot seeds only; no pilot or earlier seed lies in the rules'
    confirmatory seed block of ``preset``'s variant (where the rules name one)."""
    pilot = set(rules.pilot_seeds)
    for table in (t for t in tables if not t.earlier):
        if others := [s for s in table.seeds if s not in pilot]:
            raise ConfigError(f"{table.path} holds seeds {others} that are not the pilot seeds of {preset}'s rules "
                              f"({sorted(pilot) or 'none named'}): confirmatory runs are not a pilot; pass an "
                              "earlier attempt's table with --earlier")  # fmt: skip
    block = (getattr(rules, "seeds", None) or {}).get(variant(preset))
    if block is None:
        return
    for table in tables:
        if inside := [s for s in table.seeds if s in block]:
            what = "pilot" if not table.earlier else "earlier attempt's"
            raise ConfigError(f"{table.path}: {what} seeds {inside} lie in {preset}'s confirmatory seed block "
                              f"[{block.start}, {block.stop}): the confirmatory runs must be fresh seeds; "
                              "name a block no earlier run used")  # fmt: skip


def recipe(rules: Rules, claim_id: str) -> str | None:
    """How ``rules`` measure claim ``claim_id`` (measure, parameters, arms, test, direction) as
    one comparable text; None when they have no such claim."""
    rule = next((c for c in rules.claims if c.id == claim_id), None)
    if rule is None:
        return None
    arms = [(arm.select, arm.measure, arm.params) for arm in (rule.a, rule.b)]
    return json.dumps([rule.measure, {**rules.params, **rule.params}, arms, rule.test, rule.better], sort_keys=True,
                      default=str)  # fmt: skip


def check_same_recipe(preset: str, rules: Rules, tables: Sequence[Table], claim_ids: Sequence[str]) -> None:
    """The tables are of one recipe: the same selector columns, and rules that measure every claim
    of ``claim_ids`` as ``rules`` (the current ones) do (module docstring)."""
    first = tables[0]
    for table in tables[1:]:
        if table.selectors != first.selectors:
            raise ConfigError(f"{first.path} selects on {list(first.selectors)} and {table.path} on "
                              f"{list(table.selectors)}: different recipes are not pooled")  # fmt: skip
    hashes = {str(t.rows[0]["rules_hash"]): t.path for t in tables}
    for digest, path in hashes.items():
        if digest == rules.hash:
            continue
        then = rules_under(preset, digest)
        if then is None and len(hashes) == 1:  # a pilot's rules before the plan's own keys: read as measured
            return
        if then is None:
            raise ConfigError(f"{path} was measured under rules {digest}, which neither normbench/rules nor "
                              "normbench/rules/superseded holds: its recipe cannot be compared with the other "
                              "tables'; pool tables of one rules hash")  # fmt: skip
        if changed := [c for c in claim_ids if recipe(then, c) != recipe(rules, c)]:
            raise ConfigError(f"{path} was measured under rules {digest}, which measure {changed[0]} otherwise than "
                              f"{preset}'s rules now ({rules.hash}): different recipes are not pooled")  # fmt: skip


def pooled_values(preset: str, tables: Sequence[Table]) -> dict[str, tuple[list[list[float]], list[list[float]]]]:
    """Per claim of ``preset``'s variant, each arm's values per table (`claims.claim_values`)."""
    out: dict[str, tuple[list[list[float]], list[list[float]]]] = {}
    for table in tables:
        for claim_id, (a, b) in claim_values(preset, table.rows).items():
            arms = out.setdefault(claim_id, ([], []))
            arms[0].append(a)
            arms[1].append(b)
    return out
