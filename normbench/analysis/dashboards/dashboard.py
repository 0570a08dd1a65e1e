"""Dashboards as code: for each paper preset, the paper's figure panels drawn from its sweep's W&B
runs, as plain data (`Dashboard`, JSON) that `normbench.analysis.dashboards.dashboard_report` turns into a
W&B report.

What a dashboard holds is read, not written by hand:

- the runs: those whose ``job_type`` is the preset's name (`normbench.sinks.wandb_run` sets it to the
  experiment preset, so ``santurkar_vgg`` and ``santurkar_vgg_cpu`` stay apart);
- one section per figure the preset's rules name (``normbench/rules/<preset>.yaml``), holding the
  claims of that figure (those of the preset's scale) and the runs their arms select: the arms'
  config selectors become the section's run filter, and their keys (``norm.name``, ``lr``,
  ``batch_size``, ``hardware.compile``, ...) together with the preset's swept config keys
  (``hydra.sweeper.params`` of ``conf/experiment/<preset>.yaml``; ``norm`` → ``norm.name``, the
  seed left out) the grouping, so that each line is one arm: the median over its seeds, shaded
  from the lowest to the highest seed, as the figures draw them;
- the figure's own panels where it is data (its spec in the rules' ``figures:`` block, the one
  `normbench.analysis.figures.figure_spec` draws for ``normbench-figures``: `figure_panels`), then
- the panels of each claim's measure (`MEASURE_PANELS`): the W&B keys the measure reads, laid
  out as `normbench.sinks.wandb_layout` sections them (per-layer diagnostics as ``<name>/first_layer/…``
  and ``<name>/layer_mean/…``; the per-layer values are in the table ``<name>/layers``), against
  the x-axis the paper uses;
- first, the preset's forest plot (`normbench.analysis.figures.forest`): the image ``figures/forest``
  that ``normbench-figures --log-to-wandb`` logs into its summary run ``figures-<preset>`` (job
  type ``figures``), every claim's difference with its 95 % interval, coloured by verdict;
- for ``leaderboard`` (and ``leaderboard_cpu``): the leaderboard's table, one row per model, data
  set and norm, with the columns ``normbench-leaderboard`` reports (`LEADERBOARD_COLUMNS`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from normbench.analysis.judging.figure_schema import FigureSpec
from normbench.analysis.judging.rules_schema import CheckRule, ClaimRule, load_rules
from normbench.base import layout
from normbench.base.errors import ConfigError
from normbench.rules import base_preset, list_rule_presets, variant
from normbench.sinks.wandb_layout import EPOCH, FIRST_LAYER, LAYER_MEAN, STEP, TABLE

LEADERBOARD = "leaderboard"
CENTER, RANGE = "median", "minmax"
FOREST_KEY, FIGURES_JOB_TYPE = "figures/forest", "figures"
"""The forest plot's image key, and the job type of the summary run ``normbench-figures`` logs it to."""
CLOCK = "perf/train_s"
"""The training clock, an x-axis for equal-time panels (logged on every row)."""
"""How a group of seeds is drawn (W&B's ``groupby_aggfunc`` / ``groupby_rangefunc``)."""


@dataclass(frozen=True)
class Panel:
    """One chart: ``y`` keys against ``x`` (``kind="line"``), or a runs table (``kind="table"``)
    whose columns are the section's grouping keys and ``y``'s final values."""

    title: str
    y: tuple[str, ...]
    x: str = STEP
    kind: str = "line"
    note: str = ""


@dataclass
class Section:
    """One figure: its claims, the runs its arms select, how they are grouped, its panels."""

    figure: str
    title: str
    claims: list[dict[str, str]]
    select: dict[str, list[Any]]
    """Config key → the values the arms take: a run is drawn when each key takes one of them."""
    group_by: list[str]
    panels: list[Panel]


@dataclass
class Dashboard:
    preset: str
    title: str
    description: str
    job_type: str
    swept: dict[str, str]
    """The preset's ``hydra.sweeper.params`` as written."""
    sections: list[Section] = field(default_factory=list)
    center: str = CENTER
    range: str = RANGE
    forest_run: str = ""
    """The name of the ``figures`` run whose `FOREST_KEY` image heads the report ("" for none)."""
    group: str = ""
    """The W&B group whose runs the report draws ("" for every group: a preset's sweeps)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def panel_keys(self) -> set[str]:
        """Every W&B key a panel draws."""
        return {k for s in self.sections for p in s.panels for k in p.y}

    def group_keys(self) -> set[str]:
        """Every config key a section groups or filters by."""
        return {k for s in self.sections for k in [*s.group_by, *s.select]}


def _layered(diagnostic: str, metric: str) -> tuple[str, ...]:
    return (f"{diagnostic}/{FIRST_LAYER}/{metric}", f"{diagnostic}/{LAYER_MEAN}/{metric}")


def _table_note(diagnostic: str) -> str:
    return f"each layer's values: the table {diagnostic}/{TABLE}"


def measure_panels(measure: str, params: Mapping[str, Any]) -> list[Panel]:
    """The panels that show what ``measure`` reads from a run (see `MEASURE_PANELS`)."""
    if measure not in MEASURE_PANELS:
        raise ConfigError(f"no dashboard panels for the measure {measure!r}; known: {', '.join(MEASURE_PANELS)}")
    return MEASURE_PANELS[measure](params)


def _ics(p: Mapping[str, Any]) -> list[Panel]:
    metric = p["metric"]
    note = f"the claims read single measured layers (index {int(p.get('layer_index', 0))}, ...); {_table_note('ics')}"
    return [Panel(f"ICS: {metric} (first measured layer; mean over layers)", _layered("ics", metric), note=note)]


MEASURE_PANELS: dict[str, Any] = {
    "final_train_acc": lambda p: [Panel("training accuracy (each logged batch)", ("train/batch_acc",))],
    "final_test_acc": lambda p: [Panel("test accuracy", ("val/acc",))],
    "activation_shift": lambda p: [
        Panel(
            "activation median after the norm (first norm layer; mean over layers)",
            _layered("activations", "post_q50"),
            note=f"the claim reads norm layer {int(p.get('layer_index', 0))}; {_table_note('activations')}",
        )
    ],
    "ics_window_median": _ics,
    "loss_range_window_median": lambda p: [
        Panel("loss range along the gradient (max − min over step sizes)", ("landscape/loss_range",)),
        Panel("loss along the gradient: lowest and highest", ("landscape/loss_min", "landscape/loss_max")),
    ],
    "key_window_median": lambda p: [Panel(str(p["key"]), (str(p["key"]),))],
    "median_logged": lambda p: [  # bn_stats averages per epoch; the other diagnostics log at their steps
        Panel(f"{p['key']} (per epoch)", (str(p["key"]),), x=EPOCH)
        if str(p["key"]).startswith("bn_stats/")
        else Panel(str(p["key"]), (str(p["key"]),))
    ],
    "final": lambda p: [Panel(str(p["key"]), (str(p["key"]),), x=EPOCH)],
    "logged_at_fraction": lambda p: [
        Panel(
            str(p["key"]),
            (str(p["key"]),),
            x=EPOCH,
            note=f"the claim reads the first evaluation at or after {float(p['fraction']):g} of the run's steps",
        )
    ],
    "train_test_gap": lambda p: [
        Panel("accuracy: training images (eval mode) and test", ("train_eval/acc", "val/acc"), x=EPOCH)
    ],
    "train_eval_error": lambda p: [
        Panel("training images in eval mode: accuracy (error = 1 − accuracy)", ("train_eval/acc",), x=EPOCH)
    ],
    "saturated_fraction": lambda p: [
        Panel("saturated pre-activations (first norm layer; mean over layers)", _layered("saturation", "saturated"))
    ],
    "grad_norm_ratio": lambda p: [
        Panel(
            "gradient norm per layer (first layer; mean over layers)",
            _layered("saturation", "grad_norm"),
            note=f"the claim reads {p['first']} over {p['last']}; {_table_note('saturation')}",
        )
    ],
    "error": lambda p: [Panel("validation accuracy (error = 1 − accuracy)", ("val/acc",), x=EPOCH)],
    "final_error": lambda p: [Panel(f"{p['key']} (the check reads 1 − its final value)", (str(p["key"]),), x=EPOCH)],
    "final_train_error": lambda p: [
        Panel("training accuracy (each logged batch; the check reads 1 − its final value)", ("train/batch_acc",))
    ],
    "median_logged_gap": lambda p: [
        Panel(f"{p['key']} and {p['minus']} (the claim: their medians' difference)", (str(p["key"]), str(p["minus"])))
    ],
    "inverse_median_logged": lambda p: [Panel(f"{p['key']} (the check reads 1 / its median)", (str(p["key"]),))],
    "best_over_lr": lambda p: [
        Panel("validation accuracy", ("val/acc",), x=EPOCH, note="the claim: each seed's best over its lr grid")
    ],
    "largest_trained_lr": lambda p: [
        Panel("validation accuracy", ("val/acc",), x=EPOCH, note="the claim: each seed's largest lr that trained")
    ],
    "remaining_loss": lambda p: [Panel("training loss (epoch mean)", ("train/loss",), x=EPOCH)],
    "bleu": lambda p: [Panel("BLEU (valid each evaluation; test at the end)", ("val/bleu", "test/bleu"), x=EPOCH)],
    "throughput": lambda p: [Panel("training tokens per second", ("perf/tokens_per_s",), x=EPOCH)],
    "loss_at_equal_time": lambda p: [
        Panel(
            "training loss (each logged batch) on the training clock",
            ("train/batch_loss",),
            x=CLOCK,
            note="the claim reads its running mean at one time every run reached (the rules' time_fraction)",
        )
    ],  # fmt: skip
    "loss_at_equal_steps": lambda p: [
        Panel(
            "training loss (each logged batch)",
            ("train/batch_loss",),
            note="the claim reads its running mean at one step (the rules' step_fraction)",
        )
    ],  # fmt: skip
}
"""Measure name → its panels (a function of the measure's parameters in the rules). The keys are
those the measures in ``normbench/analysis/`` read, as W&B holds them."""

SHOW_EVERY_VALUE: dict[str, tuple[str, ...]] = {"gn_batch_size": ("batch_size",), "gn_groups": ("norm.groups",)}
"""Figure → keys whose every swept value the figure draws, though its claims name only some
(Wu & He 2018, Fig. 1: the error at every batch size from 32 to 2; the claims compare 32 and 2;
Table 3: the error at every group count; the claims compare G = 8 with G = 1 and with IN)."""

LEADERBOARD_COLUMNS: dict[str, tuple[str, ...]] = {
    "images": (
        "val/acc",
        "train/loss",
        "perf/samples_per_s",
        "landscape/loss_range",
        "beta_smoothness/beta",
        "grad_variance/total",
        "bn_stats/first_layer/mean_dist",
        "bn_stats/first_layer/var_dist",
    ),
    "translation": ("test/bleu", "val/bleu", "train/loss", "perf/tokens_per_s", "bn_stats/first_layer/mean_dist"),
}
"""The leaderboard's columns per task (`normbench.analysis.leaderboard.leaderboard`: the score, the final
training loss, the throughput and the diagnostics' headlines)."""
LEADERBOARD_DATASETS = {"images": ("cifar10",), "translation": ("iwslt14",)}


def conf_dir() -> Path:
    """``conf/`` beside the package in a checkout; the copy packed into the wheel otherwise."""
    found = layout.conf_dir()
    if found is None:
        raise ConfigError(f"normbench's conf/ not found beside {layout.PACKAGE_DIR}")
    return found


def swept_params(preset: str) -> dict[str, str]:
    """``hydra.sweeper.params`` of ``conf/experiment/<preset>.yaml`` (values as written)."""
    path = conf_dir() / "experiment" / f"{preset}.yaml"
    if not path.is_file():
        raise ConfigError(f"no preset {preset!r}: {path} does not exist")
    data = yaml.safe_load(path.read_text()) or {}
    params = ((data.get("hydra") or {}).get("sweeper") or {}).get("params") or {}
    return {str(k): str(v) for k, v in params.items()}


def swept_config_keys(swept: Mapping[str, str]) -> list[str]:
    """The config keys a sweep varies: ``norm`` → ``norm.name``, ``norm@model.encoder_norm`` →
    ``model.encoder_norm.name``, ``hardware.compile`` as it is; the seed and the arm groups
    (``experiment/arms/…``: their keys come from the rules' selectors) left out."""
    keys = []
    for key in swept:
        if key == "seed" or "/" in key:
            continue
        if "@" in key:
            keys.append(f"{key.split('@', 1)[1]}.name")
        elif (conf_dir() / key).is_dir():  # a config group: its node's name
            keys.append(f"{key}.name")
        else:
            keys.append(key)
    return keys


def _merge_select(selectors: Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for select in selectors:
        for key, value in select.items():
            if value not in out.setdefault(key, []):
                out[key].append(value)
    return out


def _figure_title(figure: str, rules: Sequence[ClaimRule | CheckRule]) -> str:
    papers = "; ".join(dict.fromkeys(r.paper for r in rules if isinstance(r, ClaimRule) and r.paper))
    return f"{figure}: {papers}" if papers else figure


def _arm_selects(rule: ClaimRule | CheckRule) -> list[dict[str, Any]]:
    """The config selectors of a rule's arms (a check's: its one selector)."""
    return [rule.a.select, rule.b.select] if isinstance(rule, ClaimRule) else [rule.select]


def _measures(rule: ClaimRule | CheckRule) -> list[tuple[str, dict[str, Any]]]:
    """The rule's measure, and an arm's own (a paired claim's second evaluation)."""
    out = [(rule.measure, rule.params)]
    if isinstance(rule, ClaimRule):
        out += [(arm.measure, arm.params) for arm in (rule.a, rule.b) if arm.measure is not None]
    return out


def _add(panels: list[Panel], new: Iterable[Panel]) -> None:
    for panel in new:
        if all((p.kind, p.x, p.y) != (panel.kind, panel.x, panel.y) for p in panels):
            panels.append(panel)


def figure_panels(spec: FigureSpec) -> list[Panel]:
    """The panels of a figure written as data (`normbench.analysis.judging.figure_schema`): each curve
    panel's logged keys against its x (the percent of training, which W&B cannot draw, as the step;
    a registered series has no one W&B key and is left to the measures' panels)."""
    out = []
    for p in spec.panels:
        keys = tuple(line.key for line in p.lines if line.key is not None)
        if p.kind == "curve" and keys:
            out.append(Panel(" ".join((p.title or p.ylabel).split()), keys, x=EPOCH if p.x == "epoch" else STEP))
    return out


def _section(
    figure: str, mine: Sequence[ClaimRule | CheckRule], swept: Mapping[str, str], spec: FigureSpec | None
) -> Section:
    """The section of ``figure``: its rules' arms as the run filter and grouping; the figure's own
    panels (when it is data) and its measures' panels."""
    chosen = _merge_select(s for rule in mine for s in _arm_selects(rule))
    group_by = list(dict.fromkeys([*swept_config_keys(swept), *chosen]))
    select = {k: v for k, v in chosen.items() if k not in SHOW_EVERY_VALUE.get(figure, ())}
    panels: list[Panel] = []
    _add(panels, figure_panels(spec) if spec is not None else [])
    for rule in mine:
        for name, params in _measures(rule):
            _add(panels, measure_panels(name, params))
    finals = tuple(dict.fromkeys(k for p in panels for k in p.y))
    panels.append(Panel("runs: the final values per arm", finals, kind="table"))
    described = [{"id": r.id, "claim": r.claim, "paper": r.paper if isinstance(r, ClaimRule) else ""} for r in mine]
    return Section(figure, _figure_title(figure, mine), described, select, group_by, panels)


def build_dashboard(preset: str) -> Dashboard:
    """The dashboard of a paper preset (or its ``_cpu`` variant) from its rules (parsed by
    `normbench.analysis.judging.rules_schema.load_rules`, as the claims are) and its config."""
    if base_preset(preset) == LEADERBOARD:
        return build_leaderboard(preset)
    rules = load_rules(preset)
    if rules is None:
        valid = [*all_presets(), *all_presets(cpu=True)]
        raise ConfigError(f"preset {preset!r} has no rules (normbench/rules/); valid: {', '.join(valid)}")
    swept = swept_params(preset)
    scale = variant(preset)
    judged: list[ClaimRule | CheckRule] = [c for c in rules.claims if scale in c.variants]
    judged += rules.checks  # every check: the runs it reads are drawn at both scales
    dash = Dashboard(
        preset=preset,
        title=f"normbench: {preset}",
        description=rules.scale[scale].note if scale in rules.scale else "",
        job_type=preset,
        swept=swept,
        forest_run=f"figures-{preset}",  # normbench.analysis.figures.figures_cli.log_to_wandb names it so
    )
    specs = {d.name: d for d in (rules.figures.draw if rules.figures else ()) if isinstance(d, FigureSpec)}
    for figure in dict.fromkeys(r.figure for r in judged):
        dash.sections.append(_section(figure, [r for r in judged if r.figure == figure], swept, specs.get(figure)))
    return dash


def build_leaderboard(preset: str) -> Dashboard:
    """The leaderboard's table: one section per task, one row per model, data set and norm."""
    swept = swept_params(preset)
    dash = Dashboard(
        preset=preset,
        title=f"normbench: {preset}",
        description="every norm on every model: the normbench-leaderboard table, one row per model, data set and norm",
        job_type=preset,
        swept=swept,
    )
    for task, columns in LEADERBOARD_COLUMNS.items():
        datasets = LEADERBOARD_DATASETS[task]
        group_by = ["model.name", "dataset.name", "norm.name"]
        if task == "translation":  # the encoder-only rows (transformer_enc: LN in the decoder) apart
            group_by.append("model.decoder_norm.name")
        score = columns[0]
        panels = [
            Panel(f"leaderboard ({task})", columns, kind="table"),
            Panel(f"{score} per epoch", (score,), x=EPOCH),
            Panel("training loss (epoch mean)", ("train/loss",), x=EPOCH),
        ]
        select = {"dataset.name": list(datasets)}  # the CPU arms read the subsets under the same names
        dash.sections.append(Section(f"leaderboard_{task}", f"Leaderboard: {task}", [], select, group_by, panels))
    return dash


def dashboards(presets: Iterable[str]) -> list[Dashboard]:
    return [build_dashboard(p) for p in presets]


def all_presets(cpu: bool = False) -> list[str]:
    """Every preset with a dashboard: the paper presets and the leaderboard (``_cpu`` variants)."""
    names = list(dict.fromkeys([*list_rule_presets(), LEADERBOARD]))  # the leaderboard has rules too
    return [f"{n}_cpu" for n in names] if cpu else names
