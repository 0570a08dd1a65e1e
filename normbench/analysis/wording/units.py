"""The unit every claim's measure is read in, for the people who read the results.

A measure is stored in its own units (an accuracy as a fraction in [0, 1], an error already in
percent, BLEU, cross-entropy in nats, log10 of a learning rate). A person reads a claim in the
paper's units: a difference of accuracies in percentage points, of BLEU in BLEU, of losses in
nats, of log10 lr in decades, and a ratio (test ``welch_log``) as a multiple, "0.44×". `UNITS`
declares, per measure (its name, or its name and the logged key it reads), what it is called on an
axis, the factor from the stored value to the natural unit, and the unit of a level and of a
difference. A measure without an entry is an error (`unit_of`): a new measure declares its unit
here, and the test over every rules file fails until it does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Unit:
    """How a measure reads: ``title`` (an axis title: what is measured, never a metric key),
    ``scale`` (stored value × scale = the natural unit), ``level`` (the suffix of one arm's value:
    " %", " BLEU") and ``diff`` (the suffix of a difference: " pts", " BLEU", " nats")."""

    title: str
    scale: float = 1.0
    level: str = ""
    diff: str = ""
    axis: str = ""
    """The forest panel's axis title where measures of different titles share one unit."""

    @property
    def panel(self) -> str:
        """The name of the forest panel a difference in this unit goes to (one unit per panel)."""
        if self.axis:
            return self.axis
        return {
            " pts": "difference in percentage points",
            " BLEU": "difference in BLEU",
            " nats": "difference in loss (nats)",
            " decades": "difference in decades of learning rate (1 = 10×)",
        }.get(self.diff, f"difference in {self.title}")


def _points(title: str) -> Unit:
    """A fraction in [0, 1] read in percent, its differences in percentage points."""
    return Unit(title, 100.0, " %", " pts")


BLEU = Unit("BLEU", 1.0, " BLEU", " BLEU")
TOKENS = "difference in token scale (unitless)"

UNITS: dict[tuple[str, str | None], Unit] = {
    ("final", "val/acc"): _points("validation accuracy"),
    ("final", "val/acc_population"): _points("validation accuracy"),
    ("final", "train_eval/acc"): _points("training accuracy (eval mode)"),
    ("logged_at_fraction", "val/acc"): _points("validation accuracy"),
    ("logged_at_fraction", "val/acc_population"): _points("validation accuracy"),
    ("final_difference", "val/acc_population"): _points("validation accuracy"),
    ("final_error", "val/acc"): _points("validation error"),
    ("final_acc", None): _points("validation accuracy"),
    ("final_train_acc", None): _points("training accuracy"),
    ("final_train_error", None): _points("training error"),
    ("final_test_acc", None): _points("test accuracy"),
    ("train_test_gap", None): _points("train-test accuracy gap"),
    ("train_eval_error", None): _points("training error (eval mode)"),
    ("best_over_lr", None): _points("validation accuracy at the best lr"),
    ("saturated_fraction", None): _points("saturated pre-activations"),
    ("error", None): Unit("validation error", 1.0, " %", " pts"),  # stored in percent already
    ("bleu", None): BLEU,
    ("final", "test/bleu"): BLEU,
    ("final", "val/bleu"): BLEU,
    ("final", "val/loss"): Unit("validation loss", 1.0, " nats", " nats"),
    ("final", "train/loss"): Unit("training loss", 1.0, " nats", " nats"),
    ("loss_at_equal_time", None): Unit("training loss at equal time", 1.0, " nats", " nats"),
    ("loss_at_equal_steps", None): Unit("training loss at equal steps", 1.0, " nats", " nats"),
    ("remaining_loss", None): Unit("remaining training loss (last / first)"),
    ("largest_trained_lr", None): Unit("largest lr that trained (log10)", 1.0, "", " decades"),
    ("median_logged_gap", "token_scale/first_layer/scale_short"): Unit("token scale gap, short − long", axis=TOKENS),
    ("median_logged", "token_scale/first_layer/scale_short"): Unit("token scale, short sentences", axis=TOKENS),
    ("median_logged", "token_scale/first_layer/scale_long"): Unit("token scale, long sentences", axis=TOKENS),
    ("inverse_median_logged", "token_scale/first_layer/scale"): Unit("1 / token scale"),
    ("inverse_median_logged", "token_scale/first_layer/scale_abs"): Unit("1 / absolute token scale"),
    ("median_logged", "token_scale/first_layer/scale"): Unit("token scale"),
    ("median_logged", "bn_stats/first_layer/mean_dist"): Unit("distance of batch means from running means"),
    ("median_logged", "bn_stats/first_layer/var_dist"): Unit("distance of batch variances from running variances"),
    ("median_logged", "bn_stats/first_layer/var_input_grad"): Unit("gradient through the batch variance"),
    ("median_logged", "bn_stats/first_layer/var_input_grad_cv"): Unit("variation of that gradient (CV)"),
    ("final", "eval_stats/first_layer/var_dist"): Unit("distance of the two variance estimates"),
    ("activation_shift", None): Unit("activation shift"),
    ("grad_norm_ratio", None): Unit("gradient norm, first layer / last"),
    ("ics_window_median", "rel_grad_diff"): Unit("internal covariate shift (relative gradient change)"),
    ("key_window_median", "beta_smoothness/beta"): Unit("β-smoothness"),
    ("key_window_median", "predictiveness/grad_diff_max"): Unit("gradient predictiveness (largest change)"),
    ("loss_range_window_median", None): Unit("loss range along the gradient"),
    ("throughput", None): Unit("throughput (tokens per second)", 1.0, " tokens per s", " tokens per s"),
}
"""Per (measure name, the key it reads or None): its `Unit`. Fractions read in percent."""

RATIO_TITLE = "ratio (log scale; 1 = no difference)"
"""The axis title of the forest panel of ratios (test ``welch_log``): every ratio shares it."""


def measure_key(spec: Any) -> tuple[str, str | None]:
    """A rule's ``measure`` (a name, or ``{name, key | metric, ...}``) as its `UNITS` key."""
    if isinstance(spec, Mapping):
        return str(spec.get("name")), (None if spec.get("key", spec.get("metric")) is None
                                       else str(spec.get("key", spec.get("metric"))))  # fmt: skip
    return str(spec), None


def unit_of(spec: Any) -> Unit:
    """The `Unit` of a measure (see `measure_key`); ``KeyError`` naming the measure when it has none."""
    name, key = measure_key(spec)
    for candidate in ((name, key), (name, None)):
        if candidate in UNITS:
            return UNITS[candidate]
    known = ", ".join(sorted({n for n, _ in UNITS}))
    raise KeyError(
        f"measure {name!r} (key {key!r}) has no unit in normbench.analysis.wording.units.UNITS; known: {known}"
    )


def rule_unit(measure: str, params: Mapping[str, Any]) -> Unit:
    """The unit of a claim rule's measure (its name and parameters, as `ClaimRule` holds them)."""
    return unit_of({"name": measure, **params})
