"""``val_loss``: the validation loss every few steps, between the epoch-end evaluations.

The runner evaluates at epoch ends (`normbench.run.loop.train.evaluate`: the full metrics, BLEU's decoding
included). A curve of the validation loss against steps or against the training clock needs more
points than a short run has epochs (RMSNorm's equal-time claim, Zhang & Sennrich 2019: a run of
two epochs gives two). This probe computes the task's cheap evaluation, `Task.evaluate_loss`
(``val/loss`` with its accuracy or perplexity; no BLEU, no training-image scores), at θ_t before
step t's update, and logs it as ``val_loss/loss``, ``val_loss/acc`` or ``val_loss/ppl``, … .

Eval mode (BatchNorm's running statistics, dropout off), under ``no_grad``, on the uncompiled
model and in float32 whatever the training precision (the epoch-end evaluation runs under the
run's autocast, so in bf16 the two differ by rounding); the running statistics as they are, also
with ``norm.eval_stats=population`` (its exact statistics are recomputed at epoch ends only).
Outside the step timer: the training clock ``perf/train_s`` does not count it. `run_hooks`
restores the model's modes, buffers and RNG streams afterwards, so training is bit-identical with
and without it.
"""

from __future__ import annotations

from typing import Any

import torch

from normbench.base.errors import ConfigError
from normbench.diagnostics.registry import (
    DiagContext,
    DiagnosticHook,
    autocast_off,
    register_diagnostic,
)


def compute(model: torch.nn.Module, evaluate_loss: Any) -> dict[str, float]:
    """``evaluate_loss(model)`` in eval mode under ``no_grad``, its ``val/`` prefix dropped."""
    model.eval()
    with torch.no_grad(), autocast_off(model):
        metrics = evaluate_loss(model)
    return {key.split("/", 1)[1]: float(value) for key, value in metrics.items()}


@register_diagnostic("val_loss")  # only the cadence (CadenceConfig: every, ...)
class ValLossHook(DiagnosticHook):
    def __call__(self, ctx: DiagContext) -> dict[str, Any]:
        evaluate_loss = getattr(ctx.task, "evaluate_loss", None)
        if evaluate_loss is None:
            raise ConfigError(f"diagnostics.val_loss needs a task with evaluate_loss; got {type(ctx.task).__name__}")
        return compute(ctx.model, evaluate_loss)
