"""The measures that rules name (a function of one run, registered by name with `measure`) and the
per-run series that figures draw (`normbench.analysis.judging.figure_schema.series`), for every preset whose
figures are data; the presets whose figures are code keep theirs beside them (santurkar,
transformer, train_clock)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np

from normbench.analysis.judging.claims import measure
from normbench.analysis.judging.figure_schema import series
from normbench.analysis.judging.per_run import RANGES
from normbench.analysis.judging.stats import median_over_steps
from normbench.analysis.loading.runs import Run, experiment_key


@measure("final")
def final(run: Run, key: str) -> float:
    """The run's final value of ``key`` (its summary's, else the last logged one)."""
    return run.final(key)


@measure("median_logged")
def median_logged(run: Run, key: str) -> float:
    """The median of every finite value of ``key`` the run logged (e.g. over epochs)."""
    return median_over_steps(run.series(key)[1])


@measure("logged_at_fraction")
def logged_at_fraction(run: Run, key: str, fraction: float) -> float:
    """The value of ``key`` logged at the first step at or after ``fraction`` × the run's last step
    (0.25: the first evaluation a quarter into training); NaN where none was logged there."""
    steps, values = run.series(key)
    target = fraction * run.final_step
    later = [v for s, v in zip(steps, values, strict=True) if s >= target - 1e-9]
    return float(later[0]) if later else math.nan


@measure("final_error", within=(0.0, 1.0))
def final_error(run: Run, key: str) -> float:
    """One minus the run's final ``key`` (an accuracy in [0, 1] → an error): setup checks bound it
    from above ("the positive control reaches an accuracy of at least 1 − bound")."""
    return 1.0 - run.final(key)


@measure("median_logged_gap")
def median_logged_gap(run: Run, key: str, minus: str) -> float:
    """`median_logged` of ``key`` minus that of ``minus`` in the same run (e.g. short sentences'
    token scale minus long ones')."""
    return median_logged(run, key) - median_logged(run, minus)


@measure("inverse_median_logged")
def inverse_median_logged(run: Run, key: str) -> float:
    """1 / `median_logged` of ``key``: a check that a value is above 1/bound, with ``below``."""
    return 1.0 / median_logged(run, key)


@measure("final_difference")
def final_difference(run: Run, key: str, minus: str) -> float:
    """The run's final ``key`` minus its final ``minus`` (bn_eval_stats: the population estimate's
    accuracy minus the EMA's, on the same weights)."""
    return run.final(key) - run.final(minus)


# bn_dropout (Ioffe & Szegedy 2015, §4.2.1): the train–test gap
VAL_ACC, TRAIN_EVAL_ACC, TRAIN_LOSS = "val/acc", "train_eval/acc", "train/loss"


@measure("train_test_gap", within=(-1.0, 1.0))
def train_test_gap(run: Run) -> float:
    """Final training accuracy in eval mode (``train_eval/acc``: neither dropout nor augmentation
    lowers it) minus final validation accuracy (a diverged run counts with the measure's worst
    value in the claims, as every measure)."""
    return run.final(TRAIN_EVAL_ACC) - run.final(VAL_ACC)


@measure("train_eval_error", within=(0.0, 1.0))
def train_eval_error(run: Run) -> float:
    """One minus the final training accuracy in eval mode: the share of its own training images the
    run still gets wrong (bn_dropout's setup check: a small gap from an arm that has not fitted its
    training images is underfitting, not regularization)."""
    return 1.0 - run.final(TRAIN_EVAL_ACC)


# bn_saturation: saturated pre-activations and gradient norms per layer (the saturation diagnostic)
SATURATED = re.compile(r"^saturation/(.+)/saturated$")
GRAD_NORM = re.compile(r"^saturation/(.+)/grad_norm$")


def layer_keys(run: Run, pattern: re.Pattern[str]) -> list[str]:
    """The run's per-layer keys matching ``pattern``, in the order the diagnostic logged them (the model's)."""
    ordered = dict.fromkeys(k for row in run.history for k in row)  # first-logged order: the model's
    return [k for k in ordered if pattern.match(k) and k.split("/")[1] not in ("first_layer", "layer_mean")]


@series("saturated_layer_mean")
def layer_mean_series(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """(steps, mean over norm positions of the saturated fraction) at each diagnostic call: from
    the per-layer keys of a local run, or the ``layer_mean`` headline W&B computed from them."""
    headline = run.series("saturation/layer_mean/saturated")
    if len(headline[0]):
        return headline
    found = [run.series(k) for k in layer_keys(run, SATURATED)]
    if not found:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    steps = found[0][0]
    return steps, np.mean(np.stack([v for _, v in found if len(v) == len(steps)]), axis=0)


def weight_layer_keys(run: Run) -> list[str]:
    """The run's ``saturation/<layer>/grad_norm`` keys of the model's own layers (convs and linears),
    in model order: a norm's γ/β (a run logged before issue 56 kept them under ``grad_norm`` too; the
    norms are the layers its ``saturated`` keys name) are no layer, so layer k is the k-th conv or
    linear in every arm, with BN or without."""
    norms = {SATURATED.match(k).group(1) for k in layer_keys(run, SATURATED)}  # type: ignore[union-attr]
    return [k for k in layer_keys(run, GRAD_NORM) if GRAD_NORM.match(k).group(1) not in norms]  # type: ignore[union-attr]


@series("grad_norm_by_depth")
def grad_norm_by_depth(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """(layer index in model order: the k-th conv/linear, `weight_layer_keys`; the last call's
    gradient norm of that layer)."""
    values = [v[-1] for v in (run.series(k)[1] for k in weight_layer_keys(run)) if len(v)]
    return np.arange(len(values), dtype=np.float64), np.asarray(values)


@measure("saturated_fraction", within=(0.0, 1.0))
def saturated_fraction(run: Run) -> float:
    """Median over the diagnostic's calls of the mean over norm positions of the saturated fraction."""
    return median_over_steps(layer_mean_series(run)[1])


@measure("grad_norm_ratio", within=(0.0, math.inf))
def grad_norm_ratio(run: Run, first: str, last: str) -> float:
    """Median over the diagnostic's calls of ‖∂L/∂θ_first‖ / ‖∂L/∂θ_last‖ (per-layer keys: a local
    run's ``metrics.jsonl``; W&B keeps them in its ``saturation/layers`` tables, not as scalars)."""
    (s1, a), (s2, b) = run.series(f"saturation/{first}/grad_norm"), run.series(f"saturation/{last}/grad_norm")
    if len(a) == 0 or len(a) != len(b) or not np.array_equal(s1, s2):
        return float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        return median_over_steps(a / b)


# bn_lr_range: a run's learning-rate grid (Ioffe & Szegedy 2015; Santurkar et al. 2018, Fig. 1)
@measure("final_acc", within=(0.0, 1.0))
def final_acc(run: Run) -> float:
    """The final validation accuracy; 0 for a diverged run (it never finished)."""
    return 0.0 if run.status == "diverged" else run.final(VAL_ACC)


def lr_grid(run: Run, all_runs: Sequence[Run]) -> list[Run]:
    """The runs of ``all_runs`` of ``run``'s seed whose config differs from ``run``'s in ``lr`` alone
    (``run`` among them), by increasing lr: one seed's learning-rate grid of one setting."""

    def setting(r: Run) -> dict:
        return {k: v for k, v in experiment_key(r).items() if k != "lr"}

    mine = [r for r in all_runs if r.seed == run.seed and setting(r) == setting(run)]
    return sorted(mine or [run], key=lambda r: float(r.get("lr")))


@measure("best_over_lr", within=(0.0, 1.0))
def best_over_lr(run: Run, all_runs: Sequence[Run]) -> float:
    """The best final validation accuracy over ``run``'s learning-rate grid (`lr_grid`; a diverged
    run counts 0): the accuracy at the best lr, as Ioffe & Szegedy 2015 compare BN-x30 with
    Inception at its own best rate (Table 2 / Fig. 2)."""
    return max(final_acc(r) for r in lr_grid(run, all_runs))


@measure("largest_trained_lr")
def largest_trained_lr(run: Run, all_runs: Sequence[Run], trained_above: float) -> float:
    """log10 of the largest lr of ``run``'s grid (`lr_grid`) at which it trained: finished (not
    diverged) with a final validation accuracy above ``trained_above``; one decade below the grid's
    lowest lr when it trained at none (the grid cannot say how low). In decades, so a difference of
    0.7 is a 5x larger rate (Santurkar et al. 2018, Fig. 1: lr 0.5 against 0.1)."""
    grid = lr_grid(run, all_runs)
    trained = [float(r.get("lr")) for r in grid if r.status != "diverged" and final_acc(r) > trained_above]
    return math.log10(max(trained)) if trained else math.log10(float(grid[0].get("lr"))) - 1.0


# gn_batch_size / gn_groups (Wu & He 2018): validation error, and whether the runs are long enough
@measure("error", within=(0.0, 100.0))
def error(run: Run) -> float:
    """Final validation error in percent (a diverged run: 100 %)."""
    return 100.0 if run.status == "diverged" else 100.0 * (1.0 - run.final(VAL_ACC))


@measure("remaining_loss", within=(0.0, math.inf))
def remaining_loss(run: Run) -> float:
    """The last epoch-mean training loss over the first: the most that any longer run could still
    gain, as a fraction of the start (cross-entropy >= 0). The check "long enough" (a plateau)
    asks every run's to be below a bound the rules declare; a flat tail alone is not enough, as
    the end of a cosine schedule is flat at any length."""
    _, y = run.series(TRAIN_LOSS)
    return float(y[-1] / y[0]) if len(y) else float("nan")


RANGES.update({"final_train_acc": (0.0, 1.0), "final_train_error": (0.0, 1.0), "final_test_acc": (0.0, 1.0),
               "bleu": (0.0, 100.0)})  # fmt: skip
"""The ranges of measures the code figures register beside them (``santurkar``: accuracies and
errors in [0, 1]; ``transformer``: BLEU in [0, 100])."""
