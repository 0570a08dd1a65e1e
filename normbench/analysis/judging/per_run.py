"""``per_run.csv``: one row per run with every value its preset's claims and checks are judged on,
measured once (`per_run_rows`), written and read back exactly (`write_per_run`, `read_per_run`).

Columns, in this order (``RULES_SCHEMA.md``): ``source, seed, status, commit, rules_hash``; one
column per config key that an arm or a check of the rules selects on (sorted); ``claim:<id>``
per claim of the variant (``claim:<id>:a`` / ``claim:<id>:b`` when an arm has its own measure);
``check:<id>`` per check of the variant; ``final:<metric>`` per numeric entry of the runs'
summaries (sorted). A cell is empty where the value does not apply (a run outside the claim's
arms) or was not recorded. A diverged run holds the worst value of each measure (−inf when
higher is better, +inf when lower is; +inf against ``below``, −inf against ``above``), the value
it is judged with. ``rules_hash`` is the hash of the rules the values were measured under.

Floats are written with ``repr`` and config values as JSON where a plain text would read back
as another type, so that `read_per_run` returns the rows `per_run_rows` made, and the claims
judged from the file equal those judged from the runs (`normbench.analysis.judging.claims.judge_rows`).
`read_per_run` vouches for what it reads (`normbench.analysis.judging.evidence`): every run once, finished
or diverged, no NaN measure, one commit and one rules hash, the ``status`` honoured; a header
with no column twice and its config columns before every prefixed one (`evidence.check_header`),
no ±inf in a finished run, selector values written as config values are; with its preset's rules
(issue 59, `vouch_for_rules`): every key they select on a config column, every measure column they
judge present and filled where an arm or a check selects the row, no value that only looks like
an arm's (`evidence.vouch_selector_values`), no blank rules hash.

The measures themselves: functions of one run registered by name (`measure`) by the presets'
analysis modules.
"""

from __future__ import annotations

import csv
import inspect
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from normbench.analysis.judging.evidence import (
    BASE_COLUMNS,
    CHECK,
    CLAIM,
    FINAL,
    SCOPE,
    check_header,
    finite_diverged,
    looks_alike,
    rule_selects,
    rules_under,
    selector_columns,
    vouch_rows,
    vouch_rules_hash,
    vouch_selector_values,
)
from normbench.analysis.judging.evidence import honour_status as honour_status
from normbench.analysis.judging.rules_schema import Arm, CheckRule, ClaimRule, Rules, load_rules
from normbench.analysis.judging.table_checks import (
    ColumnMeasure,
    arms_balanced,
    foreign_columns,
    measured_as_recorded,
    one_setting_per_arm,
)
from normbench.analysis.loading.provenance import git_record
from normbench.analysis.loading.runs import Run, check_seeds_only, config_matches, matching
from normbench.base.errors import ConfigError
from normbench.rules import variant

Row = dict[str, Any]
Measure = Callable[..., float]
MEASURES: dict[str, Measure] = {}
RANGES: dict[str, tuple[float, float]] = {}
"""The values a measure can take (``within`` of `measure`; none: any), which a table's finished
runs are held to (`normbench.analysis.judging.table_checks`)."""


def measure(name: str, within: tuple[float, float] | None = None) -> Callable[[Measure], Measure]:
    """Register ``fn(run, **params) -> float`` as the measure ``name`` that rules refer to;
    ``within``: the closed interval its value always lies in (a fraction: (0, 1))."""

    def register(fn: Measure) -> Measure:
        if name in MEASURES and MEASURES[name] is not fn:
            raise ValueError(f"measure {name!r} is registered twice")
        MEASURES[name] = fn
        if within is not None:
            RANGES[name] = within
        return fn

    return register


def registered_measure(name: str, where: str) -> Measure:
    """The measure a rule names (``where``: which rule, for the error)."""
    if name not in MEASURES:
        raise ConfigError(f"{where}: unknown measure {name!r}; valid choices: {', '.join(sorted(MEASURES))}")
    return MEASURES[name]


def call_measure(fn: Measure, run: Run, params: Mapping[str, Any], runs: Sequence[Run] = ()) -> float:
    """``fn(run, **params)``, with the params its signature names; a measure that names
    ``all_runs`` also gets every run judged (a value at a point common to all runs: equal time)."""
    names = inspect.signature(fn).parameters
    kw = {k: v for k, v in params.items() if k in names}
    if "all_runs" in names:
        kw["all_runs"] = runs
    return float(fn(run, **kw))


def judged_here(variants: Sequence[str], preset: str) -> bool:
    """Whether a claim or check of these ``variants`` is judged in ``preset`` (``x`` or ``x_cpu``)."""
    return variant(preset) in variants


def claim_columns(rule: ClaimRule) -> dict[str, str]:
    """The column of each arm's values (``a``, ``b``): one shared column, or one per arm when an
    arm has its own measure."""
    if rule.a.measure or rule.b.measure:
        return {"a": f"{CLAIM}{rule.id}:a", "b": f"{CLAIM}{rule.id}:b"}
    return {"a": f"{CLAIM}{rule.id}", "b": f"{CLAIM}{rule.id}"}


def selector_keys(rules: Rules) -> list[str]:
    """Every config key an arm or a check of ``rules`` selects on, sorted."""
    selects = [arm.select for r in rules.claims for arm in (r.a, r.b)] + [c.select for c in rules.measured_checks]
    return sorted({k for s in selects for k in s})


SCOPE_KEYS = ("model.name", "model.depth", "model.width", "model.d_model", "model.encoder_layers",
              "model.decoder_layers", "dataset.name")  # fmt: skip
"""The settings a figure's title names (`normbench.analysis.wording.figure_names.scope`: model, depth,
width, layers, data set), kept per run in the table's last columns (``scope:<key>``) so that a
figure redrawn from the committed table names what its runs were, as the one drawn from the runs
did; never selectors (they follow the measure columns)."""


def setting(run: Any, key: str) -> Any:
    """One setting a title names (``model.depth``): a `Run`'s from its typed record (its model's
    default where the config leaves it out; None where its model has no such field), else from its
    config (a run whose config records no model or data set: its record cannot be typed); a
    ``per_run.csv`` row's (`normbench.analysis.figures.figure_record.TableRun`, no record) from the
    column the config key names. The table's ``scope:`` columns and the figures' titles
    (`normbench.analysis.wording.figure_names.scope`) both read it."""
    if not hasattr(type(run), "record"):
        return run.get(key)
    group, _, name = key.partition(".")
    try:
        record = run.record
    except ConfigError:
        return run.get(key)
    return getattr(getattr(record, group, None), name, None)


def _columns(rules: Rules | None, preset: str, runs: Sequence[Run]) -> list[str]:
    cols = list(BASE_COLUMNS)
    if rules is not None:
        cols += selector_keys(rules)
        cols += list(dict.fromkeys(c for r in rules.claims if judged_here(r.variants, preset)
                                   for c in claim_columns(r).values()))  # fmt: skip
        cols += [f"{CHECK}{c.id}" for c in rules.measured_checks if judged_here(c.variants, preset)]
    return cols + sorted({FINAL + k for r in runs for k in _finals(r)}) + [SCOPE + k for k in SCOPE_KEYS]


def _finals(run: Run) -> dict[str, int | float]:
    """The run's numeric summary entries (final metrics, steps, times)."""
    return {k: v for k, v in run.summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _base_row(run: Run, columns: Sequence[str], digest: str) -> Row:
    row: Row = dict.fromkeys(columns)
    git = git_record(run)
    row.update(source=run.source, seed=run.seed, status=run.status, commit=str(git["commit"]) if git else "",
               rules_hash=digest)  # fmt: skip
    for key in columns[len(BASE_COLUMNS) :]:
        if key.startswith(SCOPE):
            row[key] = setting(run, key.removeprefix(SCOPE))
        elif not key.startswith((CLAIM, CHECK, FINAL)):
            row[key] = run.get(key)
    row.update({FINAL + k: v for k, v in _finals(run).items()})
    return row


def _arm_runs(runs: Sequence[Run], arm: Arm) -> list[Run]:
    """The runs of ``arm``, in the order of their seeds; they must be seeds of one setting."""
    members = matching(runs, arm.select)
    check_seeds_only(members, f"arm {arm.label!r}")
    return members


def _values(members: Sequence[Run], runs: Sequence[Run], fn: Measure, params: Mapping[str, Any],
            worst: float) -> list[float]:  # fmt: skip
    """One value per run of ``members``; a diverged run gets ``worst``."""
    return [worst if r.status == "diverged" else call_measure(fn, r, params, runs) for r in members]


def per_run_rows(preset: str, runs: Sequence[Run]) -> list[Row]:
    """One row per run of ``runs`` (in their order), every column of `per_run.csv` filled where it
    applies: each claim's and check's measure computed once per run (``runs``: every judged run,
    for measures that read them all). A `ConfigError` when an arm pools runs that differ in more
    than the seed."""
    rules = load_rules(preset)
    rows = [_base_row(r, _columns(rules, preset, runs), rules.hash if rules else "") for r in runs]
    if rules is None:
        return rows
    row_of = {id(run): row for run, row in zip(runs, rows, strict=True)}
    for rule in (r for r in rules.claims if judged_here(r.variants, preset)):
        where = f"rules of {preset}, {rule.id}"
        for side, column in claim_columns(rule).items():
            arm = rule.a if side == "a" else rule.b
            name, params = (arm.measure, arm.params) if arm.measure else (rule.measure, rule.params)
            members = [r for r in _arm_runs(runs, arm) if row_of[id(r)][column] is None]  # a run of both arms: once
            worst = -math.inf if rule.better == "higher" else math.inf
            values = _values(members, runs, registered_measure(name, where), {**rules.params, **params}, worst)
            for run, value in zip(members, values, strict=True):
                row_of[id(run)][column] = value
    for check in (c for c in rules.measured_checks if judged_here(c.variants, preset)):
        fn = registered_measure(check.measure, f"rules of {preset}, {check.id}")
        members = matching(runs, check.select)
        worst = math.inf if check.below is not None else -math.inf
        for run, value in zip(members, _values(members, runs, fn, {**rules.params, **check.params}, worst)):
            row_of[id(run)][f"{CHECK}{check.id}"] = value
    return rows


def select_rows(rows: Sequence[Row], criteria: Mapping[str, Any]) -> list[Row]:
    """The rows whose selector columns match ``criteria`` (as `normbench.analysis.loading.runs.matching`
    matches a run's config), in the order of their seeds."""
    return sorted((r for r in rows if config_matches(r.get, criteria)), key=lambda r: r["seed"])


def check_column(check: CheckRule) -> str:
    return f"{CHECK}{check.id}"


def _cell(column: str, value: Any) -> str:
    """A value as `per_run.csv` writes it: empty for None, floats with ``repr``; a config value
    as JSON unless it is a text that reads back as itself."""
    if value is None:
        return ""
    if column in BASE_COLUMNS:
        return str(value)
    if column.startswith((CLAIM, CHECK, FINAL)):
        return repr(float(value)) if isinstance(value, float) else str(int(value))
    if isinstance(value, str) and value and _config_value(value) == value:
        return value
    return json.dumps(value)


def _config_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _value(column: str, text: str) -> Any:
    """The inverse of `_cell`."""
    if column == "seed":
        return int(text)
    if column in BASE_COLUMNS:
        return text
    if text == "":
        return None
    if column.startswith((CLAIM, CHECK)):
        return float(text)
    if column.startswith(FINAL):
        return int(text) if text.lstrip("-").isdigit() else float(text)
    return _config_value(text)


def write_per_run(rows: Sequence[Row], path: str | Path) -> Path:
    """``rows`` (`per_run_rows`) as ``per_run.csv`` at ``path``."""
    columns = list(rows[0]) if rows else list(BASE_COLUMNS)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([_cell(k, row[k]) for k in columns])
    return Path(path)


def read_per_run(path: str | Path, preset: str | None = None, *, unfinished: bool = False) -> list[Row]:
    """The rows of a ``per_run.csv`` (`write_per_run`), typed as `per_run_rows` made them, vouched
    for by `vouch_rows` (``unfinished``: keep runs that ended neither finished nor diverged); a
    `ConfigError` in one line naming the file and the bad value when it is not one. ``preset``:
    each diverged run's measures set to their worst value under the rules the table was measured
    with (`honour_status`), after `vouch_for_rules`; without it (or those rules), a diverged run
    with a finite measure is refused."""
    columns, table = _read_table(path)
    try:
        rows = [{k: _value(k, v) for k, v in zip(columns, cells, strict=True)} for cells in table]
    except ValueError as e:
        raise ConfigError(f"--per-run {str(path)!r} holds a cell that is not a number where one belongs: {e}") from None
    vouch_rows(rows, str(path), columns, unfinished)
    if preset:  # the hash the rules had at the table's commit (git, where it can tell)
        vouch_rules_hash(rows, preset, str(path))
    rules = _rules_of_table(rows, preset, str(path))
    vouch_selector_values(rows, str(path), selector_columns(columns), rules)
    if rules is None:
        _no_finite_diverged(rows, str(path), preset)
        return rows
    assert preset is not None
    vouch_for_rules(rows, columns, rules, preset, str(path))
    return honour_status(rows, rules)


def _rules_of_table(rows: Sequence[Row], preset: str | None, where: str) -> Rules | None:
    """The rules the table's (one) ``rules_hash`` names for ``preset`` (`rules_under`); a one-line
    `ConfigError` when the hash is blank though ``preset`` judges by rules (judged under whatever
    rules are current, the table would skip every check that needs its own)."""
    if not preset:
        return None
    digest = str(rows[0]["rules_hash"])
    if not digest.strip() and (current := load_rules(preset)) is not None:
        raise ConfigError(f"{where}: rules_hash is blank, but {preset} judges by rules (now {current.hash}): the "
                          "rules its values were measured under are unknown; write the table again "
                          "(normbench-figures --runs)")  # fmt: skip
    return rules_under(preset, digest)


def _read_table(path: str | Path) -> tuple[list[str], list[list[str]]]:
    """The header (`check_header`) and the rows of cells of a ``per_run.csv``, each as long as the
    header; a one-line `ConfigError` for a file that cannot be read or parsed as CSV (a cell over
    csv's field size limit, a NUL byte)."""
    try:
        with open(path, newline="") as f:
            reader = csv.reader(f)
            try:
                table = list(reader)
            except csv.Error as e:
                raise ConfigError(f"--per-run {str(path)!r}, line {reader.line_num}, cannot be parsed as CSV ({e}): "
                                  "a per_run.csv holds short cells only; write the table again "
                                  "(normbench-figures --runs)") from None  # fmt: skip
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"--per-run {str(path)!r} cannot be read ({type(e).__name__}: {e})") from None
    if table and table[0] and table[0][0].startswith("\ufeff"):
        raise ConfigError(f"--per-run {str(path)!r} starts with a byte-order mark (U+FEFF, an editor's 'UTF-8 with "
                          "BOM'): its first column would not read as 'source'; save it as plain UTF-8")  # fmt: skip
    if not table or tuple(table[0][: len(BASE_COLUMNS)]) != BASE_COLUMNS:
        raise ConfigError(f"--per-run {str(path)!r} is not a per_run.csv (its header does not start with "
                          f"{', '.join(BASE_COLUMNS)})")  # fmt: skip
    columns = table[0]
    check_header(columns, str(path))
    for number, cells in enumerate(table[1:], start=2):
        if len(cells) != len(columns):
            raise ConfigError(f"{path}:{number} has {len(cells)} cells, the header {len(columns)}")
    return columns, table[1:]


def column_measures(rules: Rules, preset: str) -> list[ColumnMeasure]:
    """Each measure column ``rules`` judge in ``preset`` with the rows it applies to, its measure,
    params and range (`normbench.analysis.judging.table_checks`)."""
    specs = []
    for rule in (r for r in rules.claims if judged_here(r.variants, preset)):
        for side, column in claim_columns(rule).items():
            arm = rule.a if side == "a" else rule.b
            name, params = (arm.measure, arm.params) if arm.measure else (rule.measure, rule.params)
            specs.append((column, arm.select, name, {**rules.params, **params}))
    for check in (c for c in getattr(rules, "measured_checks", rules.checks) if judged_here(c.variants, preset)):
        specs.append((check_column(check), check.select, check.measure, {**rules.params, **check.params}))
    return [ColumnMeasure(column, select, name, MEASURES[name], params, RANGES.get(name))
            for column, select, name, params in specs if name in MEASURES]  # fmt: skip


def judged_columns(rules: Rules, preset: str) -> list[tuple[str, Mapping[str, Any]]]:
    """Each measure column ``rules`` judge in ``preset``, with the selector of the rows that must
    hold a value in it (an arm of a claim, a check, a learning bound)."""
    needed: list[tuple[str, Mapping[str, Any]]] = []
    for rule in (r for r in rules.claims if judged_here(r.variants, preset)):
        columns = claim_columns(rule)
        needed += [(columns["a"], rule.a.select), (columns["b"], rule.b.select)]
    checks = getattr(rules, "measured_checks", rules.checks)
    return needed + [(check_column(c), c.select) for c in checks if judged_here(c.variants, preset)]


def vouch_for_rules(rows: Sequence[Row], columns: Sequence[str], rules: Rules, preset: str, where: str) -> None:
    """A one-line `ConfigError` unless the table can be judged by ``rules``: every config key they
    select on is a selector column (`selector_keys`; a key missing or renamed would leave every arm
    empty), every measure column they judge here is present, and every row an arm or a check
    selects holds a value in it."""
    selectors = selector_columns(columns)
    for key in selector_keys(rules):
        if key not in selectors:
            hint = _alike_column(key, columns)
            raise ConfigError(f"{where}: the rules of {preset} select runs on {key!r}, which is not a config column of "
                              f"the table{hint}: no run would be in their arms; write the table again "
                              "(normbench-figures --runs)")  # fmt: skip
    for column, select in judged_columns(rules, preset):
        if column not in columns:
            raise ConfigError(f"{where}: no column {column!r}{_alike_column(column, columns)}, which the rules of "
                              f"{preset} judge: the table was not measured for these rules; measure the runs "
                              "again (normbench-figures --runs)")  # fmt: skip
        if empty := [(i, r) for i, r in enumerate(rows) if r.get(column) is None and config_matches(r.get, select)]:
            i, row = empty[0]
            raise ConfigError(f"{where}: row {i + 1} ({row['source']}) is selected for {column} but its cell is "
                              "empty: the run would be judged without its value; measure the runs again "
                              "(normbench-figures --runs)")  # fmt: skip
    vouch_table(rows, columns, rules, preset, where)


def vouch_table(rows: Sequence[Row], columns: Sequence[str], rules: Rules, preset: str, where: str) -> None:
    """The checks of `normbench.analysis.judging.table_checks` under ``rules`` but the whole attempt
    (`vouch_whole`, which a pilot is not held to): no foreign measure column, each measure as the
    run's own row gives it and in its range, one setting per arm."""
    foreign_columns(columns, [c for c, _ in judged_columns(rules, preset)], preset, where)
    vouch_measures(rows, rules, preset, where)


def vouch_measures(rows: Sequence[Row], rules: Rules, preset: str, where: str) -> None:
    """`vouch_table` but the foreign columns: what a pilot's table, read under the current rules
    by the plan (its own may not be kept), must be in the columns it holds."""
    measured_as_recorded(rows, column_measures(rules, preset), where)
    one_setting_per_arm(rows, rule_selects(rules), where)


def vouch_whole(rows: Sequence[Row], rules: Rules, preset: str, where: str) -> None:
    """A confirmatory attempt's table is the whole attempt: the two arms of each claim judged here
    at the same seeds (`arms_balanced`: a run left out, or added). Not asked of a pilot (its sweep
    may run some settings at fewer seeds: it sizes a plan, it judges nothing)."""
    judged = [r for r in rules.claims if judged_here(r.variants, preset)]
    arms_balanced(rows, [(r.id, r.a.label, r.a.select, r.b.label, r.b.select) for r in judged], where)


def _alike_column(name: str, columns: Sequence[str]) -> str:
    """`` (column 'norm.name ' looks like it)`` where a column differs from ``name`` only as a
    tampered or mistyped one would (`looks_alike`), else ""."""
    near = next((c for c in columns if c != name and looks_alike(c, name)), None)
    return f" (column {near!r} looks like it)" if near else ""


def _no_finite_diverged(rows: Sequence[Row], where: str, preset: str | None = None) -> None:
    """Without the rules, a diverged run's worst value is unknown: one holding another is refused."""
    if found := finite_diverged(rows):
        row, column = found
        if preset:
            how = (f"which the rules of {preset} name, but the table's rules hash {row['rules_hash']!r} is neither "
                   f"the current one nor kept under normbench/rules/superseded/: measure the runs again")  # fmt: skip
        else:
            how = "which its preset's rules name: read the table with its preset"
        raise ConfigError(f"{where}: {row['source']} has status diverged but {column} = {row[column]!r}; a diverged "
                          f"run counts at its measure's worst value, {how}")  # fmt: skip
