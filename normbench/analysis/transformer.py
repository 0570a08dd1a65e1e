"""Transformer comparisons of norms on translation, from `powernorm_mt`, `rmsnorm_speed` and
`ln_axes` sweeps: validation loss against steps, BLEU and training throughput per norm.

- `powernorm_mt`: Shen et al. 2020, their IWSLT14 table: encoder norm LN / BN / PN (decoder
  LN); reported BLEU 35.5 (LN), 35.9 (PN), BN well below.
- `powernorm_chain`: the same setup, their chain BN → PN-V → PN beside LN (PN-V: PowerNorm with
  ``forward_stats=batch``, shown as ``pn_v``).
- `rmsnorm_speed`: Zhang & Sennrich 2019: LN / RMSNorm / partial RMSNorm, tokens per second
  and quality at equal steps; `rmsnorm_time`: the same norms' loss at equal training time and at
  equal steps (`normbench.analysis.train_clock`).
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
from typing import TYPE_CHECKING, Any

import numpy as np

from normbench.analysis.claims import measure
from normbench.analysis.figure_names import arm_name, metric_name, titled
from normbench.analysis.plot import (
    NORM_COLORS,
    FigureResult,
    add_point_rows,
    finish_axes,
    new_figure,
    point_panel,
    seed_curve,
)
from normbench.analysis.plot_rows import draw_rows, rows_of
from normbench.analysis.runs import Run
from normbench.analysis.stats import median_over_steps
from normbench.analysis.train_clock import has_clock, smoothed_loss, time_figure

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


NAMED_COLORS = {arm_name(k): v for k, v in NORM_COLORS.items()}
"""The norms' colours by the names the figures give them."""


def _colors(groups: dict[str, list[Run]]) -> dict[str, str]:
    """Each group's norm's colour: ``RMSNorm (eager)`` takes RMSNorm's."""
    return {n: NAMED_COLORS.get(n.split(" (")[0], NAMED_COLORS.get(n.split(" ")[0], "dimgray")) for n in groups}


def _end_points(
    ax: Any,
    res: FigureResult,
    key: str,
    groups: dict[str, list[Run]],
    colors: dict[str, str],
    xlabel: str = "norm",
    markers: dict[str, str] | None = None,
) -> None:
    """A point per group at the median over its runs of their final ``key`` (``val/loss`` or a BLEU
    key), the seeds' min–max as error bars and each seed beside it, on an axis scaled to the
    points (bars from 0 hid the differences); rows under ``bleu`` or ``val_loss``."""
    panel, what = ("val_loss", "validation loss") if key == VAL_LOSS else ("bleu", metric_name(key))
    point_panel(ax, res.rows, panel, {n: [r.final(key) for r in g] for n, g in groups.items()}, colors, markers)
    title = f"{metric_name(key)} at the end"
    finish_axes(ax, xlabel, what, f"{title}: median, seeds' min–max, each seed", legend=False)


def _loss_panel(ax: Any, res: FigureResult, groups: dict[str, list[Run]], colors: dict[str, str],
                styles: dict[str, tuple[str, str]]) -> bool:  # fmt: skip
    """Validation loss by step when the runs evaluated more than once, else the training loss (running
    mean of 9 logged batch losses) by step. Groups whose curves are the same numbers (compiled runs
    compute the eager runs' losses) are drawn once, labelled ``a = b``. Returns whether the
    validation loss was drawn."""
    evaluated = any(len(r.series(VAL_LOSS)[0]) > 1 for g in groups.values() for r in g)
    key, panel = (VAL_LOSS, "val_loss") if evaluated else (TRAIN_LOSS, "train_loss")
    same: dict[bytes, list[str]] = {}
    for norm, group in groups.items():
        if evaluated:
            series = [r.series(VAL_LOSS) for r in group if len(r.series(VAL_LOSS)[0])]
        else:
            series = [c for c in (smoothed_loss(r, 9, on_time=False) for r in group) if len(c[0])]
        if series:
            xs, med, _, _ = seed_curve(None, res.rows, panel, norm, series)
            same.setdefault(np.round(np.stack([xs, med]), 9).tobytes(), []).append(norm)
    for names in same.values():
        linestyle, marker = styles.get(names[0], ("-", "o" if evaluated else ""))
        draw_rows(ax, rows_of(res.rows, panel, names[0]), " = ".join(names), colors[names[0]],
                  fill=len(groups) <= 4, linestyle=linestyle, marker=marker or None)  # six bands hide each other
    if evaluated:
        finish_axes(ax, "steps", "validation loss", "validation loss")
    else:
        finish_axes(ax, "steps", "training loss (running mean of 9 logs)", "training loss (validated once, at the end)")
    return evaluated


def _norm_figure(
    runs: Sequence[Run],
    groups: dict[str, list[Run]],
    name: str,
    title: str,
    with_speed: bool,
    styles: dict[str, tuple[str, str]] | None = None,
) -> FigureResult:
    """Loss by step (`_loss_panel`), the final validation loss (when it was evaluated once), BLEU,
    and (``with_speed``) training throughput, per group. ``styles``: a group's (line style, marker)."""
    styles = styles or {}
    members = [r for g in groups.values() for r in g]
    once = not any(len(r.series(VAL_LOSS)[0]) > 1 for r in members)
    has_curve = not once or any(len(r.series(TRAIN_LOSS)[0]) > 1 for r in members)
    n_cols = int(has_curve) + int(once) + 1 + int(with_speed)
    fig, axes = new_figure(1, n_cols, titled(title, members), size=(4.8 * n_cols, 4.2))
    res = FigureResult(name, fig)
    colors = _colors(groups)
    markers = {n: st[1] for n, st in styles.items() if st[1]}
    panels = iter(axes[0])
    if has_curve:
        _loss_panel(next(panels), res, groups, colors, styles)
    if once:
        _end_points(next(panels), res, VAL_LOSS, groups, colors, markers=markers)
    _end_points(next(panels), res, bleu_key(runs), groups, colors, markers=markers)
    if with_speed:
        ax = next(panels)
        point_panel(ax, res.rows, "tokens_per_s", {n: [throughput(r) for r in g] for n, g in groups.items()}, colors,
                    markers)  # fmt: skip
        finish_axes(ax, "norm", "training tokens / s", "throughput (median over epochs)", legend=False)
    return res


def chain_norm(run: Run) -> str:
    """The encoder norm, with PowerNorm's chain step: ``pn_v`` for PN with ``forward_stats=batch``."""
    norm = run.stack_norm("encoder")
    return "pn_v" if norm.name == "pn" and norm.forward_stats == "batch" else str(norm.name)


def powernorm_chain(runs: Sequence[Run]) -> list[FigureResult]:
    groups = _groups(runs, ("bn", "pn_v", "pn", "ln"), chain_norm)
    title = "Shen et al. 2020, Table 1: BN → PN-V → PN in the Transformer encoder, beside LN (decoder LN)"
    return [_norm_figure(runs, groups, "powernorm_chain", title, False)]


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
    finish_axes(axes[0, 0], "arm", "(1/d)‖σ²_B − σ²‖₂ at the end",
                "first BN layer: batch vs running variance at the end (median, min–max, each seed)", legend=False)
    for arm, group in groups.items():
        series = [r.series(TOKEN_SCALE) for r in group if len(r.series(TOKEN_SCALE)[0])]
        if series:
            style = "--" if arm.endswith("(mixed)") else "-"
            seed_curve(axes[0, 1], res.rows, "token_scale", arm, series, color=colors[arm], linestyle=style)
    finish_axes(axes[0, 1], "steps", "RMS over channels of x̂ (real tokens)", "first norm: real tokens' scale")
    _padding_share_panel(axes[0, 2], res, groups)
    _halves_panel(axes[1, 0], res, groups, colors)
    _end_points(axes[1, 1], res, VAL_LOSS, groups, colors, xlabel="arm")
    _end_points(axes[1, 2], res, bleu_key(runs), groups, colors, xlabel="arm")
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
    title = "Shen et al. 2020, Table: encoder norm in the Transformer (decoder LN)"
    return [_norm_figure(runs, groups, "powernorm_mt", title, False)]


def compiled(run: Run) -> bool:
    return run.record.hardware.compile


MODE_STYLES = {"eager": ("-", "o"), "compiled": ("--", "s")}
"""(line style, marker) of eager and compiled runs."""


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
    title = "Zhang & Sennrich 2019: LayerNorm vs RMSNorm in the Transformer (eager: o; compiled: s)"
    styles = {n: MODE_STYLES["compiled" if n.endswith("(compiled)") else "eager"] for n in groups}  # dashed: compiled
    out = [_norm_figure(runs, groups, "rmsnorm_speed", title, True, styles)]
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
    title = "Which axes LayerNorm normalizes over in a Transformer encoder (decoder LN)"
    return [_norm_figure(runs, groups, "ln_axes", title, False)]


def prms_width(runs: Sequence[Run]) -> list[FigureResult]:
    """LN / RMSNorm / partial RMSNorm at the paper's width: the smoothed training loss (running mean
    of 9 logged batch losses) by step, and the final validation loss and BLEU per norm (the claims)."""
    groups = _groups(runs, ("ln", "rms", "prms"), run_norm)
    colors = _colors(groups)
    title = "Zhang & Sennrich 2019: partial RMSNorm (p = 6.25 %) at model width 512, beside RMSNorm and LN"
    fig, axes = new_figure(1, 3, titled(title, [r for g in groups.values() for r in g]), size=(15.0, 4.2))
    res = FigureResult("prms_width", fig)
    for norm, group in groups.items():
        series = [c for c in (smoothed_loss(r, 9, on_time=False) for r in group) if len(c[0])]
        if series:
            seed_curve(axes[0, 0], res.rows, "train_loss", norm, series, color=colors[norm])
    finish_axes(axes[0, 0], "steps", "training loss (running mean of 9 logs)", "training loss")
    _end_points(axes[0, 1], res, VAL_LOSS, groups, colors)
    _end_points(axes[0, 2], res, bleu_key(runs), groups, colors)
    return [res]
