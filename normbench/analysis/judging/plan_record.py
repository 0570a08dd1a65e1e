"""A results folder's ``plan.txt`` against its preset's rules (issue 59, item I36).

``plan.txt`` keeps ``normbench-plan``'s printed output: the pilot's spreads, the n each claim needs,
and the keys the rules took from it (``[plan] for the rules``: ``n`` and ``detectable`` per planned
claim, ``full_scale_only`` ``needs_n`` per claim too costly here). Its last section is the plan the
rules were written from (a file with several sections says why, e.g. first with marks taken out,
then "the rules as committed"). Re-running its command is no check (the plan's code moves on), but
its keys must be the rules' own: an edited plan, or rules not updated from their plan, is named.
The whole text is pinned by its digest in ``RUN.txt`` (`normbench.analysis.loading.table_digest`).
"""

from __future__ import annotations

import re
from pathlib import Path

from normbench.analysis.judging.rules_schema import Rules, load_rules
from normbench.base.errors import ConfigError
from normbench.rules import rules_path, variant

PLAN_FILE = "plan.txt"
SECTION = "\n## normbench-plan"
"""Each section of a ``plan.txt`` with several opens with the command's line under this heading."""
_PLANNED = re.compile(r"^  ([\w.\-]+): n: \{(\w+): (\d+)\}(?:, detectable: \{\w+: ([^}]+)\})?$", re.M)
_SIZED_FULL = re.compile(r"^  ([\w.\-]+): full_scale_only: \{needs_n: (\d+)\}", re.M)
_FULL = re.compile(r"^([\w.\-]+): full-scale only \(needs n ≈ (\d+)\)", re.M)

Keys = dict[str, tuple[str, ...]]


def plan_keys(text: str) -> Keys:
    """The keys the last section of a ``plan.txt`` gives the rules, per claim: ``("n", n,
    "detectable", d)`` (d ``-`` for an equivalence claim), or ``("needs_n", n)``."""
    last = text.rsplit(SECTION, 1)[-1]
    keys: Keys = {m[1]: ("n", m[3], "detectable", _number(m[4])) for m in _PLANNED.finditer(last)}
    for m in [*_SIZED_FULL.finditer(last), *_FULL.finditer(last)]:
        keys[m[1]] = ("needs_n", m[2])
    return keys


def rules_keys(rules: Rules, preset: str) -> Keys:
    """The same keys as the rules hold them, for ``preset``'s variant."""
    here, keys = variant(preset), {}
    for c in rules.claims:
        if c.full_scale_only is not None:
            keys[c.id] = ("needs_n", str(c.full_scale_only.needs_n))
        elif here in c.planned_n:
            d = c.planned_detectable.get(here)
            keys[c.id] = ("n", str(c.planned_n[here]), "detectable", "-" if d is None else _number(str(d)))
    return keys


def plan_problems(folder: Path) -> list[str]:
    """One line per claim whose keys in ``folder/plan.txt`` (its last section) differ from the rules
    of the preset the folder is named after; none without a ``plan.txt`` or rules; one line when
    the rules cannot be read (the plan is then not compared, and says so)."""
    plan, preset = folder / PLAN_FILE, folder.name
    try:
        rules = load_rules(preset) if plan.is_file() else None
    except ConfigError as e:
        return [f"{PLAN_FILE} not compared with the rules of {preset}: {e}"]
    if rules is None:
        return []
    planned, held = plan_keys(plan.read_text()), rules_keys(rules, preset)
    where = rules_path(preset).name
    return [f"{PLAN_FILE} gives {cid} {_said(planned.get(cid))}; {where} has {_said(held.get(cid))}: the plan was "
            f"edited, or the rules were not written from it (re-run the command at its head and copy its keys)"
            for cid in sorted(set(planned) | set(held)) if planned.get(cid) != held.get(cid)]  # fmt: skip


def _number(text: str | None) -> str:
    return "-" if text is None else f"{float(text):g}"


def _said(keys: tuple[str, ...] | None) -> str:
    if keys is None:
        return "nothing"
    return ", ".join(f"{k} {v}" for k, v in zip(keys[::2], keys[1::2], strict=True) if v != "-")
