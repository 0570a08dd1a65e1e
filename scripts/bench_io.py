"""What every bench CSV records about the machine, and how the bench scripts write their CSVs.

`versions`: the GPU and software a row was measured with, ``VERSION_COLUMNS`` = ``gpu``,
``driver``, ``cuda``, ``cudnn``, ``torch``. The bench scripts (``bench_norms.py``,
``bench_epoch.py``, ``bench_overhead.py``, ``bench_diagnostics.py``, ``sync_debug.py``) and the
summaries in ``gpu_check.sh`` append these five columns, in this order, as the last columns of
every row. On a CUDA device: the GPU's name, the NVIDIA driver version (``nvidia-smi
--query-gpu=driver_version``; where nvidia-smi is missing or fails, the CUDA driver API version
torch reads, written ``CUDA driver API 12.4``; else empty), torch's CUDA and cuDNN versions
(``torch.version.cuda``, ``torch.backends.cudnn.version()``). On the CPU only ``torch`` is filled;
the GPU fields are empty.

`is_sync_warning`: which of torch's sync-debug warnings report a synchronizing call
(``sync_debug.py`` and ``gpu_check.sh``'s versions step count them).

`CsvRows`: a CSV file written as its rows are measured: the header with the first row (its keys,
then the version columns), each row flushed at once, so that a script stopped by a time limit
leaves the rows it finished. `CsvRows.replace` rewrites the whole file (to a temporary file,
then renamed), for a script whose rows are summaries recomputed as measurements come in.

The scripts run as ``python scripts/<name>.py``, so this folder is first on ``sys.path`` and
``import bench_io`` finds this file.
"""

from __future__ import annotations

import csv
import functools
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

import torch

VERSION_COLUMNS = ("gpu", "driver", "cuda", "cudnn", "torch")


def nvidia_driver() -> str:
    """The NVIDIA driver version from ``nvidia-smi`` (its first GPU's line); empty without it."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ""
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    return lines[0] if lines else ""


def cuda_driver_api() -> str:
    """The CUDA driver API version torch reads (``CUDA driver API 12.4``); empty where it cannot."""
    try:
        v = int(torch._C._cuda_getDriverVersion())
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return ""
    return f"CUDA driver API {v // 1000}.{v % 1000 // 10}" if v > 0 else ""


@functools.cache
def _versions(device_type: str, index: int | None) -> tuple[tuple[str, str], ...]:
    info = dict.fromkeys(VERSION_COLUMNS, "")
    info["torch"] = str(torch.__version__)
    if device_type == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(index if index is not None else torch.cuda.current_device())
        info["driver"] = nvidia_driver() or cuda_driver_api()
        info["cuda"] = torch.version.cuda or ""
        if torch.backends.cudnn.is_available():
            info["cudnn"] = str(torch.backends.cudnn.version() or "")
    return tuple(info.items())


def versions(device: str | torch.device = "cpu") -> dict[str, str]:
    """``VERSION_COLUMNS`` for rows measured on ``device`` (``cpu``, ``cuda``, ``cuda:N``): all
    five on a CUDA device, only ``torch`` on the CPU (the others empty, never an error)."""
    d = torch.device(device)
    return dict(_versions(d.type, d.index))


def is_sync_warning(text: str) -> bool:
    """A warning of torch's sync debug mode about a synchronizing operation, not the notice it issues
    when the mode is set, that "Synchronization debug mode is a prototype feature" (seen on torch
    2.11: it stood in `sync_debug.py`'s control row and in `gpu_check.sh`'s count)."""
    return "synchroniz" in text.lower() and "prototype feature" not in text


class CsvRows:
    """A CSV file written row by row, each row flushed as it is written; ``path=None`` keeps
    the rows in memory only. ``extra`` (the `versions`) ends every row."""

    def __init__(self, path: Path | None, extra: Mapping[str, Any] | None = None) -> None:
        self.path = path
        self.extra = dict(extra or {})
        self.rows: list[dict[str, Any]] = []
        self.columns: list[str] = []
        self._file: TextIO | None = None
        self._writer: csv.DictWriter | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Append ``row`` (then the extra columns) and flush; the row as written."""
        full = {**row, **self.extra}
        if not self.columns:
            self.columns = list(full)
        self.rows.append(full)
        if self.path is None:
            return full
        if self._writer is None:
            self._file = open(self.path, "w", newline="")  # noqa: SIM115  (closed by close())
            self._writer = csv.DictWriter(self._file, fieldnames=self.columns)
            self._writer.writeheader()
        self._writer.writerow(full)
        assert self._file is not None
        self._file.flush()
        return full

    def replace(self, rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """The file holds exactly ``rows`` (each with the extra columns) from now on: written to
        ``<path>.tmp``, then renamed over ``path``; the rows as written."""
        self.close()
        self.rows = [{**row, **self.extra} for row in rows]
        self.columns = list(dict.fromkeys(k for row in self.rows for k in row))
        if self.path is not None and self.rows:
            tmp = self.path.with_name(self.path.name + ".tmp")
            with open(tmp, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=self.columns)
                writer.writeheader()
                writer.writerows(self.rows)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        return self.rows

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        self._file = self._writer = None

    def __enter__(self) -> CsvRows:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
