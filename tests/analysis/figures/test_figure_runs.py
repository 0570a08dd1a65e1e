"""tests/analysis/figures/figure_runs.py's `from_rules`: a preset's synthetic runs read from its rules alone
(issue 58, item 3), so a new preset's figures are checked without a writer of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from normbench.analysis.judging.rules_schema import load_rules
from normbench.analysis.loading.runs import load_local_runs, matching
from normbench.rules import list_rule_presets
from tests.analysis.figures.figure_runs import COMMON_KEYS, from_rules, nested, rules_arms, rules_keys
from tests.test_figures import SEEDS


def test_a_dotted_selector_is_the_nested_config_a_run_records() -> None:
    assert nested({"norm.name": "bn", "lr": 0.1, "model.encoder_norm.name": "pn"}) == {
        "norm": {"name": "bn"},
        "lr": 0.1,
        "model": {"encoder_norm": {"name": "pn"}},
    }


@pytest.mark.parametrize("preset", sorted(list_rule_presets()))
def test_every_arm_of_the_rules_gets_its_seeds_and_every_named_key(preset: str, tmp_path: Path) -> None:
    """Each claim's two arms select exactly ``len(SEEDS)`` of the written runs each, and every run
    logs the keys its rules' measures name; the arm named first scores highest."""
    rules = load_rules(preset)
    from_rules(preset)(tmp_path / "runs")
    runs = load_local_runs([tmp_path / "runs"])
    assert len(runs) == len(rules_arms(preset)) * len(SEEDS)
    for claim in rules.claims:
        for arm in (claim.a, claim.b):
            chosen = matching(runs, arm.select)
            assert [r.seed for r in chosen] == list(SEEDS), (claim.id, arm.label)
    keys = rules_keys(preset)
    assert set(COMMON_KEYS) <= set(keys)
    assert all(r.series(key)[0].size > 0 for r in runs for key in keys)
    first, *rest = rules_arms(preset)
    if rest:
        lowest_first = min(r.final("val/acc") for r in matching(runs, first))
        assert max(r.final("val/acc") for r in matching(runs, rest[-1])) < lowest_first
