"""``normbench-plan``: the rules' effects and the pilot's per_run.csv in, seeds per arm out — the
numbers checked against scipy's χ² limit of the pilot's sd (sd 1 on 2 df: 2.12) and the power
formula; every way a pilot could mislead the plan (issue 59, item 3) refused in one line."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from scipy import stats as sps

from normbench.analysis.judging import rules_schema
from normbench.analysis.judging.per_run import read_per_run, write_per_run
from normbench.analysis.judging.plan_cli import main, sweep_minutes
from normbench.analysis.judging.power import n_for_power
from normbench.base.errors import ConfigError
from tests.faults import fault

RULES: dict[str, Any] = {
    "preset": "toy", "paper_title": "Toy 2026", "alpha": 0.05, "family": "holm", "min_seeds": 5,
    "scale": {"full": {"kind": "paper", "note": ""}, "cpu": {"kind": "reduced", "note": ""}},
    "pilot": {"seeds": [100, 101, 102]},
    "claims": [{
        "id": "bn_higher", "figure": "toy", "claim": "BN higher", "paper": "Toy 2026, Table 1",
        "measure": {"name": "final", "key": "val/acc"},
        "a": {"label": "BN", "select": {"norm.name": "bn"}}, "b": {"label": "none", "select": {"norm.name": "none"}},
        "relation": "greater", "better": "higher", "test": "welch",
        "effect": {"value": 1.0, "source": "Toy 2026, Table 1"},
    }],
}  # fmt: skip


def use_rules(
    monkeypatch: pytest.MonkeyPatch, rules: dict[str, Any], digest: str = "toyhash", superseded: dict | None = None
) -> dict[str, Any]:
    """``rules`` as every preset's rules, current under ``digest`` (whatever the hash helper is
    named); ``superseded``: earlier rules by their hash."""

    def load(preset: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        asked = (list(args) + list(kwargs.values()) + [None])[0]
        if asked in (superseded or {}):
            return superseded[asked]
        if asked not in (None, digest):
            raise ConfigError(f"rules hash {asked!r} is not one of {preset}'s rules; known: {digest} (current)")
        return rules

    monkeypatch.setattr(rules_schema, "load_rules_data", load)
    for name in ("rules_hash", "current_hash"):
        if callable(getattr(rules_schema, name, None)):
            monkeypatch.setattr(rules_schema, name, lambda preset: digest)
    return rules


@pytest.fixture
def toy_rules(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    return use_rules(monkeypatch, dict(RULES))


def pilot_csv(path: Path, wall_s: float = 60.0) -> Path:
    """Three pilot seeds per arm whose values have a sample sd of exactly 1 in each arm."""
    rows = [{"source": f"runs/{norm}{seed}", "seed": seed, "status": "finished", "commit": "c", "rules_hash": "old",
             "norm.name": norm, "claim:bn_higher": base + (seed - 101), "final:wall_time_s": wall_s}
            for norm, base in (("bn", 10.0), ("none", 0.0)) for seed in (100, 101, 102)]  # fmt: skip
    return write_per_run(rows, path)


UPPER_2DF = math.sqrt(2 / sps.chi2.ppf(0.2, 2))
"""The upper 80 % confidence limit of σ from a sample sd of 1 on 2 degrees of freedom (three seeds)."""


def test_plan_reads_effect_and_pilot_spread(toy_rules: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """Sd 1 in each arm on three seeds: n is sized from the upper limit 2.12, not from 1 (which
    gives the textbook 17)."""
    assert main(["toy_cpu", "--pilot", str(pilot_csv(tmp_path / "per_run.csv")), "--budget-min", "100"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| bn_higher"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    n = n_for_power(1.0, UPPER_2DF, UPPER_2DF, 0.05)
    assert n > 17 and str(n) in cells and f"1; 1 → {UPPER_2DF:.3g}; {UPPER_2DF:.3g} (df 2; 2)" in cells
    # the whole sweep: 2 settings × n seeds × 60 s / 2 cores
    assert f"{2 * n} runs" in out and f"≈ {2 * n * 60 / 2 / 60:.0f} min, fits the 100 min budget" in out
    assert "measured under rules old (now toyhash)" in out
    assert "upper 80% one-sided confidence limit of each arm's sd" in out and "Holm level α/m" in out


def test_plan_without_an_effect_is_one_line(toy_rules: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    toy_rules["claims"] = [{k: v for k, v in RULES["claims"][0].items() if k != "effect"}]
    assert main(["toy_cpu", "--pilot", str(pilot_csv(tmp_path / "per_run.csv"))]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bn_higher: effect=None" in err


def test_sweep_minutes_counts_settings_over_seeds() -> None:
    rows = [{"seed": s} for s in (100, 101, 102) for _ in range(4)]  # 4 settings, 3 seeds
    assert sweep_minutes(rows, 10, 120.0) == (40, 40.0)


@pytest.mark.parametrize("arms_run", [False, True])
def test_a_full_scale_only_claim_is_not_sized_and_joins_its_family_where_its_arms_run(
    toy_rules: dict, tmp_path: Path, capsys: pytest.CaptureFixture, arms_run: bool
) -> None:
    """A second claim marked full-scale only is not sized on the CPU variant. Where its arms do not
    run (GN is not in the pilot) it leaves the first claim's α at 0.05; where they run it is judged
    (issue 56, item 1), so the family holds two claims and the first is planned at α/2."""
    second = {**RULES["claims"][0], "id": "bn_higher_early", "full_scale_only": {"needs_n": 211, "why": "too noisy"}}
    if not arms_run:
        second["b"] = {"label": "GN", "select": {"norm.name": "gn"}}
    toy_rules["claims"] = [RULES["claims"][0], second]
    rows = read_per_run(pilot_csv(tmp_path / "one.csv"))
    early = [{**r, "claim:bn_higher_early": r["claim:bn_higher"] if arms_run or r["norm.name"] == "bn" else None}
             for r in rows]  # fmt: skip
    assert main(["toy_cpu", "--pilot", str(write_per_run(early, tmp_path / "two.csv"))]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("| bn_higher |"))
    alpha = 0.025 if arms_run else 0.05
    assert str(n_for_power(1.0, UPPER_2DF, UPPER_2DF, alpha)) in [c.strip() for c in row.strip("|").split("|")]
    assert not any(line.startswith("| bn_higher_early") for line in out.splitlines())
    where = "its arms run here, so it is judged in its Holm family" if arms_run else "outside its Holm family"
    assert f"bn_higher_early: full-scale only (needs n ≈ 211): not sized at this scale; {where}" in out


def one_line_error(capsys: pytest.CaptureFixture) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("normbench-plan: error: "), err
    return err


@fault("duplicated pilot rows given to normbench-plan (issue 59)",
       "one line naming the source in two rows, exit 2; no plan",
       "one-line")  # fmt: skip
def test_duplicated_pilot_rows_are_refused(toy_rules: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = pilot_csv(tmp_path / "per_run.csv")
    text = path.read_text().splitlines(keepends=True)
    path.write_text("".join(text + text[1:]))  # the table concatenated with itself: 12 "runs"
    assert main(["toy_cpu", "--pilot", str(path)]) == 2
    assert "source 'runs/bn100' is in rows 1 and 7" in one_line_error(capsys)


@fault("a one-seed pilot given to normbench-plan (issue 59)",
       "one line: too few pilot seeds, naming the claim, exit 2",
       "one-line")  # fmt: skip
def test_a_one_seed_pilot_is_too_few_pilot_seeds(toy_rules: dict, tmp_path: Path, capsys) -> None:
    rows = [r for r in read_per_run(pilot_csv(tmp_path / "three.csv")) if r["seed"] == 100]
    assert main(["toy_cpu", "--pilot", str(write_per_run(rows, tmp_path / "one.csv"))]) == 2
    assert "too few pilot seeds: claim bn_higher has 1 and 1 finite values" in one_line_error(capsys)


BAD_TIMES = [
    ("--seconds-per-run", "-10", "seconds"),
    ("--seconds-per-run", "0", "seconds"),
    ("--budget-min", "-5", "minutes"),
    ("--budget-min", "0", "minutes"),
    ("--budget-min", "nan", "minutes"),
]


@fault("normbench-plan --seconds-per-run or --budget-min of 0, below 0 or nan (issue 59)",
       "one line naming the flag and the value, exit 2",
       "one-line")  # fmt: skip
@pytest.mark.parametrize("flag, value, unit", BAD_TIMES)
def test_non_positive_times_and_budgets_are_refused(toy_rules: dict, tmp_path: Path, capsys, flag: str, value: str,
                                                     unit: str) -> None:  # fmt: skip
    with pytest.raises(SystemExit) as exit_:
        main(["toy_cpu", "--pilot", str(pilot_csv(tmp_path / "per_run.csv")), flag, value])
    assert exit_.value.code == 2
    assert f"argument {flag}: '{value}' is not a number of {unit} > 0" in one_line_error(capsys)


@fault("confirmatory seeds given to normbench-plan as a pilot or an earlier attempt (issue 59)",
       "one line naming the seeds and the rules' pilot seeds or confirmatory block, exit 2",
       "one-line")  # fmt: skip
def test_confirmatory_seeds_are_not_a_pilot(toy_rules: dict, tmp_path: Path, capsys) -> None:
    rows = [
        {**r, "seed": r["seed"] - 100, "source": f"{r['source']}c"} for r in read_per_run(pilot_csv(tmp_path / "p.csv"))
    ]
    assert main(["toy_cpu", "--pilot", str(write_per_run(rows, tmp_path / "confirmatory.csv"))]) == 2
    assert "holds seeds [0, 1, 2] that are not the pilot seeds of toy_cpu's rules ([100, 101, 102])" in one_line_error(
        capsys
    )


def earlier_csv(path: Path, rules_hash: str = "old", seeds: tuple[int, ...] = (0, 1, 2, 3, 4, 5), **extra: Any) -> Path:
    """An earlier attempt: six seeds per arm, BN's sd 2 (values 10 + 2·z), none's sd 1, its own means."""
    z = [-1.5, -0.5, 0.5, 1.5, -1.0, 1.0][: len(seeds)]
    rows = [{"source": f"old/{norm}{seed}", "seed": seed, "status": "finished", "commit": "e", "rules_hash": rules_hash,
             "norm.name": norm, **extra, "claim:bn_higher": base + scale * zi, "final:wall_time_s": 60.0}
            for norm, base, scale in (("bn", 30.0, 2.0), ("none", 5.0, 1.0)) for seed, zi in zip(seeds, z)]  # fmt: skip
    return write_per_run(rows, path)


def test_earlier_attempts_pool_per_arm(toy_rules: dict, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The pilot (sd 1, 2 df per arm) with an earlier attempt of the same rules hash (6 seeds: 5 df):
    BN's sd pooled around each table's mean, sqrt((2·1 + 5·s²)/7), sized at its upper limit on 7 df;
    a results folder stands for its per_run.csv and pilot/per_run.csv."""
    folder = tmp_path / "results" / "toy_cpu"
    (folder / "pilot").mkdir(parents=True)
    pilot, earlier = pilot_csv(folder / "pilot" / "per_run.csv"), earlier_csv(folder / "per_run.csv")
    rows = read_per_run(earlier)
    var = {norm: sps.tvar([r["claim:bn_higher"] for r in rows if r["norm.name"] == norm]) for norm in ("bn", "none")}
    sd = {norm: math.sqrt((2 * 1.0 + 5 * v) / 7) for norm, v in var.items()}
    upper = {norm: s * math.sqrt(7 / sps.chi2.ppf(0.2, 7)) for norm, s in sd.items()}
    n = n_for_power(1.0, upper["bn"], upper["none"], 0.05)
    for args in (["--pilot", str(pilot), "--earlier", str(earlier)], ["--pilot", str(pilot), "--earlier", str(folder)]):
        if args[-1] == str(folder):  # the folder names the pilot too: passed twice
            assert main(["toy_cpu", *args]) == 2 and "is passed twice" in one_line_error(capsys)
            continue
        assert main(["toy_cpu", *args, "--budget-min", "1000"]) == 0
        out = capsys.readouterr().out
        row = next(line for line in out.splitlines() if line.startswith("| bn_higher"))
        assert "(df 7; 7)" in row and f" {n} |" in row
        assert "pooled with an earlier attempt" in out and "seeds [0, 1, 2, 3, 4, 5]" in out


def test_tables_of_other_recipes_or_the_same_runs_are_not_pooled(toy_rules: dict, tmp_path: Path, capsys) -> None:
    pilot = str(pilot_csv(tmp_path / "pilot.csv"))
    other_hash = earlier_csv(tmp_path / "other_hash.csv", rules_hash="unknownhash")
    assert main(["toy_cpu", "--pilot", pilot, "--earlier", str(other_hash)]) == 2
    assert ", which neither normbench/rules nor normbench/rules/superseded holds" in one_line_error(capsys)
    more_columns = earlier_csv(tmp_path / "more.csv", **{"norm.zz": 1})
    assert main(["toy_cpu", "--pilot", pilot, "--earlier", str(more_columns)]) == 2
    assert "selects on ['norm.name'] and" in one_line_error(capsys)
    rerun = earlier_csv(tmp_path / "rerun.csv", seeds=(100, 7, 8))
    assert main(["toy_cpu", "--pilot", pilot, "--earlier", str(rerun)]) == 2
    assert "seed 100 of one setting is in" in one_line_error(capsys)


def test_an_equivalence_that_cannot_pass_is_not_planned(toy_rules: dict, tmp_path: Path, capsys) -> None:
    toy_rules["claims"] = [{**{k: v for k, v in RULES["claims"][0].items() if k != "effect"}, "relation": "equivalent",
                            "margin": 0.5}]  # fmt: skip
    assert main(["toy_cpu", "--pilot", str(pilot_csv(tmp_path / "per_run.csv"))]) == 0
    out = capsys.readouterr().out
    line = next(line for line in out.splitlines() if line.startswith("bn_higher: "))
    assert line.startswith("bn_higher: equivalence not planned: TOST at n = 45 has power") and "it needs n = " in line
    assert "toy_cpu: no claim can be planned within the budget" in out


def test_an_earlier_attempt_under_rules_that_measure_otherwise_is_not_pooled(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Superseded rules "v1" that differ only in the effect of interest pool; "v0", whose claim
    read another key, do not."""
    claim = RULES["claims"][0]
    v1 = {**RULES, "claims": [{**claim, "effect": {"value": 3.0, "source": "Toy 2026, Table 1"}}]}
    v0 = {**RULES, "claims": [{**claim, "measure": {"name": "final", "key": "val/loss"}}]}
    use_rules(monkeypatch, dict(RULES), superseded={"v1": v1, "v0": v0})
    assert main(["toy_cpu", "--earlier", str(earlier_csv(tmp_path / "v0.csv", "v0"))]) == 2
    assert "measured under rules v0, which measure bn_higher otherwise than toy_cpu's rules now" in one_line_error(
        capsys
    )
    assert main(["toy_cpu", "--earlier", str(earlier_csv(tmp_path / "v1.csv", "v1"))]) == 0
    assert "(df 5; 5)" in capsys.readouterr().out


def test_a_claim_that_does_not_fit_runs_the_seeds_the_whole_sweep_affords(
    toy_rules: dict, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Three settings (GN beside the claim's two arms) at 60 s a run: 45 min on 2 cores buy
    45·60·2 / (60·3) = 30 seeds of the whole sweep, short of the claim's n (sd 2.12: 72); the plan
    runs 30 and states what 30 detect at α 0.05: (t_{.975,ν} + t_{.8,ν})·2.12·sqrt(2/30), ν = 58."""
    rows = read_per_run(pilot_csv(tmp_path / "two.csv"))
    gn = [{**r, "source": r["source"].replace("none", "gn"), "norm.name": "gn", "claim:bn_higher": None}
          for r in rows if r["norm.name"] == "none"]  # fmt: skip
    assert main(["toy_cpu", "--pilot", str(write_per_run(rows + gn, tmp_path / "three.csv"))]) == 0
    out = capsys.readouterr().out
    cells = [c.strip() for c in next(x for x in out.splitlines() if x.startswith("| bn_higher")).strip("|").split("|")]
    detect = (sps.t.ppf(0.975, 58) + sps.t.ppf(0.8, 58)) * UPPER_2DF * math.sqrt(2 / 30)
    assert cells[5] == str(n_for_power(1.0, UPPER_2DF, UPPER_2DF, 0.05)) and cells[9] == "no"
    assert cells[10] == "30" and float(cells[11]) == pytest.approx(detect, rel=5e-3)
    assert "the whole sweep at n = 30 seeds per setting: 90 runs × 60 s / 2 cores ≈ 45 min, fits" in out


@fault("confirmatory seeds given to normbench-plan as a pilot or an earlier attempt (issue 59)",
       "one line naming the seeds and the rules' pilot seeds or confirmatory block, exit 2",
       "one-line")  # fmt: skip
@pytest.mark.parametrize("where", ["earlier", "pilot"])
def test_seeds_in_the_confirmatory_block_are_refused(toy_rules: dict, tmp_path: Path, capsys, where: str) -> None:
    """The rules' confirmatory block [0, 10) on the CPU variant: an earlier attempt that ran seeds
    0-5 leaves no fresh block; a block that holds the pilot seeds (100-102) is no block at all."""
    start = 0 if where == "earlier" else 100
    toy_rules["seeds"] = {"cpu": {"start": start, "stop": start + 10}}
    args = ["--earlier", str(earlier_csv(tmp_path / "e.csv"))] if where == "earlier" else []
    assert main(["toy_cpu", "--pilot", str(pilot_csv(tmp_path / "p.csv")), *args]) == 2
    seeds, block = ("[0, 1, 2, 3, 4, 5]", "[0, 10)") if where == "earlier" else ("[100, 101, 102]", "[100, 110)")
    what = "earlier attempt's" if where == "earlier" else "pilot"
    assert f"{what} seeds {seeds} lie in toy_cpu's confirmatory seed block {block}" in one_line_error(capsys)


def test_size_full_scale_sizes_a_marked_claim_from_the_pilot_as_if_unmarked(
    toy_rules: dict, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """``--size-full-scale``: the claim the rules mark full-scale only is sized from the pilot (its
    row and n as an unmarked twin's, in a family of two: α/2), and the rules key printed is its
    ``needs_n``, the rules file untouched; without the flag it is not sized."""
    second = {**RULES["claims"][0], "id": "bn_higher_early", "full_scale_only": {"needs_n": 211, "why": "too noisy"}}
    toy_rules["claims"] = [RULES["claims"][0], second]
    rows = [{**r, "claim:bn_higher_early": r["claim:bn_higher"]} for r in read_per_run(pilot_csv(tmp_path / "p.csv"))]
    pilot = str(write_per_run(rows, tmp_path / "two.csv"))
    assert main(["toy_cpu", "--pilot", pilot, "--size-full-scale"]) == 0
    out = capsys.readouterr().out
    n = n_for_power(1.0, UPPER_2DF, UPPER_2DF, 0.025)
    for claim_id in ("bn_higher", "bn_higher_early"):
        row = next(line for line in out.splitlines() if line.startswith(f"| {claim_id} |"))
        assert str(n) in [c.strip() for c in row.strip("|").split("|")]
    assert f"  bn_higher_early: full_scale_only: {{needs_n: {n}}}  (the sweep's n: {{cpu: " in out
    assert "bn_higher_early sized as if judged at this scale" in out
    assert "not sized at this scale" not in out
    assert second["full_scale_only"] == {"needs_n": 211, "why": "too noisy"}
    assert main(["toy_cpu", "--pilot", pilot]) == 0
    assert "bn_higher_early: full-scale only (needs n ≈ 211): not sized at this scale" in capsys.readouterr().out
