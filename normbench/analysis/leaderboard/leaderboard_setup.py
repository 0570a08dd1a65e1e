"""The leaderboard's "What ran" section, written from the runs' own configs (never by hand): per
model and data set the batch, optimizer, learning-rate schedule (a step schedule's drops with the
steps where they fell), length, the norms with their seeds, and the step schedules of the norms
that have one (PowerNorm's warm-up, Batch Renorm's ramps) as the runner planned them for that
length (`normbench.norms.schedule`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

from normbench.analysis.leaderboard.leaderboard import TRANSLATION, cell_of, norm_of, task_of
from normbench.analysis.loading.runs import Run


def _g(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _values(runs: Sequence[Run], describe: Callable[[Run], str]) -> str:
    """The distinct descriptions of ``runs`` in order, joined (one when the cell is uniform)."""
    return " / ".join(dict.fromkeys(describe(r) for r in runs))


def steps_of_run(run: Run) -> int:
    """The run's planned training steps: ``max_steps`` when set, else the steps it reached."""
    return run.record.max_steps or run.final_step


def optimizer_text(run: Run) -> str:
    """The optimizer as it ran (`normbench.optim.OptimizerConfig`; a key the record lacks has its
    schema's default: SGD's momentum 0.9)."""
    record = run.record
    opt = record.optimizer
    text = f"{opt.name.upper() if opt.name == 'sgd' else opt.name.capitalize()} lr {_g(record.lr)}"
    if opt.name == "sgd":
        text += f", momentum {_g(opt.momentum)}" + (" (Nesterov)" if opt.nesterov else "")
    else:
        text += f", betas ({', '.join(_g(b) for b in opt.betas)})"
    return text + f", weight decay {_g(record.weight_decay)}"


def schedule_text(run: Run) -> str:
    """The lr schedule as `normbench.optim.lr_factor` runs it, with the steps of a step schedule's
    drops (the first 0-based step at or past each milestone fraction)."""
    sched, total = run.record.schedule, steps_of_run(run)
    if sched.name == "step":
        where = ", ".join(f"{m * 100:g} %" for m in sched.milestones)
        at = ", ".join(str(math.ceil(m * total)) for m in sched.milestones)
        text = f"step: lr × {_g(sched.gamma)} at {where} of the steps (steps {at})"
    elif sched.name == "cosine":
        text = f"cosine to {_g(sched.min_lr_ratio)} × lr"
    elif sched.name == "inverse_sqrt":
        text = "inverse square root"
    else:
        text = sched.name
    return text + (f", {sched.warmup_steps} warm-up steps" if sched.warmup_steps else "")


def length_text(run: Run) -> str:
    total, record = steps_of_run(run), run.record
    if record.max_steps:
        return f"{total} steps"
    return f"{record.epochs} epoch{'s' if record.epochs != 1 else ''} = {total} steps"


def data_text(run: Run) -> str:
    """The batch and what limits the data (the model and data set name the cell)."""
    record = run.record
    keys = dataclasses.asdict(record.dataset)  # each data set's dataclass has its own keys
    if task_of(run) == TRANSLATION:
        parts = [f"{keys['max_tokens']} tokens a batch"] if keys.get("max_tokens") else []
    else:
        parts = [f"batch {record.batch_size}"]
    if keys.get("train_limit"):
        parts.append(f"the first {keys['train_limit']} training images")
    if keys.get("augment") is False:
        parts.append("no augmentation")
    return ", ".join(parts)


def planned_norm_schedule(norm: Any, total_steps: int) -> dict[str, int | None]:
    """The step schedule a norm with `plan_schedule` runs for ``total_steps`` steps (a fresh
    instance of the typed norm config ``norm``, planned as the runner plans it); {} for a norm
    without one."""
    from normbench.norms import norm_factory
    from normbench.norms.registry import NORMS

    if not hasattr(NORMS.get(norm.name), "plan_schedule"):
        return {}
    layer = norm_factory(norm)(64, "NCHW")
    layer.plan_schedule(total_steps)
    return dict(layer.planned_steps())


def norms_text(runs: Sequence[Run]) -> str:
    """Row labels grouped by their seeds: ``bn, gn × seeds 0, 1, 2``."""
    seeds: dict[str, set[int]] = {}
    for r in runs:
        seeds.setdefault(norm_of(r), set()).add(r.seed)
    groups: dict[tuple[int, ...], list[str]] = {}
    for norm, s in seeds.items():
        groups.setdefault(tuple(sorted(s)), []).append(norm)
    return "; ".join(f"{', '.join(n)} × seeds {', '.join(map(str, s))}" for s, n in groups.items())


def norm_schedules_text(runs: Sequence[Run]) -> str:
    """The planned schedules of the norms that have one, e.g. ``pn: warmup_iters 23``."""
    out = {}
    for r in runs:
        planned = planned_norm_schedule(r.stack_norm("encoder"), steps_of_run(r))
        if planned:
            out[norm_of(r)] = ", ".join(f"{k} {v}" for k, v in planned.items())
    return "; ".join(f"{n}: {t}" for n, t in out.items()) or "none"


def what_ran(runs: Sequence[Run]) -> list[str]:
    """The "What ran" section of ``leaderboard.md``: one table row per model and data set."""
    cells: dict[tuple[str, str], list[Run]] = {}
    for r in runs:
        if r.config:
            cells.setdefault(cell_of(r), []).append(r)
    lines = [
        "## What ran",
        "",
        "| cell | data | optimizer | lr schedule | length | norms × seeds | norm step schedules (as planned) |",
        "|---|---|---|---|---|---|---|",
    ]
    for (model, dataset), members in cells.items():
        finished = [r for r in members if r.status == "finished"] or members  # lengths as planned, not as cut short
        values = [
            f"{model} on {dataset}",
            _values(finished, data_text),
            _values(finished, optimizer_text),
            _values(finished, schedule_text),
            _values(finished, length_text),
            norms_text(members),
            norm_schedules_text(finished),
        ]
        lines.append("| " + " | ".join(v.replace("|", "/") for v in values) + " |")
    return lines
