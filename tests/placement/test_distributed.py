"""Data parallel runs (2 gloo processes on CPU) against one process with the same global batch,
synchronized BatchNorm statistics, and sweeps through the submitit launcher."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from normbench.base.errors import ConfigError
from normbench.norms.batch import BatchNormConfig
from normbench.placement import distributed
from normbench.placement.hardware import HardwareConfig
from tests.conftest import REPO, cli_env, needs_slurm_extra, run_cli_inprocess

HAS_SYNC = "sync" in BatchNormConfig.__dataclass_fields__
needs_sync = pytest.mark.skipif(not HAS_SYNC, reason="norm.sync (BatchNorm over all ranks) not in this checkout yet")

TINY = (
    "experiment=quickstart",
    "model.depth=8",
    "max_steps=6",
    "dataset.num_train=256",
    "dataset.num_test=128",
    "batch_size=32",
    "eval_batch_size=128",
    "lr=0.05",
    "schedule.name=constant",
    "logger.wandb=false",
    "logger.progress_bar=false",
    "logger.log_every_n_steps=1",
)


def _env() -> dict[str, str]:
    env = cli_env()
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SUBMITIT_EXECUTOR"):
        env.pop(key, None)
    return env


def _launch(cwd: Path, *args: str, processes: int = 1) -> subprocess.CompletedProcess[str]:
    """``python -m normbench`` (one process) or ``torchrun --nproc_per_node=N -m normbench``."""
    if processes == 1:
        cmd = [sys.executable, "-m", "normbench", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={processes}"]
        cmd += ["-m", "normbench", *args]
    r = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r


InProcess = tuple[pytest.MonkeyPatch, pytest.CaptureFixture[str]]


def _run_here(cwd: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str) -> None:
    """``normbench *args`` in this process from ``cwd``, in the environment `_launch` gives a process."""
    with monkeypatch.context() as m:
        m.chdir(cwd)
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "SUBMITIT_EXECUTOR"):
            m.delenv(key, raising=False)
        code, _, stderr = run_cli_inprocess(m, capsys, *args)
    assert code == 0, stderr[-4000:]


def _run_dirs(cwd: Path) -> list[Path]:
    return sorted(p.parent for p in (cwd / "outputs").rglob("summary.json"))


def _batch_losses(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row["train/batch_loss"] for row in rows if "train/batch_loss" in row]


def _assert_same_trajectory(got: list[float], expected: list[float]) -> None:
    """Equal up to float32 summation order (all-reduce of two half-batch gradients against one
    full-batch gradient): 1e-7 at the first updates, growing through training; a wrong gradient
    scale or batch would move the second loss by ~1e-2."""
    assert len(got) == len(expected) == 6
    torch.testing.assert_close(got[:2], expected[:2], rtol=1e-6, atol=0)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=0)


def _single_and_ddp(tmp_path: Path, *overrides: str, inprocess: InProcess | None = None) -> tuple[Path, Path]:
    """The same run as one process (hardware=cpu) and as 2 gloo processes (hardware=ddp); the one
    process is this one when ``inprocess`` (pytest's monkeypatch and capsys) is given: the same code
    on one thread (the quickstart's), without a new interpreter's imports."""
    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    if inprocess is None:
        _launch(tmp_path / "one", *TINY, *overrides, "hardware=cpu")
    else:
        _run_here(tmp_path / "one", *inprocess, *TINY, *overrides, "hardware=cpu")
    _launch(tmp_path / "two", *TINY, *overrides, "hardware=ddp", processes=2)
    one, two = _run_dirs(tmp_path / "one"), _run_dirs(tmp_path / "two")
    assert len(one) == 1 and len(two) == 1, "each launch leaves exactly one run directory"
    assert sorted(p.name for p in two[0].parent.iterdir()) == [two[0].name], "rank 1 left its own directory behind"
    return one[0], two[0]


# ---- units ----------------------------------------------------------------------------------


def test_shards_concatenate_back_to_the_global_batch() -> None:
    x, y = torch.arange(40.0).view(10, 4), torch.arange(10)
    batch = (x, {"y": y, "extra": [y]})
    parts = [distributed.shard(batch, r, 3) for r in range(3)]
    assert [len(p[0]) for p in parts] == [4, 3, 3]
    assert torch.equal(torch.cat([p[0] for p in parts]), x)
    assert torch.equal(torch.cat([p[1]["extra"][0] for p in parts]), y)
    with pytest.raises(TypeError, match="cannot shard a batch of type str"):
        distributed.shard("tokens", 0, 2)


def test_launch_and_config_must_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SUBMITIT_EXECUTOR"):
        monkeypatch.delenv(key, raising=False)
    assert distributed.init(HardwareConfig(name="cpu"), "cpu") == distributed.DistState()
    with pytest.raises(ConfigError, match="needs a launcher; .*torchrun --nproc_per_node=N -m normbench hardware=ddp"):
        distributed.init(HardwareConfig(name="ddp", distributed=True), "cpu")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(
        ConfigError, match="started as 2 processes .* hardware=cpu is single-process; pass hardware=ddp"
    ):
        distributed.init(HardwareConfig(name="cpu"), "cpu")
    with pytest.raises(ConfigError, match="unknown hardware.backend 'mpi'; valid choices: auto, gloo, nccl"):
        HardwareConfig(name="ddp", distributed=True, backend="mpi")
    with pytest.raises(ConfigError, match="batch_size=33 .* not divisible by the 2 processes"):
        distributed.check_batch(33, distributed.DistState(0, 2, 0, "gloo"))


# ---- two processes against one --------------------------------------------------------------


@pytest.mark.e2e
def test_ddp_groupnorm_follows_the_single_process_trajectory(tmp_path: Path) -> None:
    """GroupNorm has no batch statistics: sharding + gradient averaging alone must reproduce the
    single-process run with the same global batch (augmentation included)."""
    one, two = _single_and_ddp(tmp_path, "norm=gn")
    _assert_same_trajectory(_batch_losses(two), _batch_losses(one))
    s1, s2 = (json.loads((d / "summary.json").read_text()) for d in (one, two))
    for key in ("train/loss", "train/acc", "val/loss", "val/acc"):
        assert s2[key] == pytest.approx(s1[key], rel=1e-5, abs=1e-6), key
    assert (s2["world_size"], s2["dist_backend"], s2["batch_stats_samples"]) == (2, "gloo", 16)
    assert s1["world_size"] == 1


@pytest.mark.e2e
@pytest.mark.slow
def test_ddp_batchnorm_without_sync_differs_from_the_global_batch(tmp_path: Path) -> None:
    """Per-rank BN statistics (16 samples each) are not the global batch's: the trajectories part."""
    one, two = _single_and_ddp(tmp_path, "norm=bn")
    assert not torch.allclose(torch.tensor(_batch_losses(two)), torch.tensor(_batch_losses(one)), rtol=1e-3)
    assert json.loads((two / "summary.json").read_text())["norm_sync"] is False


@needs_sync
def test_ddp_synchronized_batchnorm_follows_the_single_process_trajectory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The torchrun the default suite keeps; its one-process reference runs in this process."""
    one, two = _single_and_ddp(tmp_path, "norm=bn", "norm.sync=true", inprocess=(monkeypatch, capsys))
    _assert_same_trajectory(_batch_losses(two), _batch_losses(one))
    summary = json.loads((two / "summary.json").read_text())
    assert summary["norm_sync"] is True and summary["batch_stats_samples"] == 32
    s1 = json.loads((one / "summary.json").read_text())
    assert summary["val/loss"] == pytest.approx(s1["val/loss"], rel=1e-5)


def _sync_bn_worker(rank: int, world_size: int, store: str, out: str, device: str) -> None:
    import torch.distributed as dist

    from normbench.norms import build_norm

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world_size)
    x = torch.load(Path(out) / "x.pt").to(device)  # cuda: both ranks on cuda:0, as gpu_check's one-GPU DDP step
    norm = build_norm("bn", x.shape[1], sync=True).double().to(device)
    part = x.tensor_split(world_size)[rank].clone().requires_grad_(True)
    y = norm(part)
    (y * torch.arange(y.numel(), dtype=y.dtype, device=device).view_as(y)).sum().backward()
    result = {"y": y.detach(), "grad": part.grad, **dict(norm.named_buffers())}
    torch.save({k: v.cpu() for k, v in result.items()}, Path(out) / f"rank{rank}.pt")
    dist.barrier()  # no rank tears gloo down while the other still uses it
    dist.destroy_process_group()


@pytest.mark.e2e
@needs_sync
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_synchronized_batchnorm_statistics_are_those_of_the_concatenated_batch(tmp_path: Path, device: str) -> None:
    """2 gloo processes, each with half of a batch, against one BatchNorm on the whole batch:
    outputs, input gradients and the running statistics (EMA of the batch statistics) agree.
    On CUDA both ranks share cuda:0 (gloo's all-gather of CUDA tensors segfaulted there: the
    statistics travel through the host)."""
    import torch.multiprocessing as mp

    from normbench.norms import build_norm

    x = torch.randn(6, 5, 3, 3, dtype=torch.float64) * 3 + 1
    torch.save(x, tmp_path / "x.pt")
    mp.spawn(_sync_bn_worker, args=(2, str(tmp_path / "store"), str(tmp_path), device), nprocs=2, join=True)
    parts = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]

    whole = build_norm("bn", 5).double()
    xr = x.clone().requires_grad_(True)
    y = whole(xr)
    (y * torch.cat([torch.arange(p["y"].numel(), dtype=y.dtype).view_as(p["y"]) for p in parts])).sum().backward()
    torch.testing.assert_close(torch.cat([p["y"] for p in parts]), y.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.cat([p["grad"] for p in parts]), xr.grad, rtol=1e-12, atol=1e-12)
    for p in parts:
        torch.testing.assert_close(p["running_mean"], whole.running_mean, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(p["running_var"], whole.running_var, rtol=1e-12, atol=1e-12)


# ---- sweeps through the submitit launcher ---------------------------------------------------

SWEEP = (
    "experiment=quickstart",
    "model.depth=8",
    "max_steps=2",
    "dataset.num_train=128",
    "dataset.num_test=64",
    "batch_size=32",
    "logger.wandb=false",
    "logger.progress_bar=false",
)


def _sweep_rows(sweep: Path) -> list[dict[str, str]]:
    with open(sweep / "sweep_summary.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.e2e
@needs_slurm_extra
def test_submitit_local_sweep_runs_two_jobs_as_separate_processes(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    _launch(tmp_path, "-m", "hydra/launcher=submitit_local", *SWEEP, "norm=bn,gn", f"hydra.sweep.dir={sweep}")
    rows = _sweep_rows(sweep)
    assert [row["overrides"].split()[-1] for row in rows] == ["norm=bn", "norm=gn"]
    assert all(row["status"] == "finished" for row in rows)
    logs = sorted((sweep / ".submitit").rglob("*_0_log.out"))
    assert len(logs) == 2, "one submitit job (its own process) per sweep job"
    summaries = [json.loads((sweep / str(i) / "summary.json").read_text()) for i in range(2)]
    assert [s["step"] for s in summaries] == [2, 2]


@pytest.mark.e2e
@pytest.mark.slow
@needs_slurm_extra
def test_submitit_job_with_two_tasks_trains_data_parallel(tmp_path: Path) -> None:
    """``tasks_per_node=2 hardware=ddp``: the ranks come from submitit's job environment, as on SLURM."""
    sweep = tmp_path / "sweep"
    _launch(
        tmp_path, "-m", "hydra/launcher=submitit_local", "hydra.launcher.tasks_per_node=2", "hardware=ddp",
        *SWEEP, "norm=gn", f"hydra.sweep.dir={sweep}",
    )  # fmt: skip
    assert [row["status"] for row in _sweep_rows(sweep)] == ["finished"]
    summary = json.loads((sweep / "0" / "summary.json").read_text())
    assert (summary["world_size"], summary["dist_backend"]) == (2, "gloo")


@pytest.mark.parametrize(("device", "local_rank", "expected"), [("cuda", 1, 1), ("cuda:0", 1, 0), ("cuda:2", 0, 2)])
def test_ranks_take_an_explicit_device_index_as_given(
    monkeypatch: pytest.MonkeyPatch, device: str, local_rank: int, expected: int
) -> None:
    """``hardware.device=cuda:0`` puts every rank on GPU 0 (two ranks sharing one GPU with gloo);
    ``cuda`` gives each its local rank's GPU."""
    chosen: list[int] = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda *a, **k: None)
    for key, value in {"RANK": local_rank, "WORLD_SIZE": 2, "LOCAL_RANK": local_rank}.items():
        monkeypatch.setenv(key, str(value))
    state = distributed.init(HardwareConfig(distributed=True, device=device, backend="gloo"), "cuda")
    assert chosen == [expected] and state.backend == "gloo"
