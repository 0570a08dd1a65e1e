"""A run folder's ``metrics.jsonl`` is one run's record, checked when it is read (issue 59, red team
item 10): another run's rows appended (steps go back), a row that logs a key again at one step with
another value, and a finished run whose rows stop before its summary's step (the file cut short)
are each refused in one line naming the folder, as a damaged line is (`run_record._read_jsonl`).
What the runner really logs passes: a step row, a diagnostics row and the epoch row at one step
(``epoch`` the same, the training clock ``perf/train_s`` read anew on each), a resumed run whose
rows skip the steps a segment without local files trained, NaN logged twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from normbench.analysis.loading.run_record import load_local_run, metrics_problem
from normbench.analysis.loading.runs import load_local_runs
from normbench.base.errors import ConfigError

STEPS_PER_EPOCH = 20


def logged_rows(steps: int = 40, every: int = 10) -> list[dict[str, Any]]:
    """Rows as `normbench.run.loop.state.log` writes them: a step row every ``every`` steps; at each
    epoch's end a diagnostics row and the epoch row at the same step; the clock on every row."""
    rows, clock = [], 0.0
    for step in range(every, steps + 1, every):
        epoch = step / STEPS_PER_EPOCH
        clock += 1.0
        rows.append({"step": step, "epoch": epoch, "train/batch_loss": 2.0 - step / 100, "perf/train_s": clock})
        if step % STEPS_PER_EPOCH == 0:
            rows.append({"step": step, "epoch": epoch, "bn_stats/first_layer/mean_dist": 0.1, "perf/train_s": clock})
            rows.append({"step": step, "epoch": epoch, "val/acc": 0.25 + step / 160, "perf/train_s": clock + 0.001})
    return rows


def write_run(folder: Path, rows: list[dict[str, Any]], status: str = "finished", step: int = 40) -> Path:
    folder.mkdir(parents=True)
    config = {"norm": {"name": "bn"}, "model": {"name": "resnet20"}, "dataset": {"name": "cifar10"}, "seed": 0}
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "summary.json").write_text(json.dumps({"status": status, "step": step, "val/acc": 0.5}))
    return folder


def test_what_the_runner_logs_loads(tmp_path: Path) -> None:
    rows = logged_rows()
    run = load_local_run(write_run(tmp_path / "run", rows))
    steps, values = run.series("val/acc")
    assert steps.tolist() == [20, 40] and values.tolist() == [0.375, 0.5]  # the epoch rows, by hand
    assert len(run.history) == len(rows) == 8


def test_a_resumed_run_loads(tmp_path: Path) -> None:
    """Segment 1 to its checkpoint at step 10, segment 2 without local files (steps 11-20 never
    logged), segment 3 on to the end: the rows skip, never go back (tests/test_resume_records.py)."""
    rows = [r for r in logged_rows() if r["step"] <= 10 or r["step"] > 20]
    assert load_local_run(write_run(tmp_path / "run", rows)).final_step == 40


def test_nan_twice_and_an_unfinished_run_are_kept() -> None:
    nan_rows = [{"step": 5, "epoch": 0.25, "train/batch_loss": float("nan")}] * 2
    assert metrics_problem(nan_rows, {"status": "diverged", "step": 5}) is None
    assert metrics_problem(logged_rows()[:2], {"status": "interrupted", "step": 40}) is None  # stopped: not a result


def another_runs_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return rows + [{**r, "train/batch_loss": 9.0} for r in rows]


def a_row_added(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    at = next(i for i, r in enumerate(rows) if "val/acc" in r)
    return rows[: at + 1] + [{"step": rows[at]["step"], "epoch": rows[at]["epoch"], "val/acc": 0.9}] + rows[at + 1 :]


def cut_in_half(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return rows[: len(rows) // 2]


TAMPERED = {
    "another run's rows appended": (another_runs_rows, "steps go backwards at row 9 (step 10 after 40)"),
    "a key logged twice at one step": (
        a_row_added,
        "logs val/acc at step 20 again with another value (0.9 after 0.375)",
    ),
    "the file cut short": (cut_in_half, "its last row is at step 20 but summary.json says the run finished at step 40"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_a_tampered_metrics_file_is_refused_in_one_line(tmp_path: Path, case: str) -> None:
    tamper, words = TAMPERED[case]
    clean = write_run(tmp_path / "clean" / "0", logged_rows())
    bad = write_run(tmp_path / "bad" / "0", tamper(logged_rows()))
    assert len(load_local_runs([clean.parent])) == 1
    with pytest.raises(ConfigError) as e:
        load_local_runs([bad.parent])
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"{bad}: metrics.jsonl: ") and words in message


def test_a_cut_file_of_a_run_that_did_not_finish_is_not_judged_here(tmp_path: Path) -> None:
    """A diverged run stops where it diverged; an interrupted one is set aside by its status."""
    rows = cut_in_half(logged_rows())
    assert metrics_problem(rows, {"status": "diverged", "step": 20}) is None
    assert "finished at step 40" in str(metrics_problem(rows, {"status": "finished", "step": 40}))


def test_rows_past_a_finished_runs_summary_step_are_refused(tmp_path: Path) -> None:
    """The mirror of a file cut short: the summary of a shorter run (or edited) over this run's rows."""
    bad = write_run(tmp_path / "bad" / "0", logged_rows(), step=20)
    with pytest.raises(
        ConfigError, match=r"its last row is at step 40 but summary.json says the run finished at step 20"
    ):
        load_local_runs([bad.parent])


def test_the_leaderboard_refuses_an_appended_run_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from normbench.analysis.leaderboard.leaderboard_report import main

    bad = write_run(tmp_path / "sweep" / "0", another_runs_rows(logged_rows()))
    assert main([str(bad.parent), "--out", str(tmp_path / "out")]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert len(errors) == 1 and str(bad) in errors[0] and "steps go backwards" in errors[0]
    assert not (tmp_path / "out").exists()


def test_a_summary_that_is_not_the_last_logged_value_is_refused(tmp_path: Path) -> None:
    """Red team 2: another seed's metrics.jsonl copied into a finished run's folder (or its summary
    edited): the summary's val/acc is not the last val/acc logged. The runner writes the summary from
    the last logged values, so the clean run loads and the bent one is one line naming both."""
    rows = logged_rows()
    last = [r["val/acc"] for r in rows if "val/acc" in r][-1]
    runner = {"status": "finished", "step": 40, "segments": [{"from_step": 0}]}  # the runner's summary
    clean = write_run(tmp_path / "clean", rows)
    (clean / "summary.json").write_text(json.dumps({**runner, "val/acc": last}))
    assert load_local_run(clean).final("val/acc") == last == 0.5
    bent = write_run(tmp_path / "bent", rows)
    (bent / "summary.json").write_text(json.dumps({**runner, "val/acc": 0.61}))
    with pytest.raises(ConfigError) as err:
        load_local_run(bent)
    assert "\n" not in str(err.value) and str(bent) in str(err.value)
    assert f"summary.json's val/acc 0.61 is not the last value the run logged ({last!r})" in str(err.value)
    assert metrics_problem(rows, {**runner, "status": "running", "val/acc": 0.61}) is None  # not finished yet
