"""The analysis commands pool only seeds of one setting, and refuse in one line what they cannot
read (issue 24): runs that differ in more than the seed, a folder with no runs, a truncated
``summary.json``, ``--out`` naming a file, runs of another experiment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from normbench.analysis.figures import figures_cli
from normbench.analysis.leaderboard.leaderboard_report import main as leaderboard_main
from normbench.analysis.loading.runs import Run, check_seeds_only, experiment_key, load_local_runs
from normbench.base.errors import ConfigError
from tests.analysis.leaderboard.test_leaderboard import write_job
from tests.faults import fault


def one_error(capsys: pytest.CaptureFixture[str], prog: str) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if "warning:" not in line]
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), lines
    return lines[0]


def run(seed: int, **config: object) -> Run:
    base = {"norm": {"name": "bn", "momentum": 0.1}, "lr": 0.1, "seed": seed, "max_steps": 100}
    return Run(name=str(seed), config={**base, **config}, history=[], source=f"job{seed}")


def test_seeds_logging_and_diagnostics_are_not_the_experiment() -> None:
    a = run(0, logger={"project": "x"}, diagnostics={"hessian": {"every": 10}}, dataset={"name": "c", "root": "/a"})
    b = run(1, logger={"project": "y"}, diagnostics={"hessian": {"every": 5}}, dataset={"name": "c", "root": "/b"})
    assert (
        experiment_key(a)
        == experiment_key(b)
        == {
            "norm.name": "bn",
            "norm.momentum": 0.1,
            "lr": 0.1,
            "max_steps": 100,
            "dataset.name": "c",
        }
    )
    check_seeds_only([a, b], "bn")  # seeds of one setting: pooled


@pytest.mark.parametrize(
    "change, named",
    [({"lr": 0.05}, "lr: 0.1 vs 0.05"), ({"max_steps": 200}, "max_steps: 100 vs 200"),
     ({"norm": {"name": "bn", "momentum": 0.01}}, "norm.momentum: 0.1 vs 0.01")],
)  # fmt: skip
def test_runs_that_differ_in_more_than_the_seed_are_not_pooled(change: dict, named: str) -> None:
    with pytest.raises(ConfigError, match="differ in more than the seed") as e:
        check_seeds_only([run(0), run(1), run(2, **change)], "bn")
    assert named in str(e.value) and "job0 vs job2" in str(e.value)


@fault("normbench-leaderboard on runs of one norm with other lr / steps", "one line naming the keys; nothing written",
       "one-line")  # fmt: skip
def test_the_leaderboard_refuses_to_average_settings_as_seeds(tmp_path: Path, capsys) -> None:
    root = tmp_path / "sweeps"
    for seed in range(3):
        write_job(root, f"a{seed}", norm="bn", seed=seed, score=0.8)
    write_job(root, "b0", norm="bn", seed=0, score=0.2, steps=100)
    config = (root / "b0" / "config.yaml").read_text().replace("lr: 0.1", "lr: 0.5")
    (root / "b0" / "config.yaml").write_text(config)
    out = tmp_path / "board"
    assert leaderboard_main([str(root), "--out", str(out)]) == 2
    err = one_error(capsys, "normbench-leaderboard")
    assert "the runs of norm bn on resnet20 / cifar10 differ in more than the seed (lr: 0.1 vs 0.5" in err
    assert not out.exists()


@fault("an analysis command on a truncated summary.json", "one line naming the file", "one-line")
@pytest.mark.parametrize("command", ["leaderboard", "figures"])
def test_a_truncated_summary_is_one_line_naming_it(tmp_path: Path, capsys, command: str) -> None:
    root = tmp_path / "sweep"
    for seed in range(2):
        write_job(root, str(seed), norm="bn", seed=seed, score=0.8)
    summary = root / "1" / "summary.json"
    summary.write_text(summary.read_text()[:15])  # a write cut short
    if command == "leaderboard":
        assert leaderboard_main([str(root), "--out", str(tmp_path / "out")]) == 2
        err = one_error(capsys, "normbench-leaderboard")
    else:
        assert figures_cli.main(["santurkar_vgg", "--runs", str(root), "--out", str(tmp_path / "out")]) == 2
        err = one_error(capsys, "normbench-figures")
    assert f"{summary} is not a readable record (JSONDecodeError" in err
    assert not (tmp_path / "out").exists()


@fault("an analysis command on a folder with no runs", "one line naming the folder, exit 2", "one-line")
def test_a_folder_without_runs_is_one_line(tmp_path: Path, capsys) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "todo.txt").write_text("unrelated\n")
    with pytest.raises(ConfigError, match="holds no runs"):
        load_local_runs([folder])
    assert figures_cli.main(["santurkar_vgg", "--runs", str(folder), "--out", str(tmp_path / "out")]) == 2
    assert str(folder) in one_error(capsys, "normbench-figures")
    assert leaderboard_main([str(folder), "--out", str(tmp_path / "out")]) == 2
    assert str(folder) in one_error(capsys, "normbench-leaderboard")
    assert not (tmp_path / "out").exists()


@fault("--out naming an existing file", "one line; the file untouched", "one-line")
@pytest.mark.parametrize("command", ["leaderboard", "figures"])
def test_out_naming_a_file_is_one_line_and_keeps_it(tmp_path: Path, capsys, command: str) -> None:
    root = tmp_path / "sweep"
    write_job(root, "0", norm="bn", seed=0, score=0.8)
    out = tmp_path / "report.md"
    out.write_text("mine\n")
    if command == "leaderboard":
        assert leaderboard_main([str(root), "--out", str(out)]) == 2
        err = one_error(capsys, "normbench-leaderboard")
    else:
        assert figures_cli.main(["santurkar_vgg", "--runs", str(root), "--out", str(out)]) == 2
        err = one_error(capsys, "normbench-figures")
    assert "is a file, not a folder" in err and out.read_text() == "mine\n"


@fault("normbench-figures on runs of another experiment (no rules recorded)", "one line naming a run", "one-line")
def test_figures_refuse_runs_of_another_experiment_without_a_rules_record(tmp_path: Path, capsys) -> None:
    root = tmp_path / "sweep"
    job = write_job(root, "0", norm="bn", seed=0, score=0.8)
    (job / ".hydra" / "overrides.yaml").write_text("- experiment=ln_axes_cpu\n- seed=0\n")
    assert json.loads((job / "summary.json").read_text()).get("rules") is None
    assert figures_cli.main(["santurkar_vgg_cpu", "--runs", str(root), "--out", str(tmp_path / "out")]) == 2
    assert f"{job} is a run of experiment=ln_axes_cpu, not of 'santurkar_vgg_cpu'" in one_error(
        capsys, "normbench-figures"
    )
