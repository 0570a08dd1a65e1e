"""How a W&B run starts (`normbench.sinks.wandb_start`), issue 59: online without a network it
falls back to offline after a connect of a few seconds with one line (it took 85 s and ~35 lines
of W&B's text); a run W&B cannot start at all stops before training in one line, no traceback,
nothing of the run left."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from normbench.sinks.logger_config import LoggerConfig
from normbench.sinks.wandb_run import WandbSink
from normbench.sinks.wandb_start import WandbSetupError, unreachable
from tests.conftest import TINY_RUN, run_cli_inprocess
from tests.faults import fault


def test_a_closed_port_is_unreachable_and_a_listening_one_is_not(monkeypatch) -> None:
    for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        assert unreachable(f"http://127.0.0.1:{port}", 1.0) is None
    why = unreachable(f"http://127.0.0.1:{port}", 1.0)  # closed now: refused
    assert why is not None and why.startswith(f"no network: cannot reach 127.0.0.1:{port} within 1 s (")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")  # a direct connect says nothing behind a proxy
    assert unreachable(f"http://127.0.0.1:{port}", 1.0) is None


def _no_network(monkeypatch) -> None:
    for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(k, raising=False)

    def refuse(*args, **kwargs):
        raise ConnectionRefusedError(111, "Connection refused")

    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.e2e  # W&B's service process
@fault("W&B online without a network (issue 59)", "one warning line and the run logs offline within seconds", "result")
def test_online_without_a_network_falls_back_at_once_in_one_line(tmp_path: Path, monkeypatch, capfd) -> None:
    _no_network(monkeypatch)
    monkeypatch.setenv("WANDB_API_KEY", "a" * 40)
    init_called: list[str] = []
    import wandb

    real_init = wandb.init
    monkeypatch.setattr(wandb, "init", lambda **kw: init_called.append(kw["mode"]) or real_init(**kw))
    begun = time.monotonic()
    sink = WandbSink(LoggerConfig(mode="online", init_timeout_s=60), tmp_path, {"seed": 0}, None)
    took = time.monotonic() - begun
    sink.finish({"status": "finished"})
    err = capfd.readouterr().err
    assert init_called == ["offline"] and took < 30, (init_called, took)  # online never tried: no 60 s wait
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("normbench: warning: W&B could not start online (no network: "), err
    assert f"logging offline under {tmp_path / 'wandb'}" in lines[0]
    assert list(tmp_path.glob("wandb/offline-run-*"))


@fault("W&B cannot start a run at all (its service, its folder; issue 59)",
       "one line naming W&B's error, exit 2, nothing "
       "of the run left", "one-line")  # fmt: skip
@pytest.mark.parametrize("mode", ["offline", "online"])
def test_a_run_wandb_cannot_start_stops_in_one_line(tmp_path: Path, monkeypatch, capsys, mode: str) -> None:
    import wandb

    _no_network(monkeypatch)

    def broken(**kwargs):
        raise wandb.errors.CommError("the W&B service did not start\nsecond line")

    monkeypatch.setattr(wandb, "init", broken)
    out = tmp_path / "run"
    code, _, err = run_cli_inprocess(monkeypatch, capsys, *TINY_RUN, "logger=wandb", f"logger.mode={mode}",
                                     f"hydra.run.dir={out}")  # fmt: skip
    lines = [line for line in err.splitlines() if line.strip() and "warning" not in line]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"normbench: error: W&B could not start the run in {out} (CommError: the W&B service "
                               "did not start second line); the run stops before training")  # fmt: skip
    assert "logger.wandb=false" in lines[0]
    assert not out.exists()


def test_the_setup_error_is_a_config_error() -> None:
    from normbench.base.errors import ConfigError

    assert issubclass(WandbSetupError, ConfigError)  # cli.main: one line, exit 2, the run's new files removed
