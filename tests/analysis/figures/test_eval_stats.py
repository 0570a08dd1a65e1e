"""The bn_eval_stats preset (EMA vs population statistics at test time): its figure and its paired
claims from synthetic run directories, and its arms as composed."""

from __future__ import annotations

from pathlib import Path

import pytest

from normbench.analysis.judging.stats import EQUIVALENT, OPPOSITE, SUPPORTED
from normbench.base.errors import ConfigError
from tests.conf.test_compose import compose_cfg
from tests.test_figures import SEEDS, assert_point, build, claim_row, claims, read_csv, write_run

ARMS = {"ordinary": (128, 0.1), "slow_ema": (128, 0.01), "small_batch": (8, 0.1)}


def write_sweep(root: Path, gain: dict[str, list[float]], dist: dict[str, float], seeds=SEEDS) -> None:
    """Every arm x seed: EMA accuracy 0.6 + 0.05·seed (a spread between seeds far larger than any
    gain), population accuracy that plus ``gain[arm][seed]``; the variance distance ``dist[arm]·(1 + 0.1·seed)``."""
    job = 0
    for arm, (batch, momentum) in ARMS.items():
        for seed in seeds:
            ema = 0.6 + 0.05 * seed
            rows = [
                {"step": 10 * e, "epoch": e, "val/acc": ema - 0.1 / e, "val/acc_population": ema - 0.1 / e
                 + gain[arm][seed], "eval_stats/first_layer/var_dist": dist[arm] * (1 + 0.1 * seed) / e}
                for e in (1, 2)
            ]  # fmt: skip
            norm = {"name": "bn", "momentum": momentum, "eval_stats": "both"}
            cfg = {"batch_size": batch, "norm": norm, "seed": seed}
            write_run(root, job, cfg, rows, {"step": 20})
            job += 1


def test_paired_claims_see_the_gain_that_the_seeds_spread_would_hide(tmp_path: Path) -> None:
    gain = {
        "ordinary": [0.001, -0.002, 0.0, 0.002, -0.001],  # within the 1-point margin, tightly
        "slow_ema": [0.020, 0.025, 0.018, 0.022, 0.030],  # 2 points better, every seed
        "small_batch": [-0.010, -0.012, -0.008, -0.011, -0.009],  # 1 point worse, every seed
    }
    write_sweep(tmp_path / "runs", gain, {"ordinary": 0.01, "slow_ema": 0.1, "small_batch": 0.02})
    out = tmp_path / "out"
    build("bn_eval_stats_cpu", tmp_path / "runs", out)
    verdicts = claims(out)
    assert verdicts["agree_ordinary"] == EQUIVALENT
    assert verdicts["population_better_slow_ema"] == SUPPORTED
    assert verdicts["population_better_small_batch"] == OPPOSITE  # the claim can fail, and reads so
    assert verdicts["estimates_apart_slow_ema"] == SUPPORTED
    # the early evaluations' claims (the pilot asked n ≈ 211 and 42) are judged where their arms ran (issue 56)
    assert verdicts["population_better_slow_ema_early"] == verdicts["population_better_slow_ema_at_drop"] == SUPPORTED
    full = tmp_path / "full"
    build("bn_eval_stats", tmp_path / "runs", full)
    assert claims(full)["population_better_slow_ema_early"] == SUPPORTED  # the gain is there at every evaluation
    assert claims(full)["population_better_slow_ema_at_drop"] == SUPPORTED
    row = claim_row(out, "population_better_slow_ema")
    assert row["test"] == "paired" and float(row["estimate"]) == pytest.approx(sum(gain["slow_ema"]) / 5)
    rows = read_csv(out / "bn_eval_stats.csv")
    assert_point(rows, "population_gain", "batch 128, momentum 0.01", 1.0, gain["slow_ema"])
    assert_point(rows, "val_acc", "batch 8, momentum 0.1: population", 2,  # x: the epoch
                 [0.55 + 0.05 * s + g for s, g in zip(SEEDS, gain["small_batch"])])  # fmt: skip


def test_unpaired_spread_leaves_the_same_gain_inconclusive(tmp_path: Path) -> None:
    """The same 2-point gain judged as two independent arms (Welch) drowns in the 5-point spread
    between seeds: why the rules pair the two evaluations of each run."""
    from normbench.analysis.judging.stats import compare

    ema = [0.6 + 0.05 * s for s in SEEDS]
    population = [a + g for a, g in zip(ema, [0.020, 0.025, 0.018, 0.022, 0.030])]
    assert compare(population, ema, "welch").p > 0.3 and compare(population, ema, "paired").p < 0.01


def test_paired_arms_must_hold_the_same_seeds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A paired rule over two arms whose seeds differ (a run missing) is refused, not mispaired."""
    import shutil

    from normbench.analysis.judging import claims as claims_module
    from normbench.analysis.judging import rules_schema

    write_sweep(tmp_path / "runs", {arm: [0.0] * 5 for arm in ARMS}, dict.fromkeys(ARMS, 0.01))
    shutil.rmtree(tmp_path / "runs" / "9")  # slow_ema, seed 4
    rule = {
        "id": "c", "figure": "bn_eval_stats", "claim": "c", "measure": {"name": "final", "key": "val/acc"},
        "a": {"label": "a", "select": {"norm.momentum": 0.1, "batch_size": 128}},
        "b": {"label": "b", "select": {"norm.momentum": 0.01}},
        "relation": "greater", "better": "higher", "test": "paired",
    }  # fmt: skip
    data = {"preset": "bn_eval_stats", "min_seeds": 4, "scale": {"cpu": {"kind": "reduced"}}, "claims": [rule]}
    monkeypatch.setattr(rules_schema, "load_rules_data", lambda preset: data)
    monkeypatch.setattr(rules_schema, "rules_hash", lambda preset: "h")
    from normbench.analysis.loading.runs import load_local_runs

    with pytest.raises(ConfigError, match=r"test paired needs the same seeds in both arms; got \[0, 1, 2, 3, 4\] and"):
        claims_module.judge("bn_eval_stats_cpu", load_local_runs([tmp_path / "runs"]))


@pytest.mark.parametrize("arm", ARMS)
def test_arms_compose_with_both_evaluations(arm: str) -> None:
    cfg = compose_cfg(["experiment=bn_eval_stats_cpu", f"experiment/arms/bn_eval_stats@_global_={arm}"])
    batch, momentum = ARMS[arm]
    assert (cfg.batch_size, cfg.norm.momentum, cfg.norm.eval_stats) == (batch, momentum, "both")
    assert cfg.lr == pytest.approx(0.1 * batch / 128) and cfg.model.depth == 8 and cfg.norm.name == "bn"


def test_logged_at_fraction_reads_the_first_evaluation_at_or_after_the_fraction(tmp_path: Path) -> None:
    """Evaluations at steps 78, 156, 234, 312 of 312: 0.25 reads step 78, 0.5 step 156, 0.6 (step
    187.2) the next one, 234, and 1.0 the last; a key never logged that late is NaN."""
    import math

    from normbench.analysis.judging.measures import logged_at_fraction
    from normbench.analysis.loading.runs import load_local_run

    rows = [{"step": s, "epoch": 2 * (i + 1), "val/acc": 0.1 * (i + 1)} for i, s in enumerate((78, 156, 234, 312))]
    rows.append({"step": 100, "epoch": 2.5, "train/loss": 1.0})
    write_run(tmp_path, 0, {"seed": 0}, rows, {"step": 312})
    run = load_local_run(tmp_path / "0")
    got = [logged_at_fraction(run, "val/acc", f) for f in (0.25, 0.5, 0.6, 1.0)]
    assert got == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert math.isnan(logged_at_fraction(run, "train/loss", 0.5))


def test_the_checks_runs_are_named_by_the_arm_measured_on_its_key() -> None:
    """The positive control reads the EMA's accuracy (``val/acc``) of runs that both arms of the
    paired claims select: its note names them EMA, not population (whose key is ``val/acc_population``)."""
    from normbench.analysis.judging.claims import row_label
    from normbench.analysis.judging.rules_schema import load_rules

    rules = load_rules("bn_eval_stats_cpu")
    assert rules is not None
    (check,) = rules.checks
    row = {"norm.name": "bn", "batch_size": 128, "norm.momentum": 0.1, "seed": 10}
    assert row_label(row, rules, "bn_eval_stats_cpu", check.params["key"]) == "EMA seed=10"
    assert row_label(row, rules, "bn_eval_stats_cpu", "val/acc_population") == "population seed=10"
    assert row_label(row, rules, "bn_eval_stats_cpu") == "population seed=10"  # no key: the first arm
