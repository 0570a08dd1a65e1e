"""Issue 56: the rules as they were before the issue's edits stay loadable by their hash
(``normbench/rules/superseded/``), so the committed ``per_run.csv`` files are judged again with
the new code under the rules they were measured with; the current rules name a learning bound, a
fresh confirmatory seed block and the benchmark-wide family for every preset."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from normbench.analysis.judging.claims import judge_rows
from normbench.analysis.judging.per_run import read_per_run
from normbench.analysis.judging.rules_schema import load_rules
from normbench.analysis.judging.stats import NOT_JUDGED
from normbench.base.errors import ConfigError
from normbench.rules import SUPERSEDED_DIR, file_hash, is_superseded, list_rule_presets, rules_hash, superseded_rules

RESULTS = Path(__file__).resolve().parents[3] / "results"
SUPERSEDED = sorted(SUPERSEDED_DIR.glob("*.yaml"))


def test_eighteen_presets_and_none_of_the_superseded_files_is_listed() -> None:
    presets = list_rule_presets()
    assert len(presets) == 18 and not any("-" in p for p in presets)
    assert {p.stem.rsplit("-", 1)[0] for p in SUPERSEDED} == set(presets)


@pytest.mark.parametrize("path", SUPERSEDED, ids=lambda p: p.stem)
def test_a_superseded_file_keeps_the_hash_in_its_name_and_loads_by_it(path: Path) -> None:
    preset, digest = path.stem.rsplit("-", 1)
    assert file_hash(path) == digest != rules_hash(preset)
    rules = load_rules(f"{preset}_cpu", rules_hash=digest)
    assert rules is not None and rules.hash == digest and rules.superseded and is_superseded(preset, digest)
    assert load_rules(preset, rules_hash=rules_hash(preset)).superseded is False


def test_an_unknown_hash_is_one_line_listing_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="is not one of gn_groups's rules; known: .*current") as e:
        load_rules("gn_groups_cpu", rules_hash="0123456789abcdef")
    assert "\n" not in str(e.value) and all(h in str(e.value) for h in superseded_rules("gn_groups"))


def measured_under_superseded_rules_without_bounds() -> list[str]:
    """The presets whose committed table was measured under superseded rules that predate the learning
    bounds (issue 56): the confirmatory rerun replaces them one by one (gn_groups was the example here
    until its rerun at 7df5e7f)."""
    found = []
    for preset in (p for p in list_rule_presets() if committed(p).exists()):
        digest = read_per_run(committed(preset))[0]["rules_hash"]
        if is_superseded(preset, digest) and not load_rules(f"{preset}_cpu", rules_hash=digest).learning:
            found.append(preset)
    return found


def committed(preset: str) -> Path:
    return RESULTS / f"{preset}_cpu" / "per_run.csv"


KEPT = Path(__file__).with_name("gn_groups_attempt_before_issue56.per_run.csv")
"""gn_groups_cpu's committed per_run.csv before its rerun (git show 4d5213a~1:results/gn_groups_cpu/per_run.csv),
measured under rules that predate the learning bounds: the case stays once every committed table is rerun."""


@pytest.mark.parametrize(
    ("preset", "table"),
    [("gn_groups", KEPT)] + [(p, committed(p)) for p in measured_under_superseded_rules_without_bounds()[:2]],
    ids=lambda v: str(v)[-40:],
)
def test_a_per_run_csv_is_judged_again_under_its_own_superseded_rules(preset: str, table: Path) -> None:
    rows = read_per_run(table)
    claims = judge_rows(f"{preset}_cpu", rows)
    digest = rows[0]["rules_hash"]
    assert digest in superseded_rules(preset) and all(c.rules_hash == digest for c in claims)
    assert not any(c.confirmatory for c in claims)  # superseded rules: exploratory
    judged = [c for c in claims if c.comparison is not None]
    assert judged and all(c.verdict != NOT_JUDGED for c in judged)  # full_scale_only withholds nothing
    assert all(c.reason == "not_run" for c in claims if c.verdict == NOT_JUDGED)


def earlier_seeds(preset: str, block: range | None = None) -> set[int]:
    """The seeds of the committed table and its pilot; the committed table's not, when they all lie
    in ``block`` (the folder holds the confirmatory attempt itself, which drew them from it)."""
    seeds: set[int] = set()
    for path in (committed(preset), committed(preset).parent / "pilot" / "per_run.csv"):
        if path.exists():
            with open(path, newline="") as f:
                found = {int(r["seed"]) for r in csv.DictReader(f)}
            if not (path == committed(preset) and block is not None and found <= set(block)):
                seeds |= found
    return seeds


@pytest.mark.parametrize("preset", list_rule_presets())
def test_every_preset_names_learning_bounds_a_fresh_seed_block_and_the_benchmark_family(preset: str) -> None:
    rules = load_rules(f"{preset}_cpu")
    assert rules.learning and all(b.claim.strip() for b in rules.learning)  # each bound says why
    block = rules.seeds["cpu"]
    used = earlier_seeds(preset, range(block.start, block.stop)) | set(rules.pilot_seeds)
    assert used and not [s for s in used if s in block]
    assert rules.benchmark_family is not None and rules.benchmark_family.method == "bh"


def test_the_seed_blocks_of_the_presets_are_disjoint() -> None:
    blocks = sorted((load_rules(p).seeds["cpu"].start, load_rules(p).seeds["cpu"].stop) for p in list_rule_presets())
    assert all(stop <= nxt for (_, stop), (nxt, _) in zip(blocks, blocks[1:]))


def test_rows_of_two_rules_hashes_are_refused_in_one_line() -> None:
    rows = read_per_run(committed("gn_groups"))
    other = next(h for h in (rules_hash("gn_groups"), *superseded_rules("gn_groups")) if h != rows[0]["rules_hash"])
    rows[0] = {**rows[0], "rules_hash": other}  # every other row: the table's own hash, current or superseded
    with pytest.raises(ConfigError, match="measured under 2 rules") as e:
        judge_rows("gn_groups_cpu", rows)
    assert "\n" not in str(e.value)


def test_rows_of_an_unknown_hash_name_it_and_the_known_ones() -> None:
    rows = [{**r, "rules_hash": "0123456789abcdef"} for r in read_per_run(committed("gn_groups"))]
    with pytest.raises(ConfigError, match="measured under rules '0123456789abcdef'.*known: .*current") as e:
        judge_rows("gn_groups_cpu", rows)
    assert "\n" not in str(e.value)
