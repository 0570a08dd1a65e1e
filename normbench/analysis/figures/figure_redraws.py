"""The code figures that can be redrawn from a results folder's committed files: a registry that a
figure's module fills (`register_redraw`) and `normbench.analysis.figures.figure_record.redraw` reads, and
the reader of a figure CSV (`read_rows`)."""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from normbench.analysis.figures.plot import FigureResult

CODE_REDRAWS: dict[str, Callable[[Path, Sequence[Any]], list[FigureResult]]] = {}
"""A code figure's file stem → the function that redraws it from a results folder (and its
``per_run.csv`` rows, `normbench.analysis.figures.figure_record.TableRun`)."""


def register_redraw(name: str, fn: Callable[[Path, Sequence[Any]], list[FigureResult]]) -> None:
    """Register ``fn(folder, table_runs)`` as the redraw of the code figure whose file stem is ``name``."""
    CODE_REDRAWS[name] = fn


def read_rows(path: Path) -> list[dict[str, Any]]:
    """A figure CSV's rows (`normbench.analysis.figures.plot.CSV_COLUMNS`), numbers as numbers."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        for k in ("x", "median", "lo", "hi"):
            r[k] = float(r[k])
        r["n"] = int(r["n"])
    return rows
