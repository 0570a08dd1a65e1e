"""Data roots of the presets do not depend on the current directory ($NORMBENCH_DATA, else
../shared/data beside the checkout), and a sweep whose data root is missing fails once, before
its first job, naming the key to set."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from normbench.cli.main import config_dir
from tests.conftest import REPO, compose_cfg, run_cli_inprocess

CONF = Path(config_dir())
CPU_PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*_cpu.yaml"))
LEAVES = {"cifar10": "cifar10-subset", "iwslt14": "de-en-subset"}


@pytest.mark.parametrize("preset", CPU_PRESETS)
def test_cpu_presets_read_their_data_beside_the_checkout_from_any_directory(
    preset: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NORMBENCH_DATA", raising=False)
    roots = []
    for cwd in (REPO, tmp_path):
        monkeypatch.chdir(cwd)
        cfg = compose_cfg([f"experiment={preset}"])
        roots.append(cfg.dataset.root)
    assert cfg.dataset.name in LEAVES, (
        f"{preset} runs on dataset={cfg.dataset.name}: a _cpu preset reproduces its paper on the shared real subsets "
        f"(dataset={' or '.join(LEAVES)}, read from $NORMBENCH_DATA or ../shared/data), never on synthetic data"
    )
    leaf = LEAVES[cfg.dataset.name]
    assert roots == [os.path.normpath(REPO / ".." / "shared" / "data" / leaf)] * 2
    monkeypatch.setenv("NORMBENCH_DATA", str(tmp_path / "elsewhere"))
    assert compose_cfg([f"experiment={preset}"]).dataset.root == str(tmp_path / "elsewhere" / leaf)


@pytest.mark.slow
def test_a_sweep_with_a_missing_data_root_fails_once_before_any_job(tmp_path, monkeypatch, capsys) -> None:
    params = compose_cfg(["experiment=santurkar_vgg_cpu"], hydra=True).hydra.sweeper.params
    jobs = math.prod(len(str(values).split(",")) for values in params.values())
    monkeypatch.setenv("NORMBENCH_DATA", str(tmp_path / "absent"))
    sweep = tmp_path / "sweep"
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli_inprocess(
        monkeypatch, capsys, "-m", "experiment=santurkar_vgg_cpu", f"hydra.sweep.dir={sweep}"
    )
    assert code == 2
    assert err.count("\n") == 1 and out == "", err[-3000:]
    assert err.startswith(
        f"normbench: error: dataset.root={tmp_path / 'absent' / 'cifar10-subset'} does not exist "
        f"({jobs} of the sweep's {jobs} jobs read it; no job was started); set NORMBENCH_DATA="
    )
    assert "dataset.root=<the data folder>" in err
    assert not sweep.exists()


def test_only_the_missing_root_of_a_sweep_is_named(tmp_path, monkeypatch, capsys) -> None:
    present, absent = tmp_path / "present", tmp_path / "absent"
    present.mkdir()
    sweep = tmp_path / "sweep"
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli_inprocess(monkeypatch, capsys,
        "-m", "experiment=quickstart", "dataset=cifar10", f"dataset.root={present},{absent}",
        f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    assert code == 2 and err.count("\n") == 1, err[-3000:]
    assert err.startswith(f"normbench: error: dataset.root={absent} does not exist (1 of the sweep's 2 jobs")
    assert str(present) not in err and "NORMBENCH_DATA" not in err
    assert not sweep.exists()
