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
- one commit and one rules hash;
- each row as the run recorded itself (issue 59, second red team, `records_agree`): a source
  named; the ``seed`` its ``final:seed`` (the summary's own); ``diverged`` exactly when the summary
  names a ``final:diverged_step``; no two rows holding one run's record (the same ``final:``
  values, wall time included, and measures: one run copied under another seed);
- a header that cannot be bent (issue 59): no column twice, the config-selector columns before
  every prefixed one (`check_header`), selector values written as the rules and the other rows
  write them (`vouch_selector_values`: no whitespace around a value, no control character, no
  stray non-ASCII letter, no value that only *looks like* an arm's), and a finished run's measure
  finite (only a diverged run holds ±inf).

Each failure is one `ConfigError` line naming the table and the bad value.
"""

from __future__ import annotations

import inspect
import json
import math
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from normbench.analysis.judging import rules_schema
from normbench.analysis.judging.rules_schema import Rules
from normbench.analysis.loading.runs import RESULT_STATUSES, config_matches
from normbench.base.errors import ConfigError
from normbench.rules import (
    RULES_DIR,
    UNHASHED,
    base_preset,
    canonical_hash,
    file_hash,
    load_rules_data,
    rules_hash,
    superseded_rules,
)

BASE_COLUMNS = ("source", "seed", "status", "commit", "rules_hash")
CLAIM, CHECK, FINAL = "claim:", "check:", "final:"
SCOPE = "scope:"
"""A per_run.csv column a run's setting takes for titles only (`normbench.analysis.judging.per_run.SCOPE_KEYS`)."""
PREFIXES = (CLAIM, CHECK, FINAL, SCOPE)
"""The prefixed columns (measures, summaries, `SCOPE`): they
follow the base and the config-selector columns, and only prefixed columns follow them."""

Row = dict[str, Any]


def selector_columns(columns: Sequence[str]) -> list[str]:
    """The config-selector columns of a per-run table's header: after the base columns, up to the
    first measure or summary column (`normbench.analysis.judging.per_run` writes them there, sorted)."""
    chosen = []
    for column in list(columns)[len(BASE_COLUMNS) :]:
        if column.startswith(PREFIXES):
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
    records_agree(rows, where)
    if not unfinished and (others := [r for r in rows if r["status"] not in RESULT_STATUSES]):
        names = ", ".join(f"{r['source']} ({r['status']})" for r in others[:3])
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        raise ConfigError(f"{where}: {len(others)} run(s) ended neither finished nor diverged: {names}{more}; "
                          "they are not evidence: resume or rerun them, or leave their rows out")  # fmt: skip
    _finite_unless_diverged(rows, where, measure_columns(columns))
    for key in ("commit", "rules_hash"):
        if len(values := list(dict.fromkeys(str(r[key]) for r in rows))) > 1:
            first = next(r for r in rows if str(r[key]) == values[1])
            raise ConfigError(f"{where} mixes {key} {values[0]!r} and {values[1]!r} (e.g. {first['source']}): one "
                              "table holds one attempt, made at one commit under one rules hash")  # fmt: skip


SEED, DIVERGED_STEP, WALL = (f"{FINAL}{k}" for k in ("seed", "diverged_step", "wall_time_s"))


def records_agree(rows: Sequence[Row], where: str) -> None:
    """A one-line `ConfigError` unless every row reads as its run recorded itself, where the table
    holds the run's summary (its ``final:`` columns, a wall time among them): a ``source`` named, the ``seed`` the run's
    own (``final:seed``), ``status`` diverged exactly when the summary names the step it diverged
    at (``final:diverged_step``), and no row a copy of another's record (`_record_key`)."""
    copies: dict[tuple[Any, ...], int] = {}
    for i, row in enumerate(rows):
        at = f"{where}: row {i + 1} ({row['source']})"
        if not str(row["source"]).strip():
            raise ConfigError(f"{where}: row {i + 1} has a blank source: a run that cannot be traced to its folder is "
                              "not evidence; write the run's folder in it")  # fmt: skip
        if (own := row.get(SEED)) is not None and own != row["seed"]:
            raise ConfigError(f"{at} has seed {row['seed']} but its run recorded {SEED} = {own}: the seed cell is not "
                              "the run's; write the table again (normbench-figures --runs)")  # fmt: skip
        if row.get(WALL) is not None and (row["status"] == "diverged") != (row.get(DIVERGED_STEP) is not None):
            how = ("no final:diverged_step" if row["status"] == "diverged"
                   else f"{DIVERGED_STEP} = {row.get(DIVERGED_STEP)}")  # fmt: skip
            raise ConfigError(f"{at} has status {row['status']!r} but its run's summary records {how}: the status "
                              "is not the run's (diverged exactly when a run records the step it diverged at); "
                              "write the table again (normbench-figures --runs)")  # fmt: skip
        if (key := _record_key(row)) is not None and (j := copies.setdefault(key, i)) != i:
            raise ConfigError(f"{at} holds the same record as row {j + 1} ({rows[j]['source']}): every measure and "
                              f"{FINAL} value alike, {WALL} {row[WALL]!r} included: one run's values copied under "
                              "another run; keep each run once")  # fmt: skip


def _record_key(row: Row) -> tuple[Any, ...] | None:
    """The row's run record (its ``final:`` values but the seed, and its measures) when it holds a
    wall time (a measured duration no two runs share to the last digit) and a measure, else None."""
    if row.get(WALL) is None or all(v is None for k, v in row.items() if k.startswith((CLAIM, CHECK))):
        return None
    return tuple(sorted((k, repr(v)) for k, v in row.items() if k.startswith((FINAL, CLAIM, CHECK)) and k != SEED))


def _finite_unless_diverged(rows: Sequence[Row], where: str, measures: Sequence[str]) -> None:
    """A run that did not diverge holds no NaN (it would be dropped) and no ±inf (it would count as
    diverged: only a diverged run holds its measure's worst value, `honour_status`)."""
    for row in rows:
        if row["status"] == "diverged":
            continue
        for column in measures:
            value = row.get(column)
            if isinstance(value, float) and math.isnan(value):
                raise ConfigError(f"{where}: {column} of {row['source']} (status {row['status']}) is nan: a value "
                                  "that is not a number would be dropped; measure the run again")  # fmt: skip
            if isinstance(value, float) and math.isinf(value):
                raise ConfigError(f"{where}: {column} of {row['source']} (status {row['status']}) is {value}: only a "
                                  "diverged run holds an infinite value (its measure's worst), this run would be "
                                  "counted as diverged; measure the run again, or mark it diverged")  # fmt: skip


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
    hash where it takes one); None when neither holds them. A kept copy whose content does not hash
    to its name (edited after it was kept) is a one-line `ConfigError`."""
    kept = superseded_rules(preset).get(digest)
    if kept is not None and digest != rules_hash(preset) and (held := file_hash(kept)) != digest:
        raise ConfigError(f"{kept.name} (normbench/rules/superseded/) holds rules that hash to {held}, not {digest} "
                          "as its name says: the kept copy was edited; restore it from git")  # fmt: skip
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


def rules_hash_at(preset: str, commit: str, where: str | Path = ".") -> str | None:
    """The hash ``preset``'s rules file had at ``commit`` (git, run in ``where``); None when git
    cannot tell (no git, not a repository, a commit it does not hold, no rules file then)."""
    import subprocess

    path = f"{RULES_DIR.name}/{base_preset(preset)}.yaml"
    top = RULES_DIR.parent.parent  # the checkout the package lies in
    try:
        found = subprocess.run(["git", "show", f"{commit}:normbench/{path}"], cwd=top if top.is_dir() else where,
                               capture_output=True, text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    if found.returncode != 0:
        return None
    import yaml

    try:
        data = yaml.safe_load(found.stdout)
    except yaml.YAMLError:
        return None
    return canonical_hash({k: v for k, v in data.items() if k not in UNHASHED}) if isinstance(data, dict) else None


def vouch_rules_hash(rows: Sequence[Row], preset: str, where: str) -> None:
    """A one-line `ConfigError` when the table's rules hash is not the hash ``preset``'s rules had
    at the table's commit (where git can tell): a hash written in by hand (a superseded one, to be
    judged by old rules) is not the rules the runs were made under."""
    if not rows or not (commit := str(rows[0].get("commit") or "").strip()):
        return
    digest = str(rows[0].get("rules_hash") or "")
    then = rules_hash_at(preset, commit)
    if then is not None and digest and then != digest:
        raise ConfigError(f"{where}: rules_hash {digest} is not the rules {base_preset(preset)} had at the table's "
                          f"commit {commit[:7]} ({then}): the runs were made under {then}; write the table again "
                          "(normbench-figures --runs)")  # fmt: skip


def check_header(columns: Sequence[str], where: str) -> None:
    """A one-line `ConfigError` unless ``columns`` name each column once and lay them out as
    `normbench.analysis.judging.per_run` writes them: the base columns, the config-selector columns,
    then only prefixed ones (`PREFIXES`): a selector column moved among the measures would escape
    the duplicate-run check (`selector_columns`), a column twice would let its last copy win."""
    seen: dict[str, int] = {}
    for number, column in enumerate(columns, start=1):
        if column in seen:
            raise ConfigError(f"{where}: column {column!r} is in the header twice (columns {seen[column]} and "
                              f"{number}): one copy would silently replace the other; keep one")  # fmt: skip
        seen[column] = number
    first = next((c for c in columns[len(BASE_COLUMNS) :] if c.startswith(PREFIXES)), None)
    if first is None:
        return
    for column in columns[seen[first] :]:
        if not column.startswith(PREFIXES):
            raise ConfigError(f"{where}: column {column!r} (column {seen[column]}) follows {first!r}: a config column "
                              "belongs before the first claim:/check:/final:/scope: column, where the duplicate-run "
                              "check reads it; move it there or write the table again (normbench-figures "
                              "--runs)")  # fmt: skip


def rule_selects(rules: Rules) -> list[tuple[str, Mapping[str, Any]]]:
    """Every selector of ``rules`` with its name for an error: each claim's arms, each check (and
    learning bound), each side of an arm-against-arm check (within its check's selector)."""
    selects: list[tuple[str, Mapping[str, Any]]] = []
    for rule in rules.claims:
        selects += [(f"arm {arm.label!r} of {rule.id}", arm.select) for arm in (rule.a, rule.b)]
    for check in getattr(rules, "measured_checks", rules.checks):
        selects.append((f"check {check.id}", check.select))
        if check.tracks is not None:
            selects += [(f"check {check.id}", {**check.select, **side}) for side in (check.tracks.a, check.tracks.b)]
    return selects


def _folded(value: Any) -> Any:
    """A config value as it would read after tidying: text NFKC-normalised, stripped, case-folded
    and unquoted, a number (or a text that holds one) as a float."""
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, (int, float)):
        return float(value)
    text = unicodedata.normalize("NFKC", str(value)).strip().casefold()
    text = text[1:-1].strip() if len(text) > 1 and text[0] == text[-1] and text[0] in "\"'" else text
    try:
        return float(text)
    except ValueError:
        return text


def looks_alike(have: Any, want: Any) -> bool:
    """Whether two config values are equal once tidied (`_folded`; floats to a relative 1e-6)."""
    a, b = _folded(have), _folded(want)
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-6)
    return a == b


def _look_alike(row: Row, selects: Sequence[tuple[str, Mapping[str, Any]]]) -> tuple[str, str, Any] | None:
    """The first selector ``row`` misses but matches once its values are tidied: (its name, the
    key whose value differs, the selector's value); None if there is none."""
    for name, select in selects:
        if not select or config_matches(row.get, select):
            continue
        if all(looks_alike(row.get(k), v) for k, v in select.items()):
            key = next(k for k, v in select.items() if not config_matches(row.get, {k: v}))
            return name, key, select[key]
    return None


def _odd_text(value: str, key: str, column_values: Sequence[Any], named: Sequence[Any]) -> str:
    """Why a selector text is not written as a config value is ("" when it is)."""
    if value != value.strip():
        return f"has whitespace around it (write {value.strip()!r})"
    if bad := [ch for ch in value if unicodedata.category(ch).startswith("C")]:
        return f"holds the control character {bad[0]!r} (U+{ord(bad[0]):04X})"
    others = [v for v in column_values if isinstance(v, str) and v != value]
    if not value.isascii() and value not in named and others and all(v.isascii() for v in others):
        odd = next(ch for ch in value if not ch.isascii())
        return (f"holds the non-ASCII letter {odd!r} ({unicodedata.name(odd, 'unnamed')}) where every other row "
                f"writes {key} in ASCII")  # fmt: skip
    return ""


def vouch_selector_values(rows: Sequence[Row], where: str, selectors: Sequence[str], rules: Rules | None) -> None:
    """A one-line `ConfigError` naming the row, its value and what to write unless every config value
    in the ``selectors`` columns is written as a config value is (`_odd_text`) and, with ``rules``,
    no row misses an arm or a check only by a value that looks like the arm's (`_look_alike`: such a
    row would silently fall out of the arm). Rows in no arm (a setting no claim compares) pass."""
    selects = rule_selects(rules) if rules is not None else []
    for key in selectors:
        column = [row.get(key) for row in rows]
        named = [s[key] for _, s in selects if key in s]
        for i, value in enumerate(column):
            if isinstance(value, str) and (why := _odd_text(value, key, column, named)):
                raise ConfigError(f"{where}: row {i + 1} ({rows[i]['source']}) has {key} = {value!r}, which {why}; "
                                  "write a config value as the run's config holds it: correct the cell")  # fmt: skip
    for i, row in enumerate(rows):
        if found := _look_alike(row, selects):
            name, key, want = found
            raise ConfigError(f"{where}: row {i + 1} ({row['source']}) has {key} = {row.get(key)!r}, which looks like "
                              f"{want!r} of {name} but is not it: the run would silently fall out of it; write "
                              f"{want!r} if the run is that setting's, or leave the row out")  # fmt: skip
