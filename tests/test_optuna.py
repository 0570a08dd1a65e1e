"""The task function returns one number, ``optimized_metric``, and ``hparams_search=optuna``
searches with it: a 2-trial search on the quickstart, its best value checked against the jobs'
own ``summary.json``."""

from __future__ import annotations

import json

import pytest
import yaml

from normbench.config import objective
from tests.conftest import requires_extra, run_cli
from tests.faults import fault

needs_optuna_extra = requires_extra("optuna", "hydra_plugins.hydra_optuna_sweeper")


def cfg(model: str = "resnet20", metric: str | None = None) -> tuple[str | None, str]:
    return metric, model


def test_objective_is_the_tasks_metric_of_a_finished_run(capsys) -> None:
    result = {"status": "finished", "val/acc": 0.5, "val/loss": 1.25, "val/bleu": 7.0}
    assert objective(*cfg(), result) == 0.5  # classification: val/acc
    assert objective(*cfg("transformer_tiny"), result) == 7.0  # translation: val/bleu
    assert objective(*cfg(metric="val/loss"), result) == 1.25  # settable
    assert objective(*cfg(), {**result, "status": "diverged"}) is None  # no number to optimize
    assert capsys.readouterr().err == ""
    assert objective(*cfg(metric="val/accuracy"), result) is None
    err = capsys.readouterr().err
    assert err.startswith("normbench: warning: optimized_metric=val/accuracy is not among") and "val/acc" in err
    # a single run or a grid sweep (no optimizing sweeper): no warning about a number nobody reads
    assert objective(*cfg("transformer_tiny"), {"status": "finished", "val/loss": 4.3}, optimizing=False) is None
    assert capsys.readouterr().err == ""


@pytest.mark.e2e
@needs_optuna_extra
def test_two_trial_optuna_search_on_the_quickstart(tmp_path) -> None:
    sweep = tmp_path / "search"
    r = run_cli(
        "-m",
        "hparams_search=optuna",
        "experiment=quickstart",
        "dataset.num_train=64",
        "dataset.num_test=64",
        "batch_size=32",
        "max_steps=2",
        "hardware.num_threads=1",
        "logger=local",
        "logger.progress_bar=false",
        "hydra.sweeper.n_trials=2",
        f"hydra.sweep.dir={sweep}",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [p.name for p in jobs] == ["0", "1"]
    trials = []
    for job in jobs:
        summary = json.loads((job / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["step"] == 2
        overrides = dict(o.split("=", 1) for o in yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text()))
        trials.append((summary["val/acc"], float(overrides["lr"]), float(overrides["weight_decay"])))
    assert trials[0][1:] != trials[1][1:]  # two sampled points
    assert all(0.001 <= lr <= 1.0 and 1e-6 <= wd <= 1e-2 for _, lr, wd in trials)  # inside the search space
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    best = max(acc for acc, _, _ in trials)
    assert results["best_value"] == pytest.approx(best)  # the jobs' own val/acc, maximized
    assert (best, results["best_params"]["lr"], results["best_params"]["weight_decay"]) in [
        (acc, pytest.approx(lr), pytest.approx(wd)) for acc, lr, wd in trials
    ]


SEARCH = ("-m", "hparams_search=optuna", "experiment=quickstart", "dataset.num_train=64", "dataset.num_test=32",
          "batch_size=16", "max_steps=2", "hardware.num_threads=1", "logger=local",
          "logger.progress_bar=false")  # fmt: skip


def one_error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("normbench: error:")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


@fault("an Optuna search with hydra.sweeper.n_trials=0 or an optimized_metric the task does not report "
       "(issue 59)",
       "one line before any trial trains, exit 2; no folder",
       "one-line")  # fmt: skip
@pytest.mark.e2e
@needs_optuna_extra
@pytest.mark.parametrize(
    ("args", "needle"),
    [(("hydra.sweeper.n_trials=0",), "hydra.sweeper.n_trials=0 is not allowed; a search needs at least 1 trial"),
     (("hydra.sweeper.n_trials=2", "optimized_metric=val/bogus"),
      "optimized_metric=val/bogus is not a metric of resnet20's runs; valid choices: val/acc")],
    ids=["no-trials", "bogus-metric"],
)  # fmt: skip
def test_a_search_that_cannot_work_is_refused_before_any_trial(tmp_path, args, needle) -> None:
    """Issue 59: each trial trained, then a 23-line ValueError; now one line, exit 2, no folder."""
    r = run_cli(*SEARCH, *args, f"hydra.sweep.dir={tmp_path / 's'}")
    assert r.returncode == 2 and needle in one_error_line(r.stderr)
    assert not (tmp_path / "s").exists()


@fault("an Optuna search whose trials all diverge (issue 59)",
       "one line, exit 1, after the trials recorded as diverged; the sweep summary written",
       "one-line")  # fmt: skip
@pytest.mark.e2e
@needs_optuna_extra
def test_a_search_whose_trials_all_diverge_ends_in_one_line(tmp_path) -> None:
    diverging = "lr=tag(log, interval(1e8, 1e9))"  # every trial's loss goes to inf at once
    r = run_cli(*SEARCH, "hydra.sweeper.n_trials=2", diverging, f"hydra.sweep.dir={tmp_path / 's'}")
    assert r.returncode == 1
    assert "no trial of the search returned a value" in one_error_line(r.stderr)
    statuses = [json.loads((tmp_path / "s" / j / "summary.json").read_text())["status"] for j in ("0", "1")]
    assert statuses == ["diverged", "diverged"] and (tmp_path / "s" / "sweep_summary.csv").is_file()


@fault("an Optuna search stored in SQLite (the storage optuna.yaml recommends), searched again, then "
       "resume=true (issue 59)",
       "the study is stored and continued (the best over both searches); resume=true says in one line that "
       "it continues by itself",
       "result")  # fmt: skip
@pytest.mark.e2e
@needs_optuna_extra
def test_a_stored_study_continues_in_a_new_sweep_folder(tmp_path) -> None:
    """hydra.sweeper.storage=sqlite:///… (the setting optuna.yaml recommends) works, and a second search
    with the same storage and study name adds its trials to the first's; resume=true says how."""
    import optuna

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    stored = (*SEARCH, "hydra.sweeper.n_trials=2", f"hydra.sweeper.storage={storage}", "hydra.sweeper.study_name=s")
    for name in ("first", "second"):
        r = run_cli(*stored, f"hydra.sweep.dir={tmp_path / name}")
        assert r.returncode == 0, r.stderr[-3000:]
    trials = optuna.load_study(study_name="s", storage=storage).trials
    assert len(trials) == 4 and all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    best = yaml.safe_load((tmp_path / "second" / "optimization_results.yaml").read_text())["best_value"]
    assert best == pytest.approx(max(t.value for t in trials))  # the best over both searches
    r = run_cli(*stored, "resume=true", f"hydra.sweep.dir={tmp_path / 'second'}")
    assert r.returncode == 2 and "a stored Optuna study continues by itself" in one_error_line(r.stderr)
