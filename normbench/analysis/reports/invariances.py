"""INVARIANCES.md: the invariance table of Ba et al. 2016 / Zhang & Sennrich 2019, measured.

Every registered norm, in each layout it supports, is put through the six transformations of
`normbench.norms.invariance` (float64, a fresh module in training mode); the file lists what holds
beside the papers' marks, the measured differences, and the gradient scaling of the norms whose
output is invariant to weight matrix re-scaling.

    normbench-reports invariances                          # print the file
    normbench-reports invariances --write INVARIANCES.md   # write it
    normbench-reports invariances --check INVARIANCES.md   # exit 1 if the file differs

(``python -m normbench.analysis.reports.invariances`` is the same.)

``tests/norms/test_invariance.py`` checks the file with `check`: a row that differs from the
measurement, or a norm no longer registered, fails; a newly registered norm without rows is a
warning (the file is regenerated with the results, so adding a norm stays three edits), while
``--check`` fails on it too.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

from normbench.norms import invariance as inv
from normbench.norms.registry import LAYOUTS, list_norms

COMMAND = "normbench-reports invariances --write INVARIANCES.md"
RESCALE = "weight_matrix_rescaling"
SMALL = 1e-9
"""Differences below this are printed as "< 1e-9": their digits are rounding and eps, which vary
with the machine; the mark (≤ `inv.TOL`) does not."""
SHORT = {
    "weight_matrix_rescaling": "W → δW",
    "weight_matrix_recentering": "W → W + 1γᵀ",
    "weight_vector_rescaling": "w_i → δw_i",
    "dataset_rescaling": "x → δx",
    "dataset_recentering": "x → x + γ",
    "single_case_rescaling": "x_n → δx_n",
}
PAPER_ROW = {
    "bn": "Batch norm",
    "ln": "Layer norm",
    "rms": "RMSNorm",
    "prms": "pRMSNorm",
}
LAYOUT_TITLE = {
    "NTC": "Sequences (`NTC`): W applied to each token; a case is one token",
    "NCHW": "Images (`NCHW`): W a 1×1 convolution applied to each pixel; a case is one image",
}


def mark(holds: bool) -> str:
    return "✓" if holds else "✗"


def number(d: float) -> str:
    return f"< {SMALL:.0e}" if d < SMALL else (f"{d:.1e}" if d <= inv.TOL else f"{d:.2g}")


def header(first: list[str], cols: list[str]) -> list[str]:
    names = [*first, *cols]
    return ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]


def mark_table(data: dict[str, dict | None]) -> list[str]:
    """✓/✗ per norm and property, the paper's mark beside where it lists the norm."""
    cols = [f"{inv.LABELS[p]} ({SHORT[p]})" for p in inv.PROPERTIES]
    lines = header(["norm"], [*cols, "agrees with the paper"])
    for name, result in data.items():
        if result is None:
            lines.append(f"| `{name}` | " + " | ".join(["n/a"] * len(cols)) + " | — |")
            continue
        paper = inv.PAPER.get(name)
        cells = []
        for i, prop in enumerate(inv.PROPERTIES):
            m = mark(result[prop][0])
            if paper is not None:
                m = f"{m} (paper {mark(paper[i])})"
                if paper[i] != result[prop][0]:
                    m = f"**{m}**"
            cells.append(m)
        if paper is None:
            agree = "—"
        else:
            same = sum(p == result[prop][0] for p, prop in zip(paper, inv.PROPERTIES))
            agree = f"{'yes' if same == len(paper) else '**no**'} ({same}/{len(paper)}, {PAPER_ROW[name]})"
        lines.append(f"| `{name}` | " + " | ".join(cells) + f" | {agree} |")
    return lines


def diff_table(data: dict[str, dict | None]) -> list[str]:
    """The measured max relative difference per norm and property."""
    lines = header(["norm"], [SHORT[p] for p in inv.PROPERTIES])
    for name, result in data.items():
        cells = ["n/a"] * len(inv.PROPERTIES) if result is None else [number(result[p][1]) for p in inv.PROPERTIES]
        lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    return lines


def gradient_table(data: dict[str, dict[str, dict | None]], names: list[str]) -> list[str]:
    """`inv.gradient_ratio` at init and after training, for each norm invariant to W → δW."""
    lines = header(
        ["norm", "layout"],
        [
            "‖g(δW)‖ / ‖g(W)‖ at init",
            f"after {inv.TRAIN_STEPS} SGD steps",
            "max \\|δ·g(δW) − g(W)\\| / max \\|g(W)\\|: init / trained",
            f"loss: init → {inv.TRAIN_STEPS} steps",
        ],
    )
    for name in names:
        for layout in LAYOUTS:
            result = data[layout][name]
            if result is None or not result[RESCALE][0]:
                continue
            at_init = inv.gradient_ratio(name, layout)
            trained = inv.gradient_ratio(name, layout, steps=inv.TRAIN_STEPS)
            _, losses = inv.trained_weight(name, layout)
            lines.append(
                f"| `{name}` | {layout} | {at_init['ratio']:.6f} | {trained['ratio']:.6f} | "
                f"{number(at_init['max_rel_diff'])} / {number(trained['max_rel_diff'])} | "
                f"{losses[0]:.4g} → {losses[-1]:.4g} |"
            )
    return lines


def setup_section() -> list[str]:
    """The title, where the file comes from, the set-up, the transformations and the batches."""
    out = [
        "# Invariances of the normalization layers",
        "",
        f"<!-- generated by `{COMMAND}`; do not edit by hand -->",
        "",
        "Ba et al. 2016 (*Layer Normalization*, §5.1, Table 1) compare what batch, weight and layer",
        "normalization are invariant to; Zhang & Sennrich 2019 (*Root Mean Square Layer Normalization*,",
        "Table 1) add RMSNorm and pRMSNorm. Here every registered norm is measured against the same six",
        "transformations (issue 28, item 3): `normbench/norms/invariance.py` does the maths, the",
        "command above writes this file, and `tests/norms/test_invariance.py` fails when it is stale",
        "(`--check`), when a measurement departs from the maths, or when a paper's mark does.",
        "",
        "## Set-up",
        "",
        "Summed inputs a = W x (no bias) of a linear map W (units × inputs), normalized by the norm; a",
        "property holds (✓) when the norm's output y is unchanged:",
        f"max |y′ − y| ≤ {inv.TOL:g} · max(1, max |y|), in float64, eps = {inv.EPS:g}, δ = {inv.DELTA} and",
        f"γ a fixed random vector of R^inputs ({inv.UNITS} units, {inv.INPUTS} inputs). Training mode, a",
        "fresh module for every call and the same RNG seed before it (the noisy norms draw the same",
        "noise); affine parameters set to fixed random values.",
        "",
    ]
    definitions = {
        "weight_matrix_rescaling": "W → δ·W.",
        "weight_matrix_recentering": "W → W + 1γᵀ: γ added to every row, so all summed inputs of a "
        "case shift by the same scalar γᵀx (which differs between cases).",
        "weight_vector_rescaling": f"one row w_i → δ·w_i (unit {inv.UNIT}).",
        "dataset_rescaling": "x → δ·x for every case.",
        "dataset_recentering": "x → x + γ for every case (the same γ at every token and pixel): "
        "each unit shifts by the constant (Wγ)_i.",
        "single_case_rescaling": "one case x_n → δ·x_n (token 0 of sequence 0; image 0).",
    }
    out += [f"- **{inv.LABELS[p]}**: {definitions[p]}" for p in inv.PROPERTIES]
    t, h = inv.SHAPES["NTC"], inv.SHAPES["NCHW"]
    out += [
        "",
        f"Batches: {t[0]} sequences × {t[1]} tokens ({t[0] * t[1]} cases) and {h[0]} images of {h[1]}×{h[2]} pixels.",
        "Where a paper lists the norm, its mark is beside the measured one (bold where they differ);",
        "`ln` (over the units of one token or pixel) is the papers' layer norm.",
        "",
    ]
    return out


def tables_section(data: dict[str, dict[str, dict | None]]) -> list[str]:
    """The marks and the measured differences, one table per layout."""
    out: list[str] = []
    for layout in LAYOUTS:
        out += [f"## {LAYOUT_TITLE[layout]}", "", *mark_table(data[layout]), ""]
    out += [
        "## Measured differences",
        "",
        f"max |y′ − y| / max(1, max |y|) per norm and transformation; ✓ where it is at most {inv.TOL:g}.",
        "",
    ]
    for layout in LAYOUTS:
        out += [f"### {layout}", "", *diff_table(data[layout]), ""]
    return out


def notes_section(data: dict[str, dict[str, dict | None]], names: list[str], not_invariant: list[str]) -> list[str]:
    """The gradient scaling table, the norms it leaves out, and the notes."""
    groups = inv.EXTRA_KW["gn"]["groups"]
    out: list[str] = []
    out += [
        "## Gradient scaling",
        "",
        "A norm whose output is invariant to W → δW has ∂L/∂W at δW equal to (1/δ)·∂L/∂W at W, for any",
        "loss L of its output: the weight gradient shrinks as W grows (both papers' implicit",
        "learning-rate adaptation). L = ½·mean over positions of (Σ_units R·y − t)², R and t fixed",
        f"random; W at initialization and after {inv.TRAIN_STEPS} plain SGD steps (lr {inv.LR}) on L.",
        f"g = ∂L/∂W; the expected ratio is 1/δ = {1 / inv.DELTA:.6f}.",
        "",
        *gradient_table(data, names),
        "",
        f"Not listed: {', '.join(f'`{n}`' for n in not_invariant)} (output not invariant to W → δW).",
        "",
        "## Notes",
        "",
        "- State of the norms with schedules or running estimates: each call builds a fresh module in",
        "  training mode outside the runner, so no schedule is planned. `bn`, `bn_noisy`: batch",
        "  statistics (the running estimates are updated, not used). `brn`: in its warm-up (r = 1,",
        "  d = 0), i.e. plain BatchNorm; past it r and d pull the output towards the running",
        "  statistics, which this table does not measure. `pn`: in its warm-up, dividing by the batch's",
        "  ψ²_B (past it, by the running ψ², not measured); its gradient is PowerNorm's approximate",
        "  backward with `ema_gz` = 0 (a fresh module).",
        f"- Settings: `gn` with {groups} groups of {inv.UNITS // groups} channels; `prms` with its default",
        f"  p = 0.0625, so the RMS of k = 1 of the {inv.UNITS} channels divides; `pn` with 1 GroupScaling group.",
        "- `pn` normalizes over the batch yet has `rms`'s marks: its GroupScaling (an RMSNorm of each",
        "  position, without γ) comes first, so re-scaling one case is undone before the batch's ψ²_B",
        "  sees it, and re-scaling one unit or shifting the data is not.",
        "- `ln_sample`, `gn` and `in` take statistics over all positions of a sequence or image, so in",
        "  `NTC` (a case is a token) re-scaling one token changes the others' outputs, and",
        "  W → W + 1γᵀ (a shift γᵀx that differs between positions) is not undone. Ba et al.'s",
        "  layer norm for a fully connected layer is `ln`.",
        "- `none` and `noise_only` change under every transformation (nothing normalizes a).",
        "- The papers' marks: Zhang & Sennrich's Table 1 (BatchNorm, WeightNorm, LayerNorm, RMSNorm,",
        "  pRMSNorm) as the authors' repository reproduces it (github.com/bzhangGo/rmsnorm, README.md).",
        "  Ba et al.'s Table 1 itself could not be read here; its batch and layer norm rows are taken",
        "  as Zhang & Sennrich repeat them. Weight normalization is not a normbench norm.",
    ]
    return out


def document(names: list[str] | None = None) -> str:
    """The file, for ``names`` (every registered norm unless given)."""
    names = list_norms() if names is None else sorted(names)
    data = inv.table_data(names)
    not_invariant = [n for n in names if any(r[n] and not r[n][RESCALE][0] for r in data.values())]
    out = [*setup_section(), *tables_section(data), *notes_section(data, names, not_invariant)]
    return "\n".join(out) + "\n"


def listed(text: str) -> set[str]:
    """The norms a written file has rows for."""
    return set(re.findall(r"^\| `(\w+)` \|", text, flags=re.MULTILINE))


def check(path: Path) -> tuple[str, list[str]]:
    """(the differences of ``path`` from the document for the norms it lists, "" if none; the
    registered norms it lacks). A listed norm that is no longer registered is a difference."""
    current = path.read_text() if path.exists() else ""
    names = listed(current)
    gone = sorted(names - set(list_norms()))
    text = document(sorted(names - set(gone)))
    diff = difflib.unified_diff(current.splitlines(), text.splitlines(), str(path), "measured")
    stale = "\n".join(line.rstrip("\n") for line in diff)
    if gone:
        stale = f"rows for norms no longer registered: {', '.join(gone)}\n{stale}"
    return stale, sorted(set(list_norms()) - names)


def main(argv: list[str] | None = None, prog: str = "python -m normbench.analysis.reports.invariances") -> int:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, help="write the document to this file")
    group.add_argument("--check", type=Path, help="exit 1 unless this file equals the document")
    args = parser.parse_args(argv)
    if args.check is not None:
        stale, missing = check(args.check)
        if stale or missing:
            lacks = f" It lacks {', '.join(missing)}." if missing else ""
            print(f"{args.check} is stale; run `{COMMAND}`.{lacks} Differences:", file=sys.stderr)
            print(stale, file=sys.stderr)
            return 1
        return 0
    text = document()
    if args.write is not None:
        args.write.write_text(text)
        return 0
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
