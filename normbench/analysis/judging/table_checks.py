"""What a ``per_run.csv`` must be under its rules beyond its cells being there (issue 59, the second
red team): each measure as its run's own record in the row gives it, the arms of a claim the same
seeds, one setting per arm, and no measure column the rules do not judge. A table bent by hand (a
unit changed in half the rows, two claims' columns swapped, a run's row deleted, a value filled in,
a row of another model) passes the cell checks of `normbench.analysis.judging.evidence` and would
judge silently wrong; here it is one `ConfigError` line naming the row, the column and the value.

- `measured_as_recorded`: a finished run's measure lies in the measure's range (`RANGES`:
  a fraction in [0, 1]) and, where the measure reads only what the row holds (the run's summary
  in its ``final:`` columns, its config in the selector columns: ``final``, ``final_error``,
  ``error``, ...), equals the measure computed from the row (`RowRun`); a measure that reads a
  logged series or every run is held to its range only.
- `arms_balanced`: the two arms of a claim, both run, hold the same seeds (a sweep runs every arm
  at every seed; a seed in one arm only is a run left out of the table).
- `one_setting_per_arm`: the runs of an arm agree in every ``scope:`` column (the model, its depth
  and width, the data set), as `normbench.analysis.loading.runs.check_seeds_only` asks of runs.
- `foreign_columns`: every ``claim:`` / ``check:`` column is one the rules judge here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from normbench.analysis.judging.evidence import CHECK, CLAIM, FINAL, SCOPE
from normbench.analysis.loading.runs import Run, config_matches
from normbench.base.errors import ConfigError

Row = dict[str, Any]
REL_TOL, ABS_TOL = 1e-9, 1e-12
"""A recomputed measure equals the cell when it agrees to 9 digits (the table writes ``repr``)."""


class NotInTable(LookupError):
    """What a measure asked of a `RowRun` that the row does not hold (a logged series, a config
    key that is no column): the measure cannot be recomputed from the table."""


@dataclass(frozen=True)
class ColumnMeasure:
    """A measure column of the rules: its name, the rows it applies to, the measure and its params."""

    column: str
    select: Mapping[str, Any]
    name: str
    fn: Callable[..., float]
    params: Mapping[str, Any]
    within: tuple[float, float] | None


class RowRun(Run):
    """A ``per_run.csv`` row as the run a measure reads: its summary from the ``final:`` columns, its
    config from the config columns; anything else (a logged series, the typed record, a key the
    row does not hold) raises `NotInTable`."""

    def __init__(self, row: Row) -> None:
        summary = {k.removeprefix(FINAL): v for k, v in row.items() if k.startswith(FINAL) and v is not None}
        super().__init__(name=str(row["source"]), config={}, history=[], summary={**summary, "status": row["status"]},
                         source=str(row["source"]))
        self._row = row

    def get(self, dotted: str, default: Any = None) -> Any:
        if dotted == "seed":
            return self._row["seed"]
        if dotted not in self._row or dotted.startswith((FINAL, CLAIM, CHECK, SCOPE)):
            raise NotInTable(dotted)
        return self._row[dotted]

    def series(self, key: str) -> Any:
        raise NotInTable(key)

    @property
    def record(self) -> Any:  # type: ignore[override]
        raise NotInTable("record")


def recomputed(spec: ColumnMeasure, row: Row) -> float | None:
    """``spec``'s measure computed from ``row`` alone (`RowRun`); None when the measure needs more
    than the row holds (a series, every run) or fails on it."""
    import inspect

    names = inspect.signature(spec.fn).parameters
    if "all_runs" in names:
        return None
    try:
        value = float(spec.fn(RowRun(row), **{k: v for k, v in spec.params.items() if k in names}))
    except (NotInTable, ArithmeticError, TypeError, ValueError, KeyError):
        return None
    return value if math.isfinite(value) else None


def measured_as_recorded(rows: Sequence[Row], specs: Sequence[ColumnMeasure], where: str) -> None:
    """A one-line `ConfigError` for the first finished run whose measure lies outside its measure's
    range or differs from the measure computed from its own row (module docstring)."""
    for spec in specs:
        for i, row in enumerate(rows):
            value = row.get(spec.column)
            if row["status"] != "finished" or value is None or not config_matches(row.get, spec.select):
                continue
            at = f"{where}: row {i + 1} ({row['source']}) has {spec.column} = {value!r}"
            if spec.within is not None and not spec.within[0] <= value <= spec.within[1]:
                lo, hi = spec.within
                raise ConfigError(f"{at}, outside [{lo:g}, {hi:g}], the values of the measure {spec.name!r}: another "
                                  "unit or another measure's value; measure the runs again "
                                  "(normbench-figures --runs)")  # fmt: skip
            again = recomputed(spec, row)
            if again is not None and not math.isclose(again, value, rel_tol=REL_TOL, abs_tol=ABS_TOL):
                raise ConfigError(f"{at}, but the measure {spec.name!r} of the run's own record in that row (its "
                                  f"{FINAL} columns) is {again!r}: the cell is not this run's measure (another unit, "
                                  "another column's value, edited); measure the runs again "
                                  "(normbench-figures --runs)")  # fmt: skip


def arms_balanced(rows: Sequence[Row], arms: Sequence[tuple[str, str, Mapping[str, Any], str, Mapping[str, Any]]],
                  where: str) -> None:  # fmt: skip
    """A one-line `ConfigError` when a claim's two arms (``(claim, label a, select a, label b, select
    b)``), both in the table, do not hold the same seeds: a seed in one arm only is a run missing."""
    for claim, label_a, select_a, label_b, select_b in arms:
        a = {r["seed"] for r in rows if config_matches(r.get, select_a)}
        b = {r["seed"] for r in rows if config_matches(r.get, select_b)}
        if a and b and a != b:
            have, lack, only = (label_a, label_b, sorted(a - b)) if a - b else (label_b, label_a, sorted(b - a))
            raise ConfigError(f"{where}: {claim}: arm {have!r} has seeds {only} that arm {lack!r} lacks: a sweep runs "
                              "every arm at every seed, so a run is missing from the table (or a row was added); "
                              "judge the whole attempt (normbench-figures --runs)")  # fmt: skip


def one_setting_per_arm(rows: Sequence[Row], selects: Sequence[tuple[str, Mapping[str, Any]]], where: str) -> None:
    """A one-line `ConfigError` when the runs an arm or a check selects differ in a ``scope:``
    column (another model, depth, width or data set pooled into one arm)."""
    scopes = [c for c in (rows[0] if rows else {}) if c.startswith(SCOPE)]
    for name, select in selects:
        members = [(i, r) for i, r in enumerate(rows) if select and config_matches(r.get, select)]
        for column in scopes:
            values = {repr(r.get(column)) for _, r in members}
            if len(values) > 1:
                first, value = members[0][0], members[0][1].get(column)
                i, row = next((i, r) for i, r in members if repr(r.get(column)) != repr(value))
                raise ConfigError(f"{where}: row {i + 1} ({row['source']}) of {name} has {column} = "
                                  f"{row.get(column)!r}, row {first + 1} {value!r}: one arm pools runs of two "
                                  "settings; measure the runs again "
                                  "(normbench-figures --runs)")  # fmt: skip


def foreign_columns(columns: Sequence[str], judged: Sequence[str], preset: str, where: str) -> None:
    """A one-line `ConfigError` for a ``claim:`` / ``check:`` column the rules do not judge here."""
    for column in columns:
        if column.startswith((CLAIM, CHECK)) and column not in judged:
            raise ConfigError(f"{where}: column {column!r} is no claim or check the rules of {preset} judge: the table "
                              "was not written for these rules (or a column was renamed); write the table again "
                              "(normbench-figures --runs)")  # fmt: skip
