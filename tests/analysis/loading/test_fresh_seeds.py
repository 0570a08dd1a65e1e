"""Fresh seeds for every confirmatory attempt (issue 56.5): the rules' confirmatory block of every
preset is disjoint from the seeds every earlier attempt used (its HISTORY.md entries, its last
per_run.csv, its pilot), and normbench-figures refuses a confirmatory table that reuses one."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from normbench.analysis.judging.rules_schema import load_rules
from normbench.analysis.judging.verdicts import check_fresh_seeds
from normbench.analysis.loading.attempts import earlier_seeds, history_seeds, parse_seeds
from normbench.base.errors import ConfigError
from normbench.rules import list_rule_presets
from tests.conftest import REPO

HISTORY = """# History of results/x_cpu

## Attempt 1 — rules aaaa, run at 1111111 (2026-12-01 10:00:00)

- run: commit 1111111, started 2026-12-01 10:00:00 UTC, wall clock 20 min
- runs (runs.csv): 20 runs, seeds 0-4
- what changed and why: first run

## Attempt 2 — rules bbbb, run at 2222222 (2026-12-02 10:00:00)

- run: commit 2222222, started 2026-12-02 10:00:00 UTC, wall clock 20 min
- runs (runs.csv): 24 runs, seeds 5-9, 100-102
- what changed and why: seeds 10-21 were planned (a sentence that names seeds, not a runs line)
"""


def test_seed_lists_and_history_entries_are_read() -> None:
    assert parse_seeds("0-4, 7, 100-102") == {0, 1, 2, 3, 4, 7, 100, 101, 102}
    assert history_seeds(HISTORY) == {*range(10), 100, 101, 102}
    assert history_seeds(HISTORY, commit="2222222abcdef") == set(range(5))  # the attempt judged now is not earlier


@pytest.mark.parametrize("preset", list_rule_presets())
def test_the_confirmatory_block_is_disjoint_from_every_earlier_attempt(preset: str) -> None:
    rules = load_rules(preset)
    assert rules is not None and "cpu" in rules.seeds, f"{preset}: the rules name no confirmatory seed block"
    block = set(range(rules.seeds["cpu"].start, rules.seeds["cpu"].stop))
    folder = REPO / "results" / f"{preset}_cpu"
    table = folder / "per_run.csv"
    rows = list(csv.DictReader(table.read_text().splitlines())) if table.is_file() else []
    if rows and {int(r["seed"]) for r in rows} <= block:  # the folder holds the confirmatory attempt: not earlier
        used = earlier_seeds(folder, [r["source"] for r in rows], rows[0].get("commit") or None)
    else:
        used = earlier_seeds(folder)
    if folder.exists():  # a preset that never ran (a new one: no folder) has no earlier attempt
        assert used, f"{folder}: no earlier attempt's seeds found (HISTORY.md, per_run.csv, pilot/per_run.csv)"
    assert not block & used, f"{preset}: block {sorted(block)[:3]}… reuses {sorted(block & used)}"
    assert not block & set(rules.pilot_seeds)


def test_a_confirmatory_table_that_reuses_a_seed_is_refused(tmp_path: Path) -> None:
    rules = load_rules("gn_groups")
    assert rules is not None
    start = rules.seeds["cpu"].start
    rows = [{"seed": start, "source": "a"}, {"seed": start + 1, "source": "b"}, {"seed": 3, "source": "c"}]
    check_fresh_seeds(rules, {0, 1, 2, 3}, rows)  # seed 3: outside the block, exploratory, allowed
    with pytest.raises(ConfigError) as e:
        check_fresh_seeds(rules, {start + 1}, rows)
    message = str(e.value)
    assert "\n" not in message and f"[{start + 1}]" in message and f"next free in the block: {start + 2}" in message
