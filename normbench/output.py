"""What normbench writes outside the metric sinks: one-line warnings on stderr, files written
atomically, CSV files and plain-text tables."""

from __future__ import annotations

import csv
import os
import sys
from pathlib import Path
from typing import Any


def warn(message: str) -> None:
    """``normbench: warning: <message>`` on stderr."""
    print(f"normbench: warning: {message}", file=sys.stderr, flush=True)


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file, flush + fsync, then ``os.replace``: readers see the old file or
    the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_csv(path: Path, rows: list[dict[str, Any]]) -> list[str]:
    """``rows`` as a CSV file (parent folders made), columns in order of first appearance;
    returns the columns."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return columns


def format_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """``rows`` as an aligned plain-text table of ``columns`` (floats to 4 significant digits)."""

    def fmt(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else ("" if v is None else str(v))

    cells = [[fmt(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)
