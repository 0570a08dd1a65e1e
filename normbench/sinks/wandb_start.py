"""How a W&B run starts, or why it does not, in one line (`normbench.sinks.wandb_run.WandbSink`).

- Online, the W&B server is first tried with a TCP connect of at most `CONNECT_TIMEOUT_S` seconds
  (`unreachable`; skipped behind a proxy, where a direct connect says nothing): without a network
  the run logs offline at once, with one warning line (W&B's own try took ``init_timeout`` twice
  over, 85 s at 60 s, and printed ~35 lines). A server that answers but cannot start the run
  within ``logger.init_timeout_s`` (W&B's ``init_timeout``) falls back alike. The offline run of a
  fallback is silent: the warning line names its folder and ``wandb sync``.
- A run W&B cannot start even offline (its service does not start, its folder cannot be written)
  is `WandbSetupError`: one line naming W&B's error and how to run without it; the run stops
  before training (a `ConfigError`: exit 2, nothing of the run left, as for any refused run: W&B
  starts before the local records, ``normbench.run.loop.train.open_sinks``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from normbench.base.errors import ConfigError
from normbench.base.layout import RunDir
from normbench.base.output import warn

CONNECT_TIMEOUT_S = 5.0
"""The longest the server's TCP connect is waited for before W&B is asked to start online."""
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


class WandbSetupError(ConfigError):
    """W&B could not start the run, online or offline; the message is one line."""


def first_words(e: BaseException, n: int = 30) -> str:
    """``TypeName: the first n words of the message`` on one line."""
    return f"{type(e).__name__}: {' '.join(str(e).split()[:n])}".rstrip(": ")


def unreachable(url: str, timeout: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why the server at ``url`` takes no TCP connection within ``timeout`` seconds; None when it
    does, when a proxy is set or when ``url`` names no host."""
    if any(os.environ.get(k) for k in PROXY_VARIABLES):
        return None
    parsed = urlparse(url)
    if not parsed.hostname:
        return None
    port = parsed.port or (80 if parsed.scheme == "http" else 443)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout):
            return None
    except OSError as e:
        return f"no network: cannot reach {parsed.hostname}:{port} within {timeout:g} s ({first_words(e, 12)})"


def start(wandb: Any, mode: str, kwargs: dict[str, Any], init_timeout_s: float, run_dir: Path,
          fresh_id: Callable[[], str]) -> Any:  # fmt: skip
    """The W&B run: started in ``mode`` (``online`` tried first as the module doc says), else
    offline with one warning; `WandbSetupError` when it cannot be started at all (W&B's folder in
    the run directory, when this attempt made it, removed: the run leaves no record of its own)."""
    folder = RunDir(run_dir).wandb
    existed = folder.exists()
    try:
        return _start(wandb, mode, kwargs, init_timeout_s, run_dir, fresh_id)
    except WandbSetupError:
        if not existed:
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _start(wandb: Any, mode: str, kwargs: dict[str, Any], init_timeout_s: float, run_dir: Path,
           fresh_id: Callable[[], str]) -> Any:  # fmt: skip
    why = None
    if mode == "online":
        why = unreachable(wandb.Settings().base_url, min(CONNECT_TIMEOUT_S, init_timeout_s))
    if why is None:
        try:
            return wandb.init(mode=mode, **kwargs)
        except Exception as e:
            if mode in ("offline", "disabled"):
                raise WandbSetupError(setup_failed(e, run_dir)) from None
            why = first_words(e)
            with contextlib.suppress(Exception):
                wandb.teardown()  # the failed run would keep its id "in use" in W&B's service
    warn(f"W&B could not start {mode} ({why}); logging offline under {run_dir / 'wandb'} "
         "(upload later with `wandb sync`)")  # fmt: skip
    silent = {**kwargs, "settings": wandb.Settings(init_timeout=init_timeout_s, silent=True)}
    try:
        try:
            return wandb.init(mode="offline", **silent)
        except Exception:  # the id is still held by the failed attempt: a new offline run
            return wandb.init(mode="offline", **{**silent, "id": fresh_id()})
    except Exception as e:
        raise WandbSetupError(setup_failed(e, run_dir)) from None


def setup_failed(e: BaseException, run_dir: Path) -> str:
    """The one line of a run W&B could not start even offline."""
    return (f"W&B could not start the run in {run_dir} ({first_words(e)}); the run stops before training: "
            "run without W&B with logger.wandb=false, or fix W&B's set-up")  # fmt: skip
