"""The gn_groups preset (Wu & He 2018, Table 3 in spirit): its figure and claims from synthetic run
directories, its arms per layer against the model's channels, and its rules fixed as data."""

from __future__ import annotations

from pathlib import Path

import pytest

from normbench.analysis.figures.groups import IN_X
from normbench.analysis.judging.claims import FAILED, PASSED, load_rules
from normbench.analysis.judging.stats import NOT_JUDGED, SUPPORTED
from tests.conf.test_compose import compose_cfg
from tests.test_figures import SEEDS, assert_point, build, claim_row, claims, read_csv, write_run

GROUPS = (1, 2, 4, 8, 16)
ARMS = [*(f"g{g}" for g in GROUPS), "in"]


def write_sweep(
    root: Path,
    err: dict[str, float],
    spread: float = 0.2,
    last_loss: float = 0.01,
    last_loss_of: dict[str, float] | None = None,
) -> None:
    """Every arm x seed as a job directory: error ``err[arm] + spread * seed`` (%), training loss
    from 2.0 down to ``last_loss`` (``last_loss_of[arm]`` where given) over five epochs."""
    job = 0
    for arm in ARMS:
        norm = {"name": "in"} if arm == "in" else {"name": "gn", "groups": int(arm[1:])}
        for seed in SEEDS:
            cfg = {"norm": norm, "batch_size": 32, "lr": 0.1, "seed": seed}
            losses = [2.0, 1.0, 0.5, 0.2, (last_loss_of or {}).get(arm, last_loss)]
            rows = [{"step": 10 * e, "epoch": e, "train/loss": y + 0.001 * seed} for e, y in enumerate(losses, 1)]
            rows.append({"step": 50, "epoch": 5, "val/acc": 1.0 - (err[arm] + spread * seed) / 100})
            write_run(root, job, cfg, rows, {"step": 50})
            job += 1


def x_of(arm: str) -> float:
    return float(IN_X if arm == "in" else int(arm[1:]))


def test_gn_groups_figure_and_claims(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NORMBENCH_FIGURE_FORMATS")  # the default: PNG and PDF
    err = {"g1": 40.0, "g2": 38.0, "g4": 36.0, "g8": 35.0, "g16": 37.0, "in": 45.0}  # a U, lowest at G = 8
    write_sweep(tmp_path / "runs", err)
    out = tmp_path / "out"
    written = build("gn_groups_cpu", tmp_path / "runs", out)
    assert {p.name for p in written} >= {"gn_groups.png", "gn_groups.pdf", "gn_groups.csv", "claims.csv"}
    rows = read_csv(out / "gn_groups.csv")
    for arm in ARMS:  # median, min, max over the five seeds, per G (IN at the widest layer's C)
        series = "IN (G = C in every layer)" if arm == "in" else "GN (G groups in every layer)"
        values = [err[arm] + 0.2 * s for s in SEEDS]
        assert_point(rows, "val_error", series, x_of(arm), values)
        for s, v in zip(SEEDS, values):  # and every seed's own point
            assert_point(rows, "val_error_per_seed", f"seed {s}", x_of(arm), [v])
        label = "IN" if arm == "in" else f"G={arm[1:]}"
        assert_point(rows, f"train_loss/{label}", label, 5, [0.01 + 0.001 * s for s in SEEDS])
    verdicts = claims(out)
    assert verdicts == {"g8_beats_g1": SUPPORTED, "g8_beats_in": SUPPORTED, "long_enough": PASSED}
    row = claim_row(out, "g8_beats_in")
    assert row["a"] == "G=8" and row["b"] == "IN" and row["a_n"] == "5"
    assert row["scale"].startswith("reduced: ResNet8 on 500 CIFAR-10 images")


@pytest.mark.slow
def test_gn_groups_short_run_leaves_its_claims_unjudged(tmp_path: Path) -> None:
    # LN-like best, IN equal to G = 8 within the seeds' noise; the runs end at 10 % of their first loss
    err = {"g1": 30.0, "g2": 32.0, "g4": 34.0, "g8": 35.0, "g16": 36.0, "in": 35.1}
    write_sweep(tmp_path / "runs", err, spread=1.0, last_loss=0.2)
    build("gn_groups", tmp_path / "runs", tmp_path / "out")
    verdicts = claims(tmp_path / "out")
    # the failed check leaves both claims unjudged (issue 43): their numbers stay, no verdict
    assert verdicts == {"g8_beats_g1": NOT_JUDGED, "g8_beats_in": NOT_JUDGED, "long_enough": FAILED}
    row = claim_row(tmp_path / "out", "g8_beats_g1")
    assert float(row["estimate"]) == pytest.approx(35.0 - 30.0) and row["p_holm"] != ""
    assert row["measured"].endswith("; not judged: setup check failed (long_enough)")


def test_gn_groups_check_reads_every_group_count(tmp_path: Path) -> None:
    # only G = 2 ends far from a plateau (10 % of its first loss); the G = 4..16 runs share its norm
    # name and seeds, and must not hide it (a check keyed by norm and seed kept only G = 16's)
    err = {"g1": 40.0, "g2": 38.0, "g4": 36.0, "g8": 35.0, "g16": 37.0, "in": 45.0}
    write_sweep(tmp_path / "runs", err, last_loss_of={"g2": 0.2})
    build("gn_groups_cpu", tmp_path / "runs", tmp_path / "out")
    row = claim_row(tmp_path / "out", "long_enough")
    assert row["verdict"] == FAILED
    entries = row["measured"].split(" (passes")[0].split(", ")  # "<run> <value>", one per run
    values = [float(e.rpartition(" ")[2]) for e in entries]
    assert len(values) == 30 and sum(v > 0.05 for v in values) == 5  # G = 2's five seeds: 0.1-0.102
    labels = [e.split(" seed=")[0] for e in entries]  # an arm's label, else the norm's name
    assert {k: labels.count(k) for k in set(labels)} == {"G=8": 5, "G=1": 5, "IN": 5, "gn": 15}


def test_gn_groups_rules_name_arms_the_preset_runs() -> None:
    rules = load_rules("gn_groups_cpu")
    assert rules is not None and rules.min_seeds == 5 and rules.alpha == 0.05
    assert set(rules.scale) == {"full", "cpu"}
    swept = [{"norm.name": "gn", "norm.groups": g} for g in GROUPS] + [{"norm.name": "in"}]
    for rule in rules.claims:
        assert (rule.relation, rule.test, rule.better, rule.measure) == ("less", "welch", "lower", "error")
        assert rule.a.select == {"norm.name": "gn", "norm.groups": 8}
        assert rule.b.select in swept
    assert {r.b.label for r in rules.claims} == {"G=1", "IN"}


@pytest.mark.parametrize("preset", ["gn_groups", "gn_groups_cpu"])
@pytest.mark.parametrize("arm", ARMS)
def test_every_arm_builds_on_every_layer(preset: str, arm: str) -> None:
    """Each arm composes and its norm builds for every layer of the preset's model (G divides
    16, 32 and 64); G = 16 is one channel per group only in the 16-channel layers."""
    from omegaconf import OmegaConf

    from normbench.models import build_model
    from normbench.norms import norm_factory

    cfg = compose_cfg([f"experiment={preset}", f"experiment/arms/gn_groups@_global_={arm}"])
    assert cfg.batch_size == 32 and cfg.norm.name == ("in" if arm == "in" else "gn")
    model = build_model(OmegaConf.to_container(cfg.model), norm_factory(OmegaConf.to_container(cfg.norm)))
    norms = [m for m in model.modules() if hasattr(m, "NORMALIZES_OVER")]
    assert {m.num_features for m in norms} == {16, 32, 64}
    if arm != "in":
        assert all(m.groups == int(arm[1:]) for m in norms)


def test_a_checks_run_label_names_its_arm_or_its_norm() -> None:
    """A run in a check's note: the first arm (in the rules' order) that selects it, else its norm."""
    from normbench.analysis.judging.claims import row_label

    rules = load_rules("gn_groups_cpu")
    assert rules is not None
    row = {"norm.name": "gn", "norm.groups": 8, "seed": 3}
    assert row_label(row, rules, "gn_groups_cpu") == "G=8 seed=3"
    assert row_label({**row, "norm.groups": 2}, rules, "gn_groups_cpu") == "gn seed=3"  # no arm selects G = 2
    assert row_label({"norm.name": "in", "norm.groups": None, "seed": 0}, rules, "gn_groups_cpu") == "IN seed=0"
