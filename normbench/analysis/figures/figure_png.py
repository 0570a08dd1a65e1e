"""A figure's spec in its PNG: all its text and plotted data (titles, labels, tick labels,
annotations, legends; each line's points, each bar, each collection's extent), numbers rounded to
`DIGITS` significant digits, written into the PNG's metadata under `SPEC_KEY` (`save_png`) and
read back (`png_spec`), so that a test can tell a committed figure from a redraw of it without
comparing pixels (`normbench.analysis.figures.figure_record`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure
from PIL import Image

SPEC_KEY = "normbench-figure-spec"
DIGITS = 4
"""Significant digits of every number in a spec (a redraw agrees to them, not to the last bit)."""


def _round(v: Any) -> Any:
    if isinstance(v, float) or hasattr(v, "dtype"):
        v = float(v)
        return round(v, DIGITS - 1 - int(math.floor(math.log10(abs(v))))) if v and math.isfinite(v) else v
    if isinstance(v, (list, tuple)):
        return [_round(x) for x in v]
    return v


def _texts(items: Any) -> list[str]:
    return [t.get_text() for t in items if t.get_visible() and t.get_text().strip()]


def _axes_spec(ax: Any) -> dict[str, Any]:
    legend = ax.get_legend()
    lines = [[ln.get_label(), _round(ln.get_xydata().tolist())] for ln in ax.lines if ln.get_visible()]
    bands = [_round(list(c.get_datalim(ax.transData).extents)) for c in ax.collections if c.get_visible()]
    bars = [_round([p.get_x(), p.get_y(), p.get_width(), p.get_height()]) for p in ax.patches if p.get_visible()]
    out = {
        "titles": _texts([ax.title, ax._left_title, ax._right_title]),
        "texts": _texts(ax.texts),
        "legend": _texts(legend.get_texts()) if legend is not None else [],
        "lines": lines,
        "collections": bands,
        "bars": bars,
    }
    if ax.axison:
        out |= {"xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(), "xscale": ax.get_xscale(),
                "yscale": ax.get_yscale(), "xticks": _texts(ax.get_xticklabels()),
                "yticks": _texts(ax.get_yticklabels())}  # fmt: skip
    return out


def figure_spec(fig: Figure) -> dict[str, Any]:
    """All text and plotted data of ``fig`` as drawn now (numbers to `DIGITS` significant digits)."""
    fig.canvas.draw()
    return {"texts": _texts(fig.texts), "legends": [_texts(lg.get_texts()) for lg in fig.legends],
            "axes": [_axes_spec(ax) for ax in fig.axes]}  # fmt: skip


def spec_json(spec: dict[str, Any]) -> str:
    return json.dumps(spec, ensure_ascii=True, sort_keys=True, separators=(",", ":"))


def save_png(fig: Figure, path: Path, dpi: int = 150) -> Path:
    """``fig`` as a PNG at ``path`` with its `figure_spec` in the metadata (`SPEC_KEY`)."""
    fig.savefig(path, dpi=dpi, metadata={SPEC_KEY: spec_json(figure_spec(fig))})
    return path


def png_spec(path: Path) -> dict[str, Any] | None:
    """The spec written into the PNG at ``path``, or None when it carries none (drawn before specs)."""
    with Image.open(path) as im:
        text = getattr(im, "text", {}).get(SPEC_KEY)
    return json.loads(text) if text else None


