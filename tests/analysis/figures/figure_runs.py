"""Small synthetic runs for every preset's figures, shaped like the CPU presets' real runs (one
evaluation at the end where the preset evaluates once, BN statistics once per epoch, ...), built
from the writers the figure tests use. `PRESET_RUNS`: preset → a function writing its runs under a
folder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.analysis.figures.test_bn_claims import PADDING_ARMS, _saturation_rows, _write_dropout_runs, padding_config
from tests.analysis.figures.test_eval_stats import write_sweep as write_eval_stats
from tests.analysis.figures.test_gn_groups import ARMS as GROUP_ARMS
from tests.analysis.figures.test_gn_groups import write_sweep as write_groups
from tests.analysis.figures.test_lp_batch import ACC as LP_ACC
from tests.analysis.figures.test_lp_batch import TOTAL as LP_TOTAL
from tests.analysis.figures.test_lp_batch import _rows as lp_rows
from tests.analysis.figures.test_prms_width import _runs as prms_runs
from tests.analysis.figures.test_train_clock import _runs as clock_runs
from tests.test_figures import SEEDS, TOTAL, _cv_nlp_runs, _mt_runs, _santurkar_rows, write_run


def keep_last(root: Path, key: str) -> None:
    """Every job under ``root`` keeps only its last logged ``key`` (a preset that evaluates once)."""
    for metrics in root.glob("*/metrics.jsonl"):
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        last = max((i for i, r in enumerate(rows) if key in r), default=None)
        rows = [{k: v for k, v in r.items() if k != key or i == last} for i, r in enumerate(rows)]
        metrics.write_text("".join(json.dumps(r) + "\n" for r in rows if set(r) - {"step", "epoch"}))


def santurkar(root: Path) -> None:
    job = 0
    for norm in ("none", "bn", "bn_noisy"):
        for lr in (0.1, 0.5):
            for seed in SEEDS:
                cfg = {"norm": {"name": norm}, "lr": lr, "seed": seed, "model": {"name": "vgg11"}, "max_steps": TOTAL}
                write_run(root, job, cfg, _santurkar_rows(norm, lr, seed), {"step": TOTAL})
                job += 1
    keep_last(root, "val/acc")  # the CPU preset evaluates at the end only


def powernorm_stats(root: Path) -> None:
    _cv_nlp_runs(root, 50, lambda scale, seed, step: {
        "bn_stats/first_layer/mean_dist": scale * (1 + seed) * step,
        "bn_stats/first_layer/var_dist": 2 * scale * (1 + seed),
    })  # fmt: skip


def powernorm_grads(root: Path) -> None:
    _cv_nlp_runs(root, 50, lambda scale, seed, step: {
        "bn_stats/first_layer/var_input_grad": scale * (1 + seed) * step,
        "bn_stats/first_layer/mean_input_grad": scale,
        "bn_stats/first_layer/var_input_grad_cv": 0.3 * (1 + 0.2 * seed),
    })  # fmt: skip


def translation(norms: dict[str, float], key: str, once: bool, **kw) -> Callable[[Path], None]:
    """`_mt_runs` of ``norms``; ``once``: validation loss at the end only and the batch loss every
    10 steps (as the CPU presets log them)."""

    def write(root: Path) -> None:
        _mt_runs(root, norms, key, **kw)
        if once:
            keep_last(root, "val/loss")
            for metrics in root.glob("*/metrics.jsonl"):
                rows = [json.loads(line) for line in metrics.read_text().splitlines()]
                loss = [(s, 8.0 - 0.01 * s + 0.1 * (s % 30 == 0)) for s in range(10, 301, 10)]
                rows += [{"step": s, "train/batch_loss": v} for s, v in loss]
                rows.sort(key=lambda r: r["step"])  # in step order, as the runner logs (the loader checks)
                metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))

    return write


def gn_batch_size(root: Path) -> None:
    job = 0
    for norm in ("bn", "gn", "brn"):
        for bs in (32, 16, 8, 4, 2):
            for seed in SEEDS:
                cfg = {"norm": {"name": norm}, "batch_size": bs, "lr": 0.1 * bs / 32, "seed": seed}
                rows = [{"step": 10 * e, "epoch": e, "train/loss": 2.0 / e + 0.01 * seed} for e in (1, 2, 3)]
                rows.append({"step": 30, "epoch": 3, "val/acc": 0.6 - 0.01 * (32 // bs) + 0.01 * seed})
                write_run(root, job, cfg, rows, {"step": 30})
                job += 1


def bn_saturation(root: Path) -> None:
    job = 0
    for norm, saturated, first in (("none", [0.5, 0.6, 0.7], 1e-4), ("bn", [0.05, 0.1, 0.15], 0.1)):
        for seed in SEEDS:
            grads = {"features.0.linear": first, "features.1.linear": 0.5, "classifier": 1.0}
            rows = _saturation_rows([s + 0.01 * seed for s in saturated], grads, seed)
            write_run(root, job, {"norm": {"name": norm}, "seed": seed}, rows, {})
            job += 1


def bn_lr_range(root: Path) -> None:
    job = 0
    for norm in ("none", "bn", "gn"):
        for lr in (0.1, 0.3, 1.0, 3.0):
            for seed in SEEDS:
                rows = [{"step": 156, "epoch": 4, "val/acc": 0.5 + 0.01 * seed - (0.2 if norm == "none" else 0) * lr}]
                write_run(root, job, {"norm": {"name": norm}, "lr": lr, "seed": seed}, rows, {})
                job += 1


def bn_padding(root: Path) -> None:
    """The CPU preset's shape: 200 steps; BN statistics logged per epoch (bucketed batches: 2 epochs,
    mixed: 1); token scale every 10 steps; validation loss and BLEU at the end."""
    job = 0
    for arm, (norm, _, bucketed) in PADDING_ARMS.items():
        for seed in SEEDS:
            cfg = padding_config(arm, seed)
            scale = (1.3 if arm == "bn_padded_mixed" else 1.0) + 0.01 * seed
            rows = [{"step": s, "token_scale/first_layer/scale": scale, "token_scale/first_layer/scale_abs": scale,
                     "token_scale/first_layer/scale_short": scale
                     + 0.02, "token_scale/first_layer/scale_long": scale - 0.01 * (1 + seed % 3),
                     "token_scale/padding_share": (0.05 if bucketed else 0.5) + 0.01 * (s % 30) / 10}
                    for s in range(0, 200, 10)]  # fmt: skip
            epochs = (100, 200) if bucketed else (200,)
            if norm == "bn":
                rows += [{"step": s, "epoch": e, "bn_stats/first_layer/var_dist": 0.02 - 0.00003 * s + 0.001 * seed}
                         for e, s in enumerate(epochs, 1)]  # fmt: skip
            loss = 4.85 + 0.01 * seed + 0.05 * (arm == "ln_mixed")
            rows.append({"step": 200, "epoch": len(epochs), "val/loss": loss})
            write_run(root, job, cfg, rows, {"test/bleu": 8.0 - 0.5 * seed - 2 * ("padded_mixed" in arm)})
            job += 1


def bn_lp(root: Path) -> None:
    job = 0
    for norm in LP_ACC:
        for seed in SEEDS:
            cfg = {"norm": {"name": norm}, "lr": 0.1, "seed": seed, "model": {"name": "vgg11"}, "max_steps": LP_TOTAL}
            write_run(root, job, cfg, lp_rows(norm, seed), {"step": LP_TOTAL})
            job += 1


def rmsnorm_time(root: Path) -> None:
    """`test_train_clock`'s eager runs, and a compiled copy of each whose clock runs 20 % slower."""
    clock_runs(root)
    jobs = sorted(root.iterdir(), key=lambda p: int(p.name))
    for i, job in enumerate(jobs, start=len(jobs)):
        cfg = yaml.safe_load((job / "config.yaml").read_text())
        rows = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
        rows = [{**r, "perf/train_s": 1.2 * r["perf/train_s"]} for r in rows]
        write_run(root, i, {**cfg, "hardware": {"compile": True}}, rows, {"test/bleu": 20.0})


RMS_SPEED = {"ln": 100.0, "rms": 130.0, "prms": 90.0}
JITTER = 0.002
"""Every logged value of job ``j`` is scaled by ``1 + JITTER * j`` (`jittered`)."""


def jitter(root: Path) -> None:
    """Every job's logged values under ``root`` (not its step or epoch) scaled by ``1 + JITTER * j``:
    the writers give different arms the same made-up curves, which the figure checker would rightly
    call one series hidden under another; real arms never log the very same numbers."""
    for j, metrics in enumerate(sorted(root.glob("*/metrics.jsonl"))):
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        rows = [{k: v * (1 + JITTER * j) if isinstance(v, float) and k not in ("step", "epoch") else v
                 for k, v in r.items()} for r in rows]  # fmt: skip
        metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))


def jittered(write: Callable[[Path], None]) -> Callable[[Path], None]:
    """``write``, then `jitter`."""

    def write_jittered(root: Path) -> None:
        write(root)
        jitter(root)

    return write_jittered


PRESET_RUNS: dict[str, Callable[[Path], None]] = {
    "santurkar_vgg": santurkar,
    "powernorm_stats": powernorm_stats,
    "powernorm_grads": powernorm_grads,
    "powernorm_mt": translation({"ln": 20.0, "bn": 10.0, "pn": 20.5}, "encoder", once=True),
    "powernorm_chain": translation({"bn": 10.0, "pn_v": 19.5, "pn": 30.0, "ln": 20.0}, "encoder", once=True),
    "rmsnorm_speed": translation(
        {"ln": 20.0, "rms": 20.2, "prms": 17.0},
        "norm",
        once=False,
        speed=RMS_SPEED,
        compiled=(False, True),
        bleu_spread=0.1,
    ),  # fmt: skip
    "rmsnorm_time": rmsnorm_time,
    "prms_width": prms_runs,
    "gn_batch_size": gn_batch_size,
    "gn_groups": lambda root: write_groups(root, {arm: 10.0 + i for i, arm in enumerate(GROUP_ARMS)}),
    "bn_eval_stats": lambda root: write_eval_stats(
        root,
        {a: [0.01 * s for s in SEEDS] for a in ("ordinary", "slow_ema", "small_batch")},
        {"ordinary": 0.1, "slow_ema": 0.3, "small_batch": 0.5},
    ),  # fmt: skip
    "bn_dropout": lambda root: _write_dropout_runs(
        root, {"standard": (0.99, 0.5), "standard_dropout": (0.9, 0.55), "bn": (0.99, 0.6), "bn_dropout": (0.95, 0.6)}
    ),
    "bn_saturation": bn_saturation,
    "bn_lr_range": bn_lr_range,
    "bn_padding": bn_padding,
    "bn_lp": bn_lp,
    "ln_axes": translation({"ln": 20.0, "ln_sample": 15.0, "in": 24.0}, "encoder", once=False),
}
"""How to write each preset's synthetic runs where its figures read more than `from_rules` logs
(per-layer diagnostics, throughput, step-by-step curves); the keys: `normbench.analysis.figures.FIGURES`."""
PRESET_RUNS = {preset: jittered(write) for preset, write in PRESET_RUNS.items()}

COMMON_KEYS = ("val/acc", "val/loss", "train/loss", "train/acc", "train_eval/acc", "train_eval/loss", "test/bleu")
"""What every run of a paper preset logs whatever it measures: `from_rules` logs them beside the
keys the rules' measures name (an accuracy in [0, 1]; a loss or BLEU above it)."""
RULES_STEPS = (10, 20, 30, 40, 50)


def nested(select: dict[str, object]) -> dict[str, object]:
    """A rules selector (``{"norm.name": "bn", "lr": 0.1}``) as the nested config a run records."""
    out: dict[str, object] = {}
    for dotted, value in select.items():
        *parents, leaf = dotted.split(".")
        node = out
        for key in parents:
            node = node.setdefault(key, {})  # type: ignore[assignment]
        node[leaf] = value
    return out


def rules_arms(preset: str) -> list[dict[str, object]]:
    """Every distinct selector the preset's rules name: each claim's two arms, each setup check's
    and each learning bound's (their order of appearance)."""
    from normbench.analysis.judging.rules_schema import load_rules

    rules = load_rules(preset)
    found: list[dict[str, object]] = []
    selectors = [arm.select for c in rules.claims for arm in (c.a, c.b)] + [c.select for c in rules.measured_checks]
    for select in selectors:
        if select and select not in found:
            found.append(dict(select))
    return found


def rules_keys(preset: str) -> list[str]:
    """The history keys the rules' measures name (their ``key`` and ``minus`` parameters), then `COMMON_KEYS`."""
    from normbench.analysis.judging.rules_schema import load_rules

    rules = load_rules(preset)
    params = [c.params for c in rules.claims] + [a.params for c in rules.claims for a in (c.a, c.b)]
    params += [c.params for c in rules.measured_checks]
    named = [str(p[k]) for p in params for k in ("key", "minus") if isinstance(p.get(k), str)]
    return list(dict.fromkeys(named + list(COMMON_KEYS)))


def from_rules(preset: str) -> Callable[[Path], None]:
    """Synthetic runs read from the preset's rules alone (issue 58: a new preset needs no writer of
    its own): `SEEDS` runs per selector (`rules_arms`), each recording the selector's config and
    logging every key of `rules_keys` at `RULES_STEPS` (and once per epoch), the arm named first
    highest, so that every claim has two arms that differ."""

    def write(root: Path) -> None:
        arms, keys = rules_arms(preset), rules_keys(preset)
        job = 0
        for i, select in enumerate(arms):
            for seed in SEEDS:
                level = 0.6 - 0.1 * i + 0.01 * seed
                rows = [{"step": s, "epoch": k, **{key: (level if "acc" in key else 2.0 - level) * (1 + 0.01 * k)
                                                   for key in keys}}
                        for k, s in enumerate(RULES_STEPS, 1)]  # fmt: skip
                write_run(root, job, {**nested(select), "seed": seed, "max_steps": RULES_STEPS[-1]}, rows,
                          {"step": RULES_STEPS[-1]})  # fmt: skip
                job += 1

    return jittered(write)


def runs_for(preset: str) -> Callable[[Path], None]:
    """The preset's writer: its own (`PRESET_RUNS`), else `from_rules`."""
    return PRESET_RUNS.get(preset) or from_rules(preset)
