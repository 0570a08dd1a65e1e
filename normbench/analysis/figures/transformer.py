"""Transformer comparisons of norms on translation, from `powernorm_mt`, `rmsnorm_speed` and
`ln_axes` sweeps: validation loss against steps, BLEU and training throughput per norm.

- `powernorm_mt`: Shen et al. 2020, their IWSLT14 table: encoder norm LN / BN / PN (decoder
  LN); reported BLEU 35.5 (LN), 35.9 (PN), BN well below.
- `powernorm_chain`: the same setup, their chain BN → PN-V → PN beside LN (PN-V: PowerNorm with
  ``forward_stats=batch``, shown as ``pn_v``).
- `rmsnorm_speed`: Zhang & Sennrich 2019: LN / RMSNorm / partial RMSNorm, tokens per second
  and quality at equal steps; `rmsnorm_time`: the same norms' loss at equal training time and at
  equal steps (`normbench.analysis.figures.train_clock`).
- `bn_padding`: BN in the encoder with its statistics over real tokens or over the padding too,
  length-bucketed or mixed batches, beside LN.
- `prms_width`: Zhang & Sennrich 2019: LN / RMSNorm / partial RMSNorm at d_model 512 (pRMSNorm's
  RMS from 32 channels): the training loss by step, the final validation loss and BLEU.
- `ln_axes`: LayerNorm per token (``ln``) against per sentence (``ln_sample``) and instance
  norm over time (``in``), in the encoder (LN decoder: the decoder must stay causal).

End-of-run values (loss, BLEU) are points at the median over seeds with min–max error bars and
each seed beside them, on an axis scaled to them (bars from 0 hid the differences); throughput
bars; curves medians with the min–max shaded. The
claims are in ``normbench/rules/<preset>.yaml``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from normbench.analysis.figures.figure_redraws import read_rows, register_redraw
from normbench.analysis.figures.norm_figure import NormFigure, color_of, draw_norm_figure, end_points
from normbench.analysis.figures.plot import (
    NORM_COLORS,
    FigureResult,
    add_point_rows,
    finish_axes,
    new_figure,
    point_panel,
    seed_curve,
)
from normbench.analysis.figures.train_clock import has_clock, smoothed_loss, time_figure
from normbench.analysis.judging.claims import measure
from normbench.analysis.judging.stats import median_over_steps
from normbench.analysis.loading.runs import Run
from normbench.analysis.wording.figure_names import arm_name, metric_name, titled

if TYPE_CHECKING:
    from matplotlib.axes import Axes

VAL_LOSS = "val/loss"
TRAIN_LOSS = "train/batch_loss"
BLEU_KEYS = ("test/bleu", "val/bleu")
TOKENS_PER_S = "perf/tokens_per_s"


def encoder_norm(run: Run) -> str:
    """The encoder's norm: ``model.encoder_norm`` when set, else the run's ``norm``."""
    return str(run.stack_norm("encoder").name)


def run_norm(run: Run) -> str:
    return str(run.record.norm.name)


def bleu_key(runs: Sequence[Run]) -> str:
    """``test/bleu`` when the runs report it, else ``val/bleu``."""
    for key in BLEU_KEYS:
        if any(key in r.summary or key in r.metric_keys() for r in runs):
            return key
    return BLEU_KEYS[0]


@measure("bleu")
def bleu(run: Run) -> float:
    """The run's final BLEU: ``test/bleu`` when it reports it, else ``val/bleu``."""
    return run.final(bleu_key([run]))


@measure("throughput")
def throughput(run: Run) -> float:
    """Median over epochs of the run's training tokens per second."""
    return median_over_steps(run.series(TOKENS_PER_S)[1])


def _groups(runs: Sequence[Run], norms: Sequence[str], by: Callable[[Run], str]) -> dict[str, list[Run]]:
    """The runs by ``by``'s value, in ``norms``' order then the rest, named as the papers name them
    (`figure_names.arm_name`: ``pn_v`` → ``PN-V``, ``rms (eager)`` → ``RMSNorm (eager)``)."""
    out = {n: sorted((r for r in runs if by(r) == n), key=lambda r: r.seed) for n in norms}
    extra = sorted({by(r) for r in runs} - set(norms))
    out.update({n: sorted((r for r in runs if by(r) == n), key=lambda r: r.seed) for n in extra})
    return {arm_name(n): g for n, g in out.items() if g}


TITLES = {
    "powernorm_mt": "Shen et al. 2020, Table: encoder norm in the Transformer (decoder LN)",
    "powernorm_chain": "Shen et al. 2020, Table 1: BN → PN-V → PN in the Transformer encoder, beside LN (decoder LN)",
    "rmsnorm_speed": "Zhang & Sennrich 2019: LayerNorm vs RMSNorm in the Transformer (eager: o; compiled: s)",
    "ln_axes": "Which axes LayerNorm normalizes over in a Transformer encoder (decoder LN)",
    "prms_width": "Zhang & Sennrich 2019: partial RMSNorm (p = 6.25 %) at model width 512, beside RMSNorm and LN",
}
"""The translation figures drawn by `normbench.analysis.figures.norm_figure`, by file stem: their titles."""


def _colors(groups: dict[str, list[Run]]) -> dict[str, str]:
    """Each group's norm's colour: ``RMSNorm (eager)`` takes RMSNorm's."""
    return {n: color_of(n) for n in groups}


def _point_rows(rows: list[dict[str, Any]], panel: str, groups: dict[str, list[Run]], value: Callable[[Run], float]
                ) -> None:  # fmt: skip
    """Per group, one row of the median over its runs of ``value`` (x: the group's place), and one
    ``<panel>/seeds`` row per run (``n`` = 1: each seed's dot)."""
    for i, (n, g) in enumerate(groups.items()):
        add_point_rows(rows, panel, n, float(i), [value(r) for r in g])
        for r in g:
            add_point_rows(rows, f"{panel}/seeds", n, float(i), [value(r)])


def _loss_rows(rows: list[dict[str, Any]], groups: dict[str, list[Run]]) -> None:
    """Validation loss by step when the runs evaluated more than once, else the training loss (running
    mean of 9 logged batch losses) by step, one series per group."""
    evaluated = any(len(r.series(VAL_LOSS)[0]) > 1 for g in groups.values() for r in g)
    for norm, group in groups.items():
        if evaluated:
            series = [r.series(VAL_LOSS) for r in group if len(r.series(VAL_LOSS)[0])]
        else:
            series = [c for c in (smoothed_loss(r, 9, on_time=False) for r in group) if len(c[0])]
        if series:
            seed_curve(None, rows, "val_loss" if evaluated else "train_loss", norm, series)


def _norm_figure(runs: Sequence[Run], groups: dict[str, list[Run]], name: str, title: str, with_speed: bool
                 ) -> FigureResult:  # fmt: skip
    """Loss by step, the final validation loss (when it was evaluated once), BLEU, and
    (``with_speed``) training throughput, per group: the rows first, then drawn from them
    (`normbench.analysis.figures.norm_figure`, as a redraw from the committed CSV draws them)."""
    members = [r for g in groups.values() for r in g]
    rows: list[dict[str, Any]] = []
    _loss_rows(rows, groups)
    if not any(len(r.series(VAL_LOSS)[0]) > 1 for r in members):
        _point_rows(rows, "val_loss", groups, lambda r: r.final(VAL_LOSS))
    key = bleu_key(runs)
    _point_rows(rows, "bleu", groups, lambda r: r.final(key))
    if with_speed:
        _point_rows(rows, "tokens_per_s", groups, throughput)
    return draw_norm_figure(NormFigure(name, title, key), rows, members)


def chain_norm(run: Run) -> str:
    """The encoder norm, with PowerNorm's chain step: ``pn_v`` for PN with ``forward_stats=batch``."""
    norm = run.stack_norm("encoder")
    return "pn_v" if norm.name == "pn" and norm.forward_stats == "batch" else str(norm.name)


def powernorm_chain(runs: Sequence[Run]) -> list[FigureResult]:
    groups = _groups(runs, ("bn", "pn_v", "pn", "ln"), chain_norm)
    return [_norm_figure(runs, groups, "powernorm_chain", TITLES["powernorm_chain"], False)]


def padding_arm(run: Run) -> str:
    """``bn masked`` / ``bn padded`` / ``ln``, then ``(bucketed)`` or ``(mixed)`` (the bn_padding arms)."""
    norm = run.stack_norm("encoder")
    counted = " padded" if norm.name == "bn" and norm.count_padding else ""
    masked = " masked" if norm.name == "bn" and not counted else ""
    return f"{norm.name}{counted}{masked} ({'bucketed' if run.record.dataset.bucket_by_length else 'mixed'})"


VAR_DIST = "bn_stats/first_layer/var_dist"
TOKEN_SCALE = "token_scale/first_layer/scale"
PADDING_SHARE = "token_scale/padding_share"
PADDING_COLORS = {"BN masked": NORM_COLORS["bn"], "BN padded": "tab:purple", "LN": NORM_COLORS["ln"]}


def bn_padding(runs: Sequence[Run]) -> list[FigureResult]:
    """Masked BN, BN counting the padding and LN, bucketed (solid) or mixed (dashed). Top: by step,
    the first BN layer's distance between batch and running variance (a claim's quantity), the
    first norm's per-token scale of real tokens before its affine (a claim's quantity; LN's is 1),
    the batches' padding share. Bottom: the per-token scale in the batches' short and long halves
    of sentences (median over steps, per run), the final validation loss and BLEU per arm."""
    order = [f"{n} ({b})" for b in ("bucketed", "mixed") for n in ("bn masked", "bn padded", "ln")]
    groups = _groups(runs, order, padding_arm)
    colors = {a: PADDING_COLORS.get(a.rsplit(" (", 1)[0], "dimgray") for a in groups}
    title = "BatchNorm over padded batches: masked vs padding counted, length-bucketed vs mixed (decoder LN)"
    fig, axes = new_figure(2, 3, titled(title, [r for g in groups.values() for r in g]), size=(15.5, 8.4))
    res = FigureResult("bn_padding", fig)
    bn = {a: g for a, g in groups.items() if a.startswith("BN")}
    point_panel(axes[0, 0], res.rows, "var_dist", {a: [r.final(VAR_DIST) for r in g] for a, g in bn.items()}, colors)
    finish_axes(axes[0, 0], "arm", "(σ²_B − σ²)/σ², RMS over channels, at the end",
                "first BN layer: batch vs running variance at the end (median, min–max, each seed)", legend=False)
    for arm, group in groups.items():
        series = [r.series(TOKEN_SCALE) for r in group if len(r.series(TOKEN_SCALE)[0])]
        if series:
            style = "--" if arm.endswith("(mixed)") else "-"
            seed_curve(axes[0, 1], res.rows, "token_scale", arm, series, color=colors[arm], linestyle=style)
    finish_axes(axes[0, 1], "steps", "RMS over channels of x̂, each channel\nin units of its own RMS (real tokens)",
                "first norm: real tokens' scale")
    _padding_share_panel(axes[0, 2], res, groups)
    _halves_panel(axes[1, 0], res, groups, colors)
    key = bleu_key(runs)
    _point_rows(res.rows, "val_loss", groups, lambda r: r.final(VAL_LOSS))
    _point_rows(res.rows, "bleu", groups, lambda r: r.final(key))
    end_points(axes[1, 1], res.rows, "val_loss", "validation loss", "validation loss at the end: median, min–max")
    end_points(axes[1, 2], res.rows, "bleu", metric_name(key), f"{metric_name(key)} at the end: median, min–max")
    return [res]


def _padding_share_panel(ax: Axes, res: FigureResult, groups: dict[str, list[Run]]) -> None:
    """The batches' padding share by step, one curve per batching (every arm of a batching sees the
    same batches: the first arm that logged it stands for them)."""
    for batching, style in (("bucketed", "-"), ("mixed", "--")):
        for arm, group in groups.items():
            if not arm.endswith(f"({batching})"):
                continue
            series = [r.series(PADDING_SHARE) for r in group if len(r.series(PADDING_SHARE)[0])]
            if series:
                seed_curve(ax, res.rows, "padding_share", f"{batching} batches", series, color="black", linestyle=style)
                break
    finish_axes(ax, "steps", "padded positions / all", "padding share of the batch")


def _halves_panel(ax: Axes, res: FigureResult, groups: dict[str, list[Run]], colors: dict[str, str]) -> None:
    """Per arm, the per-token scale in the batches' shorter (open) and longer (filled) halves of
    sentences: each run's median over the logged steps; the median over seeds, min–max bars."""
    names = []
    for arm, group in groups.items():
        x = len(names)
        names.append(arm)
        for half, dx, face in (("short", -0.15, "white"), ("long", 0.15, colors[arm])):
            vals = [median_over_steps(r.series(f"{TOKEN_SCALE}_{half}")[1]) for r in group]
            add_point_rows(res.rows, "token_scale_halves", f"{arm}: {half}", x + dx, vals)
            row = res.rows[-1]
            if row["n"]:
                err = [[row["median"] - row["lo"]], [row["hi"] - row["median"]]]
                ax.errorbar(x + dx, row["median"], yerr=err, fmt="o", color=colors[arm], mfc=face, capsize=3)
    for half, face in (("shorter", "white"), ("longer", "black")):  # the key in black: the colours are the arms'
        ax.plot([], [], "o", color="black", mfc=face, label=f"{half} half of the batch's sentences")
    ax.set_xticks(range(len(names)), [textwrap.fill(n, 12) for n in names], fontsize=8)
    finish_axes(
        ax,
        "arm (open: shorter half of the batch's sentences; filled: longer)",
        "real tokens' scale",
        "short vs long sentences",
    )


def powernorm_mt(runs: Sequence[Run]) -> list[FigureResult]:
    groups = _groups(runs, ("ln", "bn", "pn"), encoder_norm)
    return [_norm_figure(runs, groups, "powernorm_mt", TITLES["powernorm_mt"], False)]


def compiled(run: Run) -> bool:
    return run.record.hardware.compile


def _rms_groups(runs: Sequence[Run]) -> dict[str, list[Run]]:
    """ln / rms / prms runs grouped by norm and mode: ``rms (eager)``, ``rms (compiled)``, ..."""
    mode = {False: "eager", True: "compiled"}
    names = [f"{n} ({m})" for m in mode.values() for n in ("ln", "rms", "prms")]
    return _groups(runs, names, lambda r: f"{run_norm(r)} ({mode[compiled(r)]})")


def rmsnorm_speed(runs: Sequence[Run]) -> list[FigureResult]:
    """LN / RMSNorm / partial RMSNorm: quality at equal steps, and whole-model training tokens/s
    eager and compiled (torch's fused F.layer_norm vs F.rms_norm in eager mode; inductor's code
    compiled). The layer-level numbers are `scripts/bench_norms.py`'s."""
    groups = _rms_groups(runs)
    out = [_norm_figure(runs, groups, "rmsnorm_speed", TITLES["rmsnorm_speed"], True)]
    if has_clock(runs):  # runs made before the training clock was logged have no time axis
        out += rmsnorm_time(runs)
    return out


def rmsnorm_time(runs: Sequence[Run]) -> list[FigureResult]:
    """LN / RMSNorm / partial RMSNorm on the training clock and on steps, from the same runs."""
    groups = _rms_groups(runs)
    colors = _colors(groups)
    title = "Zhang & Sennrich 2019: loss at equal steps and at equal training time"
    return [time_figure(groups, colors, "rmsnorm_time", title)]


def ln_axes(runs: Sequence[Run]) -> list[FigureResult]:
    groups = _groups(runs, ("ln", "ln_sample", "in"), encoder_norm)
    return [_norm_figure(runs, groups, "ln_axes", TITLES["ln_axes"], False)]


def prms_width(runs: Sequence[Run]) -> list[FigureResult]:
    """LN / RMSNorm / partial RMSNorm at the paper's width: the smoothed training loss (running mean
    of 9 logged batch losses) by step, and the final validation loss and BLEU per norm (the claims)."""
    groups = _groups(runs, ("ln", "rms", "prms"), run_norm)
    rows: list[dict[str, Any]] = []
    for norm, group in groups.items():
        series = [c for c in (smoothed_loss(r, 9, on_time=False) for r in group) if len(c[0])]
        if series:
            seed_curve(None, rows, "train_loss", norm, series)
    _point_rows(rows, "val_loss", groups, lambda r: r.final(VAL_LOSS))
    key = bleu_key(runs)
    _point_rows(rows, "bleu", groups, lambda r: r.final(key))
    figure = NormFigure("prms_width", TITLES["prms_width"], key)
    return [draw_norm_figure(figure, rows, [r for g in groups.values() for r in g])]


def _redraw(name: str) -> Callable[[Path, Sequence[Any]], list[FigureResult]]:
    """The translation figure ``name`` redrawn from a results folder's ``<name>.csv`` (BLEU: the
    key the ``per_run.csv`` holds values of)."""

    def redraw(folder: Path, runs: Sequence[Any]) -> list[FigureResult]:
        key = next((k for k in BLEU_KEYS if any(r.get(f"final:{k}") is not None for r in runs)), BLEU_KEYS[0])
        return [draw_norm_figure(NormFigure(name, TITLES[name], key), read_rows(folder / f"{name}.csv"), runs)]

    return redraw


for _name in TITLES:
    register_redraw(_name, _redraw(_name))
