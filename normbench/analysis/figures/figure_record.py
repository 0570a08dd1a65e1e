"""A figure's spec (all its text and plotted data, rounded) written into its PNG, and redrawing a
results folder's figures from its committed files, so that a committed figure is never stale
(issue 57).

- `figure_spec(fig)`: the figure's texts (titles, labels, tick labels, annotations, legends) and
  data (each line's points, each bar, each band's extent), numbers to `DIGITS` significant digits;
  `save_png` writes it into the PNG's metadata under `SPEC_KEY`; `png_spec` reads it back.
- `redraw_folder(folder)`: every figure of ``results/<preset>`` that can be drawn from the folder's
  committed files (its figure CSV and ``per_run.csv``: the figures of the rules' ``figures:`` block,
  `normbench.analysis.figures.figure_spec.draw_spec`) drawn again and written (PNG with its spec, PDF where
  one is committed). The coordinator's call::

      python -c "from pathlib import Path; from normbench.analysis.figures.figure_record import redraw_folder; \
[print(p) for d in sorted(Path('results').glob('*_cpu')) for p in redraw_folder(d)]"

- `stale_figures(folder)`: (problems, skipped): a figure whose committed spec differs from the
  redraw's is a problem; a PNG with no spec (drawn before specs) or with no redrawer is skipped,
  with the reason.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from normbench.analysis.figures.figure_png import figure_spec, png_spec, save_png, spec_json
from normbench.analysis.figures.figure_redraws import CODE_REDRAWS, read_rows
from normbench.analysis.figures.plot import FigureResult, place_legends
from normbench.analysis.judging.figure_schema import FigureSpec
from normbench.analysis.judging.per_run import SCOPE
from normbench.analysis.judging.rules_schema import load_rules
from normbench.rules import base_preset


class TableRun:
    """A run as a ``per_run.csv`` row gives it: its config values, seed and status (what a redraw
    needs to know the arms: labels, colours, order and the title's scope), no history."""

    def __init__(self, row: dict[str, str]) -> None:
        self.row = row
        self.seed = int(float(row.get("seed") or 0))
        self.status = row.get("status", "finished")
        self.final_step = int(float(row["final:step"])) if row.get("final:step") else 0

    def get(self, dotted: str, default: Any = None) -> Any:
        value = self.row.get(dotted)
        if value is None or value == "":  # a setting the table keeps for titles only (`per_run.SCOPE`)
            value = self.row.get(SCOPE + dotted)
        if value is None or value == "":
            return default
        for cast in (int, float):
            try:
                return cast(value)
            except ValueError:
                continue
        return {"True": True, "False": False}.get(value, value)


def table_runs(folder: Path) -> list[TableRun]:
    with open(folder / "per_run.csv", newline="") as f:
        return [TableRun(r) for r in csv.DictReader(f)]


def preset_of(folder: Path) -> str:
    """``results/gn_groups_cpu`` → ``gn_groups_cpu`` (its rules: ``gn_groups``'s)."""
    return folder.name


def judged_rules_hash(folder: Path) -> str | None:
    """The one rules hash the folder's ``claims.csv`` was judged under (None: no claims.csv, or none
    or several hashes there: the current rules draw)."""
    if not (folder / "claims.csv").is_file():
        return None
    with open(folder / "claims.csv", newline="") as f:
        hashes = {r.get("rules_hash") or "" for r in csv.DictReader(f)}
    return hashes.pop() if len(hashes) == 1 and "" not in hashes else None


def redraw(folder: Path) -> list[FigureResult]:
    """Every figure of the folder's preset that its committed files draw (see the module's docstring),
    under the rules its claims were judged under (a superseded file's figure specs for a folder that
    awaits its rerun: the runs were drawn by those)."""
    import normbench.analysis.figures.groups  # noqa: F401  (their imports register the code figures' redraws)
    import normbench.analysis.figures.transformer  # noqa: F401
    from normbench.analysis.figures.figure_spec import arm_runs, draw_spec

    rules = load_rules(base_preset(preset_of(folder)), judged_rules_hash(folder))
    if rules is None or rules.figures is None or not (folder / "per_run.csv").is_file():
        return []
    runs, out = table_runs(folder), []
    for spec in (s for s in rules.figures.draw if isinstance(s, FigureSpec)):
        if (folder / f"{spec.name}.csv").is_file():
            out.append(draw_spec(spec, arm_runs(spec, runs), read_rows(folder / f"{spec.name}.csv"), runs))
    codes = {getattr(s, "code", None) for s in rules.figures.draw}  # a code figure's name: its file stem
    for name, fn in CODE_REDRAWS.items():
        if name in codes and (folder / f"{name}.csv").is_file():
            out += fn(folder, runs)
    return out


def finished(res: FigureResult) -> Figure:
    """The figure laid out as `normbench.analysis.figures.plot.write_outputs` lays it out."""
    res.fig.tight_layout()
    place_legends(res.fig)
    return res.fig


def redraw_folder(folder: str | Path) -> list[Path]:
    """Redraw the folder's figures from its committed files (`redraw`) and write each PNG (with its
    spec) and, where one is committed, its PDF; returns the paths written."""
    import matplotlib.pyplot as plt

    folder, written = Path(folder), []
    for res in redraw(folder):
        fig = finished(res)
        written.append(save_png(fig, folder / f"{res.name}.png"))
        if (folder / f"{res.name}.pdf").is_file():
            fig.savefig(folder / f"{res.name}.pdf", dpi=150)
            written.append(folder / f"{res.name}.pdf")
        plt.close(fig)
    return written


def stale_figures(folder: str | Path) -> tuple[list[str], list[str]]:
    """(problems, skipped) of the folder's committed PNGs (forests are `normbench.analysis.figures.forest`'s):
    a PNG whose spec differs from its redraw's is a problem; one with no spec or no redrawer is skipped."""
    import matplotlib.pyplot as plt

    folder = Path(folder)
    drawn = {res.name: res for res in redraw(folder)}
    problems, skipped = [], []
    for png in sorted(folder.glob("*.png")):
        if png.stem == "forest":
            continue
        committed = png_spec(png)
        if committed is None:
            fix = "redraw_folder writes one" if png.stem in drawn else "its runs' histories are not committed"
            skipped.append(f"{png}: no spec in the PNG (drawn before issue 57); {fix}")
        elif png.stem not in drawn:
            skipped.append(f"{png}: drawn from the runs' histories, which are not committed: no redraw")
        elif spec_json(figure_spec(finished(drawn[png.stem]))) != spec_json(committed):
            problems.append(f"{png}: stale: its spec differs from a redraw from {folder}'s committed files")
    for res in drawn.values():
        plt.close(res.fig)
    return problems, skipped
