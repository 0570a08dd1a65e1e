"""Where a run finds its data (`normbench.data.roots`), issue 59: ``NORMBENCH_DATA`` set but empty
is one line naming the variable (the presets' ``oc.env`` reads it as given, so they read
``/<set>``), in a run, a sweep and ``normbench-data`` alike."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest

from normbench.data.cifar import LABEL_NAMES
from normbench.data.prepare import main as data_main
from normbench.data.roots import blank_env_error
from tests.conftest import run_cli_inprocess
from tests.faults import fault

BLANKS = ["", " "]


def write_random_release(folder: Path, per_batch: int = 20) -> None:
    """A tiny CIFAR-10 python release: random images (none twice), labels 0..9 in turn."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]:
        labels = [i % 10 for i in range(per_batch)]
        batch = {"labels": labels, "data": rng.integers(0, 256, (per_batch, 3072), np.uint8)}
        (folder / name).write_bytes(pickle.dumps(batch, protocol=2))
    (folder / "batches.meta").write_bytes(pickle.dumps({"label_names": LABEL_NAMES}, protocol=2))


@pytest.mark.parametrize("value", BLANKS)
def test_a_blank_variable_names_itself_for_the_root_it_made(monkeypatch, value) -> None:
    monkeypatch.setenv("NORMBENCH_DATA", value)
    error = blank_env_error(f"{value}/cifar10-subset")
    assert error is not None and str(error).startswith(f"NORMBENCH_DATA={value!r} is set but empty")
    assert f"dataset.root is {value + '/cifar10-subset'!r}" in str(error)
    assert blank_env_error("/data/cifar10-subset") is None  # a root the variable did not make
    monkeypatch.setenv("NORMBENCH_DATA", "/data")
    assert blank_env_error("/data/cifar10-subset") is None
    monkeypatch.delenv("NORMBENCH_DATA")
    assert blank_env_error("/cifar10-subset") is None


BLANK_CASES = [(False, ""), (False, " "), pytest.param(True, "", marks=pytest.mark.slow)]  # a sweep: ~6 s


@fault("NORMBENCH_DATA set but empty (an unset variable expanded; issue 59)",
       "one line naming the variable and the root it "
       "made, exit 2, nothing made", "one-line")  # fmt: skip
@pytest.mark.parametrize(("multirun", "value"), BLANK_CASES)
def test_a_run_or_sweep_on_a_blank_variable_is_one_line_naming_it(tmp_path, monkeypatch, capsys, multirun, value):
    monkeypatch.setenv("NORMBENCH_DATA", value)
    monkeypatch.chdir(tmp_path)
    where = f"hydra.sweep.dir={tmp_path / 'sweep'}" if multirun else f"hydra.run.dir={tmp_path / 'run'}"
    args = ["-m"] * multirun + ["experiment=bn_lp_cpu", where, "max_steps=1"] + ["seed=0,1"] * multirun
    code, out, err = run_cli_inprocess(monkeypatch, capsys, *args)
    assert code == 2 and err.count("\n") == 1, err[-3000:]
    root = f"{value}/cifar10-subset"
    assert err.startswith(f"normbench: error: NORMBENCH_DATA={value!r} is set but empty, so dataset.root is {root!r}")
    assert "unset it" in err and "<the folder holding cifar10-subset/>" in err
    assert list(tmp_path.iterdir()) == []


@fault("normbench-data with NORMBENCH_DATA set but empty (issue 59)",
       "one line naming the variable, exit 2, nothing written "
       "(it wrote beside the checkout, where runs would not look)", "one-line")  # fmt: skip
@pytest.mark.parametrize("value", BLANKS)
def test_normbench_data_refuses_a_blank_variable(tmp_path, monkeypatch, capsys, value) -> None:
    """It took an empty value as unset and wrote beside the checkout, where a run would not look."""
    monkeypatch.setenv("NORMBENCH_DATA", value)
    monkeypatch.chdir(tmp_path)
    assert data_main(["de-en-subset"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"normbench-data: NORMBENCH_DATA={value!r} is set but empty"), err
    assert f"de-en-subset would go to {value + '/de-en-subset'!r}" in err[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # one training step in process: ~6 s
@fault("a relative dataset.root with hydra.job.chdir=true (issue 59)",
       "read where normbench was started; the run trains",
       "result")  # fmt: skip
def test_a_relative_root_is_read_where_normbench_started_with_chdir(tmp_path, monkeypatch, capsys) -> None:
    """``hydra.job.chdir=true`` runs the job in its run directory: the relative root named an
    existing folder, yet was reported as one that "does not exist" (issue 59)."""
    monkeypatch.delenv("NORMBENCH_DATA", raising=False)
    write_random_release(tmp_path / "data" / "cifar" / "cifar-10-batches-py")
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    code, out, err = run_cli_inprocess(monkeypatch, capsys,
        "experiment=quickstart", "dataset=cifar10", "dataset.root=data/cifar", "dataset.verify_checksums=false",
        "hydra.job.chdir=true", f"hydra.run.dir={run}", "logger=local", "max_steps=1", "batch_size=8",
    )  # fmt: skip
    assert code in (0, None) and "error" not in err, err[-3000:]
    assert (run / "summary.json").is_file() and '"finished"' in (run / "summary.json").read_text()
    assert not (run / "data").exists()  # nothing looked for (or downloaded) inside the run directory
