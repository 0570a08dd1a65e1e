"""``plan.txt`` against its preset's rules (issue 59, item I36): the keys the plan gave the rules
are read back from what ``normbench-plan`` prints, every committed plan agrees with its rules, and
an edited plan (or rules not written from it) is named by ``normbench-reports index --check``."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from normbench.analysis.judging import plan_record
from normbench.analysis.judging.plan_cli import rules_lines
from normbench.analysis.judging.plan_record import plan_keys, plan_problems
from normbench.analysis.reports import index
from normbench.base.errors import ConfigError
from tests.faults import fault

RESULTS = Path(__file__).resolve().parents[3] / "results"
PLANS = sorted(RESULTS.glob("*/plan.txt"))


def row(cid: str, n: int, detectable: float, equivalence: bool = False) -> SimpleNamespace:
    return SimpleNamespace(id=cid, variant="cpu", planned=True, n_run=n, n=n, equivalence=equivalence,
                           detectable_run=detectable)  # fmt: skip


def test_the_keys_read_back_are_those_normbench_plan_prints() -> None:
    printed = rules_lines([row("a_beats_b", 12, 1.23456), row("a_as_b", 7, 0.5, equivalence=True)])  # type: ignore[list-item]
    sized = rules_lines([row("c_beats_d", 9, 2.0)], marked={"c_beats_d"})  # type: ignore[list-item]
    keys = plan_keys(f"{printed}\n{sized}\nd_beats_e: full-scale only (needs n ≈ 40): not sized at this scale")
    assert keys == {"a_beats_b": ("n", "12", "detectable", "1.23"), "a_as_b": ("n", "7", "detectable", "-"),
                    "c_beats_d": ("needs_n", "9"), "d_beats_e": ("needs_n", "40")}  # fmt: skip


@pytest.mark.parametrize("plan", PLANS, ids=[p.parent.name for p in PLANS])
def test_every_committed_plan_gives_its_rules_their_keys(plan: Path) -> None:
    assert plan_problems(plan.parent) == []


def copied(tmp_path: Path, preset: str) -> Path:
    folder = tmp_path / "results" / preset
    folder.mkdir(parents=True)
    shutil.copy(RESULTS / preset / "plan.txt", folder / "plan.txt")
    return folder


@fault("plan.txt edited after its run: a pilot spread, n or needs_n (issue 59)",
       "index --check names the folder: the plan's SHA-256 is not RUN.txt's, or its keys not the rules'",
       "one-line")  # fmt: skip
def test_an_edited_n_or_needs_n_is_named(tmp_path: Path) -> None:
    gn = copied(tmp_path, "gn_groups_cpu")
    text = (gn / "plan.txt").read_text()
    assert "  g8_beats_g1: n: {cpu: 15}, detectable: {cpu: 1.52}" in text
    (gn / "plan.txt").write_text(text.replace("g8_beats_g1: n: {cpu: 15}", "g8_beats_g1: n: {cpu: 12}"))
    assert plan_problems(gn) == ["plan.txt gives g8_beats_g1 n 12, detectable 1.52; gn_groups.yaml has n 15, "
                                 "detectable 1.52: the plan was edited, or the rules were not written from it "
                                 "(re-run the command at its head and copy its keys)"]  # fmt: skip
    padding = copied(tmp_path, "bn_padding_cpu")
    text = (padding / "plan.txt").read_text()
    last = text.rindex("padding_hurts_mixed: full-scale only (needs n ≈ 36)")
    (padding / "plan.txt").write_text(text[:last] + text[last:].replace("≈ 36", "≈ 20", 1))
    problems = index.plan_record_problems(tmp_path / "results")
    assert [p.split(": plan.txt gives ")[0] for p in problems] == ["results/bn_padding_cpu", "results/gn_groups_cpu"]
    assert "padding_hurts_mixed needs_n 20; bn_padding.yaml has needs_n 36" in problems[0]


def test_only_the_last_section_is_the_plan_the_rules_took(tmp_path: Path) -> None:
    """bn_padding_cpu's plan.txt sizes two claims unmarked first (n 11), then with the rules as
    committed (full_scale_only, needs_n 36 and 26): the first section is not read as the rules' keys."""
    padding = copied(tmp_path, "bn_padding_cpu")
    first = (padding / "plan.txt").read_text().split("\n## normbench-plan")[1]
    assert plan_keys(first)["padding_hurts_mixed"] == ("n", "11", "detectable", "1.94")
    assert plan_keys((padding / "plan.txt").read_text())["padding_hurts_mixed"] == ("needs_n", "36")
    (padding / "plan.txt").write_text(first)  # the committed file cut to its first section
    assert any("padding_hurts_mixed n 11, detectable 1.94; bn_padding.yaml has needs_n 36" in p
               for p in plan_problems(padding))  # fmt: skip


def test_no_plan_or_no_rules_no_check(tmp_path: Path) -> None:
    (tmp_path / "toy_cpu").mkdir()
    (tmp_path / "toy_cpu" / "plan.txt").write_text("  x: n: {cpu: 3}, detectable: {cpu: 1.0}\n")
    assert plan_problems(tmp_path / "toy_cpu") == [] and plan_problems(tmp_path) == []


def test_rules_that_cannot_be_read_are_named_not_passed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan beside rules that fail to parse is not compared, and the one line says so (it used
    to pass silently, leaving the rules' own error to other checks)."""
    gn = copied(tmp_path, "gn_groups_cpu")

    def broken(preset: str) -> None:
        raise ConfigError(f"rules {preset}: claims[0].n: 'twelve' is not a whole number")

    monkeypatch.setattr(plan_record, "load_rules", broken)
    assert plan_problems(gn) == ["plan.txt not compared with the rules of gn_groups_cpu: rules gn_groups_cpu: "
                                 "claims[0].n: 'twelve' is not a whole number"]  # fmt: skip
