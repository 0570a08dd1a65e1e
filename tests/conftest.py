"""Shared test fixtures: offline W&B, the GPU marker, the shared real data, a composed config (cached),
a CLI runner in this process and one in a subprocess."""

from __future__ import annotations

import copy
import functools
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
from omegaconf import DictConfig

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"
CIFAR_SUBSET = SHARED_DATA / "cifar10-subset"
DE_EN_SUBSET = SHARED_DATA / "de-en-subset"

def load_script(name: str, module_name: str | None = None) -> ModuleType:
    """``scripts/<name>.py`` imported as a module (registered in ``sys.modules`` as ``module_name``,
    default ``<name>_script``), for tests that call a script's functions in this process."""
    spec = importlib.util.spec_from_file_location(module_name or f"{name}_script", REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


if "PYTEST_XDIST_WORKER_COUNT" in os.environ:  # pytest -n N (the README's command): share the cores
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _threads_as_set_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """An in-process run with hardware.num_threads=null keeps this worker's share of the cores and
    says nothing of the machine's load (the tests run beside each other): the load it reads is the
    one that leaves exactly that share free (`normbench.placement.hardware.start_load`)."""
    import torch

    from normbench.placement import hardware

    share = torch.get_num_threads()
    monkeypatch.setattr(hardware, "start_load", lambda: float(hardware.usable_cores() - share))


@pytest.fixture(autouse=True)
def _logger_as_found() -> Iterator[None]:
    """Each test leaves normbench's logger with the handlers it found. An in-process Hydra run
    (`run_cli_inprocess`) attaches its job's log file; a process would end there, a test worker
    goes on, and a later test's warning was written to (or, the refused run's folder removed,
    failed to open) that earlier test's ``cli.log``."""
    from normbench.base.output import LOG

    found = list(LOG.handlers)
    yield
    for handler in list(LOG.handlers):
        if handler not in found:
            LOG.removeHandler(handler)
            handler.close()
    for handler in found:
        if handler not in LOG.handlers:
            LOG.addHandler(handler)


@pytest.fixture(autouse=True)
def _offline_wandb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    # figures as PNG only (a quarter less time per figure); the tests of the written files that
    # check the PDFs too (forest, leaderboard, gn_groups) unset it
    monkeypatch.setenv("NORMBENCH_FIGURE_FORMATS", "png")


def requires_extra(extra: str, module: str) -> pytest.MarkDecorator:
    """Skip a test whose optional dependency (``pip install -e ".[<extra>]"``) is absent."""
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        found = False
    return pytest.mark.skipif(not found, reason=f"needs the '{extra}' extra: pip install -e \".[{extra}]\"")


needs_slurm_extra = requires_extra("slurm", "hydra_plugins.hydra_submitit_launcher")


def compose_cfg(overrides: list[str], hydra: bool = False) -> DictConfig:
    """``conf/config.yaml`` composed with ``overrides`` (and the ``hydra`` node if asked), as Hydra
    composes it for a run. Each distinct command line is composed once per test process (~0.3 s:
    the same presets are composed by many files) and each caller gets its own copy to change."""
    return copy.deepcopy(_composed(tuple(overrides), hydra))


@functools.cache
def _composed(overrides: tuple[str, ...], hydra: bool) -> DictConfig:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from normbench.cli.main import config_dir

    GlobalHydra.instance().clear()  # an in-process run may have left Hydra set up for its own search path
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=hydra)


def run_cli_inprocess(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, str, str]:
    """``normbench *args`` in this process (exit code, stdout, stderr): what `run_cli` checks,
    without a new interpreter's ~5 s of imports."""
    from normbench.cli import main as cli

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.setattr(sys, "argv", ["normbench", *args])
    code: int | str | None = 0
    try:
        cli.cli()
    except SystemExit as e:
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err  # type: ignore[return-value]


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(WANDB_MODE="offline", WANDB_SILENT="true", HYDRA_FULL_ERROR="0", PYTHONUNBUFFERED="1")
    env["NORMBENCH_LOAD_WARNING"] = "off"  # the tests run beside each other: the load says nothing of a run
    env.pop("WANDB_API_KEY", None)
    # an in-process run in this pytest process started a W&B service and exported its address;
    # a subprocess must start its own, as a user's would (a shared service keeps a killed run's id "in use")
    env.pop("WANDB_SERVICE", None)
    return env


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``python -m normbench *args`` in a subprocess, as a user would run it."""
    return subprocess.run(
        [sys.executable, "-m", "normbench", *args],
        cwd=cwd or REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


TINY_RUN = (
    "experiment=quickstart",
    "epochs=1",
    "dataset.num_train=256",
    "dataset.num_test=128",
    "batch_size=32",
    "logger.progress_bar=false",
    "logger.log_every_n_steps=2",
)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted run of `tests.test_reliability.SMALL` (W&B offline), once per module: what the
    interrupted and resumed runs of the signal and resume-record tests are compared with, bit for bit."""
    from tests.test_reliability import SMALL

    out = tmp_path_factory.mktemp("reference") / "run"
    r = run_cli(*SMALL, f"hydra.run.dir={out}")
    assert r.returncode == 0, r.stderr[-3000:]
    return out
