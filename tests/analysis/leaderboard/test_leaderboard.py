"""The norm leaderboard on synthetic run folders whose answer is known by hand: means and
t-intervals, rows by mean score (the verdicts: tests/analysis/leaderboard/test_leaderboard_rules.py), n/a
cells (a refused job's error, the decoder and batch-size rules), diverged
runs counted, time-mixing norms ranked as encoder-only rows (``pn (enc) / ln (dec)``), every
registered norm listed with what it normalizes over; the CLI's files, its "What ran" section and
one-line errors; reading W&B fetches only the keys it uses."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from normbench.analysis.leaderboard import leaderboard as lb
from normbench.analysis.leaderboard.leaderboard_report import load_runs, load_wandb, main
from normbench.analysis.loading.runs import Run
from normbench.base.errors import ConfigError
from normbench.norms import list_norms

T_975_DF2 = math.sqrt(2 * 0.95**2 / (1 - 0.95**2))
"""t_{0.975} with 2 degrees of freedom in closed form: its CDF is 1/2 + t / (2·sqrt(2 + t²))."""


def write_job(
    root: Path,
    name: str,
    *,
    norm: str,
    seed: int,
    score: float | None = None,
    model: str = "resnet20",
    dataset: str = "cifar10",
    translation: bool = False,
    status: str = "finished",
    speed: list[float] | None = None,
    diag: dict[str, list[tuple[int, float]]] | None = None,
    error: str | None = None,
    batch_size: int = 128,
    steps: int = 100,
    decoder: str | None = None,
) -> Path:
    """A job folder as the runner leaves it; ``status=failed`` with ``error``: as a job refused by
    config validation leaves it (Hydra's files and a summary, no metrics). ``decoder``: the
    Transformer's ``model.decoder_norm`` (the swept ``norm`` then runs in the encoder only)."""
    d = root / name
    (d / ".hydra").mkdir(parents=True)
    stacks = {"encoder_norm": None, "decoder_norm": decoder and {"name": decoder}} if translation else {}
    config = {
        "model": {"name": model, **stacks},
        "dataset": {"name": dataset, **({"src_lang": "de"} if translation else {})},
        "norm": {"name": norm},
        "seed": seed,
        "batch_size": batch_size,
        "epochs": 1,
        "optimizer": {"name": "sgd", "momentum": 0.9},
        "lr": 0.1,
        "weight_decay": 1e-4,
        "schedule": {"name": "step", "milestones": [0.5, 0.75], "gamma": 0.1, "warmup_steps": 0},
    }
    (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"norm={norm}", f"seed={seed}"]))
    if error is not None:
        (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
        (d / "summary.json").write_text(json.dumps({"status": "failed", "error": error}))
        return d
    unit = "perf/tokens_per_s" if translation else "perf/samples_per_s"
    metric = "test/bleu" if translation else "val/acc"
    rows: list[dict[str, Any]] = [{"step": s, "epoch": 0, k: v} for k, pts in (diag or {}).items() for s, v in pts]
    for i, v in enumerate(speed or [100.0]):
        rows.append({"step": (i + 1) * steps // len(speed or [1]), "epoch": i + 1, unit: v, "train/loss": 1.0 + seed})
    rows.sort(key=lambda r: r["step"])  # in step order, as the runner logs them (the loader refuses steps going back)
    (d / "config.yaml").write_text(yaml.safe_dump(config))
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary: dict[str, Any] = {"status": status, "step": steps, "train/loss": 1.0 + seed, "wall_time_s": 60.0}
    if score is not None:
        summary[metric] = score
    (d / "summary.json").write_text(json.dumps(summary))
    return d


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """resnet20/cifar10: bn 0.80/0.82/0.84 (+ a diverged seed), ln 0.76/0.78/0.80, gn 0.70/0.71/0.72,
    none one seed (0.50), brn refused (error); transformer_tiny: ln BLEU 20/22/24, rms 18/19/20,
    pn in the encoder with an LN decoder 24/24.5/25, bn ran (finished) in both stacks, where it
    mixes time steps in the decoder."""
    root = tmp_path / "sweep"
    job = iter(range(100))
    for seed, acc in enumerate((0.80, 0.82, 0.84)):
        diag = {"diag/landscape/loss_range": [(10, 9.0), (50, 5.0), (95, 2.0), (99, 4.0)]}
        write_job(
            root, str(next(job)), norm="bn", seed=seed, score=acc, speed=[90.0, 100.0 + 10 * seed, 400.0], diag=diag
        )
    write_job(root, str(next(job)), norm="bn", seed=3, status="diverged", speed=[80.0])
    for seed, acc in enumerate((0.76, 0.78, 0.80)):
        write_job(root, str(next(job)), norm="ln", seed=seed, score=acc, speed=[55.0])
    for seed, acc in enumerate((0.70, 0.71, 0.72)):
        diag = {"landscape/loss_range": [(40, 7.0), (60, 3.0)]}  # renamed key (no diag/); none in the last 10 %
        write_job(root, str(next(job)), norm="gn", seed=seed, score=acc, speed=[50.0], diag=diag)
    write_job(root, str(next(job)), norm="none", seed=0, score=0.50, speed=[200.0])
    write_job(root, str(next(job)), norm="brn", seed=0, error="layer x: brn refused for a reason stated here")
    mt = {"model": "transformer_tiny", "dataset": "synthetic_translation", "translation": True}
    for seed, bleu in enumerate((20.0, 22.0, 24.0)):
        write_job(root, str(next(job)), norm="ln", seed=seed, score=bleu, speed=[1000.0], **mt)
    for seed, bleu in enumerate((18.0, 19.0, 20.0)):
        write_job(root, str(next(job)), norm="rms", seed=seed, score=bleu, speed=[1200.0], **mt)
    for seed, bleu in enumerate((24.0, 24.5, 25.0)):
        write_job(root, str(next(job)), norm="pn", seed=seed, score=bleu, speed=[800.0], decoder="ln", **mt)
    write_job(root, str(next(job)), norm="bn", seed=0, score=25.0, speed=[900.0], **mt)
    return root


def rows_by(rows: list[lb.Row]) -> dict[tuple[str, str], lb.Row]:
    return {(r.model, r.norm): r for r in rows}


def test_t_interval_against_the_closed_form() -> None:
    got = lb.t_interval([0.80, 0.82, 0.84])
    half = T_975_DF2 * 0.02 / math.sqrt(3)  # s = 0.02
    assert (got.mean, got.n) == (pytest.approx(0.82), 3)
    assert got.lo == pytest.approx(0.82 - half, rel=1e-12) and got.hi == pytest.approx(0.82 + half, rel=1e-12)
    one = lb.t_interval([0.5, float("nan")])
    assert (one.n, one.lo, one.hi) == (1, -math.inf, math.inf)
    assert lb.t_interval([]).n == 0


def test_cells_scores_ties_and_counts(sweep: Path) -> None:
    rows = lb.leaderboard(load_runs([sweep]))
    r = rows_by(rows)
    half = T_975_DF2 * 0.02 / math.sqrt(3)
    bn = r["resnet20", "bn"]
    assert bn.score.mean == pytest.approx(0.82) and bn.score.hi == pytest.approx(0.82 + half)
    assert (bn.score.n, bn.diverged, bn.runs, bn.seeds) == (3, 1, 4, [0, 1, 2])  # the diverged seed counted
    # a sweep of no preset with rules: no verdict, never "tied" (overlapping intervals judge nothing)
    assert {r["resnet20", n].verdict for n in ("bn", "ln", "gn", "none")} == {lb.NO_RULES}
    brn = r["resnet20", "brn"]
    assert brn.verdict == lb.NA and brn.reason == "layer x: brn refused for a reason stated here"
    assert r["resnet20", "rms"].verdict == lb.NOT_RUN  # met in the transformer cell only
    # throughput: each run's median over epochs (bn: 100, 110, 120), mean over runs; relative to bn
    assert bn.throughput == pytest.approx(110.0) and bn.relative_throughput == pytest.approx(1.0)
    assert r["resnet20", "gn"].relative_throughput == pytest.approx(50.0 / 110.0)
    assert bn.train_loss == pytest.approx(np.mean([1.0, 2.0, 3.0]))
    # end of training: steps >= 90 of 100 -> (2 + 4) / 2 per bn run; gn: its last value (renamed key)
    assert bn.headlines["loss_range"] == pytest.approx(3.0)
    assert r["resnet20", "gn"].headlines["loss_range"] == pytest.approx(3.0)
    # the transformer cell: BLEU from test/bleu, tokens/s relative to ln; pn in the encoder ranked with
    # the causal norms; bn in the decoder refused by the decoder rule
    pn = r["transformer_tiny", "pn (enc) / ln (dec)"]
    assert (pn.metric, pn.score.mean, pn.verdict, pn.swept) == ("test/bleu", pytest.approx(24.5), lb.NO_RULES, "pn")
    assert pn.relative_throughput == pytest.approx(0.8) and pn.runs == 3
    ln = r["transformer_tiny", "ln"]
    assert (ln.score.mean, ln.verdict) == (pytest.approx(22.0), lb.NO_RULES)
    assert [x.norm for x in rows if x.model == "transformer_tiny"][:3] == ["pn (enc) / ln (dec)", "ln", "rms"]
    assert r["transformer_tiny", "rms"].relative_throughput == pytest.approx(1.2)
    mt_bn = r["transformer_tiny", "bn"]
    assert mt_bn.verdict == lb.NA and "future target tokens" in mt_bn.reason  # its BLEU 25 is not ranked
    assert "bn (enc) / ln (dec)" in mt_bn.reason
    ran = {lb.swept_norm(run) for run in load_runs([sweep])}
    for norm in sorted(ran & {"gn", "brn", "in", "ln_sample", "bn_noisy"}):  # time-mixing: the row they can run as
        enc = r["transformer_tiny", f"{norm} (enc) / ln (dec)"]
        assert (enc.verdict, enc.reason, enc.swept) == (lb.NOT_RUN, "", norm)
        assert ("transformer_tiny", norm) not in r
    assert r["transformer_tiny", "none"].verdict == lb.NOT_RUN
    # every norm the sweep ran in every cell (each once on images), no other: ranked rows first
    assert [x.norm for x in rows if x.model == "resnet20"][:2] == ["bn", "ln"]
    assert sorted(x.swept for x in rows if x.model == "resnet20") == sorted(ran)
    assert {x.swept for x in rows if x.model == "transformer_tiny"} == ran
    assert len(ran) < len(list_norms()) and not any(key[1] == "prms" for key in r)  # never run: not listed
    assert r["resnet20", "pn"].verdict == lb.NOT_RUN


def test_fewer_than_three_seeds_give_no_interval(tmp_path: Path) -> None:
    """A 2-seed row (issue 60: 48 % [−144, 240] from n = 2) reads "too few seeds", never an interval."""
    root = tmp_path / "sweep"
    for seed, acc in enumerate((0.40, 0.56)):
        write_job(root, f"gn{seed}", norm="gn", seed=seed, score=acc)
    for seed, acc in enumerate((0.80, 0.82, 0.84)):
        write_job(root, f"bn{seed}", norm="bn", seed=seed, score=acc)
    r = rows_by(lb.leaderboard(load_runs([root])))
    gn, bn = r["resnet20", "gn"], r["resnet20", "bn"]
    assert (gn.score.n, gn.score.mean) == (2, pytest.approx(0.48))
    assert math.isnan(gn.score.lo) and math.isnan(gn.score.hi)
    assert gn.reason == "too few seeds (n = 2; an interval needs 3)"
    assert bn.score.n == 3 and math.isfinite(bn.score.lo) and bn.reason == ""
    assert set(r) == {("resnet20", "gn"), ("resnet20", "bn")}  # only the norms that ran


def test_rules_keys_and_cell_names() -> None:
    def run(**config: Any) -> Run:
        base = {"norm": {"name": "bn"}, "model": {"name": "resnet20"}, "dataset": {"name": "cifar10"}}
        return Run("r", {**base, **config}, [])

    one = {"batch_size": 1}
    assert "batch statistics" in lb.refusal(run(**one))
    assert lb.refusal(run(**one, norm={"name": "gn"})) is None
    assert lb.refusal(run(batch_size=2)) is None
    two = {"hardware": {"resolved": {"world_size": 2}}}  # 2 a batch over 2 processes: one sample each
    assert "batch statistics" in lb.refusal(run(batch_size=2, **two))
    assert lb.refusal(run(norm={"name": "not_a_norm"}, **one)) is None  # a norm this checkout lacks: no rule
    assert lb.diag_key({"diag/beta_smoothness/beta"}, "beta_smoothness", "beta") == "diag/beta_smoothness/beta"
    both = {"diag/bn_stats/first_layer/var_dist", "bn_stats/first_layer/var_dist"}
    assert lb.diag_key(both, "bn_stats", "first_layer/var_dist") == "bn_stats/first_layer/var_dist"
    assert lb.diag_key({"x"}, "landscape", "loss_range") is None
    mt = {"model": {"name": "transformer_tiny"}, "dataset": {"name": "iwslt14", "root": "${oc.env:D,x}/de-en-subset"}}
    assert lb.cell_of(run(**mt)) == ("transformer_tiny", "Multi30k de-en (subset)")  # what the folder holds
    stacks = {"encoder_norm": "pn", "decoder_norm": {"name": "ln"}}
    powernorm = {**mt, "norm": {"name": "ln"}, "model": {"name": "transformer_tiny", **stacks}}
    assert lb.norm_of(run(**powernorm)) == "pn (enc) / ln (dec)"
    assert lb.swept_norm(run(**powernorm)) == "pn"
    assert lb.refusal(run(**powernorm)) is None  # LN decoder
    assert "decoder norm bn mixes time steps" in lb.refusal(run(**{**mt, "norm": {"name": "bn"}}))
    swept = {**mt, "norm": {"name": "gn"}, "model": {"name": "transformer_tiny", "decoder_norm": "ln"}}
    assert lb.norm_of(run(**swept)) == "gn (enc) / ln (dec)"
    assert lb.cell_of(run(model={"name": "resnet20", "depth": 8}))[0] == "ResNet8"  # the depth that ran
    assert lb.cell_of(run(model={"name": "resnet20", "depth": 20}))[0] == "resnet20"
    assert lb.cell_of(run(dataset={"name": "cifar10", "root": "/d/my-copy"}))[1] == "cifar10 (my-copy)"
    assert lb.cell_of(run(dataset={"name": "cifar10", "root": "/d/cifar10"})) == ("resnet20", "cifar10")


def test_cli_writes_markdown_csv_and_figure(sweep: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NORMBENCH_FIGURE_FORMATS")  # the default: PNG and PDF
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {f"leaderboard.{ext}" for ext in ("md", "csv", "png", "pdf")}
    with open(out / "leaderboard.csv") as f:
        table = {(row["model"], row["norm"]): row for row in csv.DictReader(f)}
    bn = table["resnet20", "bn"]
    assert (bn["verdict"], bn["n"], bn["diverged"], bn["seeds"]) == ("not judged: no rules", "3", "1", "0 1 2")
    assert float(bn["ci_lo"]) == pytest.approx(0.82 - T_975_DF2 * 0.02 / math.sqrt(3))
    assert table["resnet20", "brn"]["reason"].startswith("layer x: brn refused")
    text = (out / "leaderboard.md").read_text()
    assert "## resnet20 on cifar10" in text and "## transformer_tiny on synthetic_translation" in text
    assert "| bn | N×H×W, per channel | 82.00 % [" in text
    assert "| none | nothing | 50.00 % (n = 1: too few seeds for an interval) | 1 | not judged: no rules |" in text
    pn_over = "enc: C/G per token, then N×T real tokens per channel (quadratic mean); dec: C, per token"
    enc = f"| pn (enc) / ln (dec) | {pn_over} |"
    assert enc in text and "future target tokens" in text
    assert table["transformer_tiny", "pn (enc) / ln (dec)"]["verdict"] == "not judged: no rules"
    assert table["resnet20", "gn"]["normalizes_over"] == "C/G×H×W, per sample and group"
    assert ("resnet20", "in") not in table  # never run in the sweep: not listed (issue 60.4)
    # what ran: from the runs' configs, the step schedule with the steps where the lr fell
    assert "## What ran" in text
    assert "step: lr × 0.1 at 50 %, 75 % of the steps (steps 50, 75)" in text and "1 epoch = 100 steps" in text
    assert "pn (enc) / ln (dec) × seeds 0, 1, 2" in text and "pn (enc) / ln (dec): warmup_iters 10" in text


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["{tmp}/absent"], "does not exist"),
        (["{tmp}/empty"], "holds no runs"),
        ([], "pass sweep folders or --wandb"),
        (["--wandb", "entity/project"], "needs --group"),
    ],
)
def test_cli_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], needle: str) -> None:
    (tmp_path / "empty").mkdir()
    assert main([a.format(tmp=tmp_path) for a in args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("normbench-leaderboard: error:") and needle in err[0]


class FakeRun:
    def __init__(self, run_id: str, config: dict[str, Any], summary: dict[str, Any], history: list[dict[str, Any]]):
        self.id = self.name = run_id
        self.config, self.summary, self._history = config, summary, history
        self.scanned: list[list[str]] = []

    def scan_history(self, keys: list[str]) -> list[dict[str, Any]]:
        self.scanned.append(keys)
        return [row for row in self._history if all(k in row for k in keys)]


class FakeApi:
    def __init__(self, runs: list[FakeRun]) -> None:
        self._runs = runs
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def runs(self, path: str, filters: dict[str, Any]) -> list[FakeRun]:
        self.calls.append((path, filters))
        return self._runs


def test_wandb_runs_fetch_only_the_keys_used() -> None:
    history = [
        {"_step": 5, "train/batch_loss": 2.0, "diag/ics/layer/x": 1.0},
        {"_step": 10, "perf/samples_per_s": 100.0, "val/acc": 0.5},
        {"_step": 20, "perf/samples_per_s": 120.0, "val/acc": 0.6, "grad_variance/total": 7.0},
    ]
    summary = {
        "status": "finished", "step": 20, "val/acc": 0.6, "perf/samples_per_s": 120.0, "grad_variance/total": 7.0,
        "train/batch_loss": 2.0, "diag/ics/layer/x": 1.0, "_runtime": 3,
    }  # fmt: skip
    config = {"model": {"name": "resnet20"}, "dataset": {"name": "cifar10"}, "norm": {"name": "bn"}, "seed": 0}
    fake = FakeRun("abc", config, summary, history)
    board = FakeRun("board", {"source_group": "sweep-x"}, {"status": "finished"}, [])
    board.job_type = "leaderboard-summary"  # an earlier --log-to-wandb summary run in the same group: skipped
    api = FakeApi([fake, board])
    runs = load_wandb("me/normbench", "sweep-x", api=api)
    assert api.calls == [("me/normbench", {"group": "sweep-x"})]
    assert sorted(k[1] for k in fake.scanned) == ["grad_variance/total", "perf/samples_per_s"]
    assert len(runs) == 1 and not board.scanned
    (row,) = [r for r in lb.leaderboard(runs) if r.runs]
    assert row.throughput == pytest.approx(110.0) and row.headlines["grad_var"] == pytest.approx(7.0)
    with pytest.raises(ConfigError, match="no W&B training runs"):
        load_wandb("me/normbench", "empty", api=FakeApi([]))


@pytest.mark.slow
def test_log_to_wandb_offline_writes_the_table_and_figure(
    sweep: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real offline W&B run (``WANDB_MODE=offline`` from conftest); its files are read back."""
    import wandb

    calls: list[dict[str, Any]] = []
    real_init = wandb.init
    monkeypatch.setattr(wandb, "init", lambda **kw: calls.append(kw) or real_init(**kw))
    out = tmp_path / "out"
    assert main([str(sweep), "--out", str(out), "--log-to-wandb", "--group", "my-sweep"]) == 0
    assert [(c["group"], c["job_type"], c["mode"]) for c in calls] == [("my-sweep", "leaderboard-summary", "offline")]
    (table_file,) = out.glob("wandb/offline-run-*/files/media/table/leaderboard/table_*.table.json")
    table = json.loads(table_file.read_text())
    with open(out / "leaderboard.csv") as f:
        rows = list(csv.reader(f))
    assert table["columns"] == rows[0]
    # numbers stay numbers; missing cells (and the infinite bounds of a one-seed interval) are null
    as_csv = [["" if v is None else str(v) for v in r] for r in table["data"]]
    assert as_csv == [["" if v in ("inf", "-inf") else v for v in r] for r in rows[1:]]
    means = [r[table["columns"].index("mean")] for r in table["data"]]
    assert all(v is None or isinstance(v, float) for v in means) and 0.82 in means
    assert len(list(out.glob("wandb/offline-run-*/files/media/images/leaderboard/figure_*.png"))) == 1


def test_console_script_points_at_main() -> None:
    import importlib

    tomllib = pytest.importorskip("tomllib")
    pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
    module, func = tomllib.loads(pyproject.read_text())["project"]["scripts"]["normbench-leaderboard"].split(":")
    assert getattr(importlib.import_module(module), func) is main
