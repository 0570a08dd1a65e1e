"""A `normbench.analysis.dashboards.dashboard.Dashboard` as a W&B report, through ``wandb-workspaces``
(``pip install "normbench[dashboard]"``).

The report opens with the preset's forest plot (the image `FOREST_KEY` of the run
``figures-<preset>``, job type ``figures``, that ``normbench-figures --log-to-wandb`` writes), then
each section becomes a heading, its claims as a list, and a panel grid: one run set (the preset's
runs, ``JobType = <preset>``, narrowed to the values its arms take, grouped by the section's keys)
and its panels: line plots drawn as the median over a group's seeds with the min–max band, and the
run set's table with the grouping keys and the panels' keys pinned as columns. Building the
objects needs no network; `create` saves the report to W&B (the user's step: it needs
``wandb login`` and the entity's permission).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from normbench.analysis.dashboards.dashboard import FIGURES_JOB_TYPE, FOREST_KEY, Dashboard, Panel, Section
from normbench.base.errors import ConfigError


def filter_expression(job_type: str, select: Mapping[str, list[Any]], group: str = "") -> str:
    """The run set's filter in wandb-workspaces' expression syntax: the preset's job type (if any),
    the sweep's group (if any), and for each selected key one of the arms' values."""
    parts = [f"JobType = {job_type!r}"] if job_type else []
    if group:
        parts.append(f"Group = {group!r}")
    for key, values in select.items():
        parts.append(f"Config({key!r}) in {list(values)!r}")
    return " and ".join(parts)


def columns(section: Section) -> list[str]:
    """The runs table's pinned columns: the grouping keys, then every key the panels draw."""
    shown = [f"config:{k}.value" for k in section.group_by]
    shown += [f"summary:{k}" for p in section.panels for k in p.y if f"summary:{k}" not in shown]
    return shown


def _workspaces() -> Any:
    try:
        import wandb_workspaces.reports.v2 as wr
    except ImportError:
        raise ConfigError(
            'building the W&B report needs wandb-workspaces: pip install "normbench[dashboard]"'
        ) from None
    return wr


def _line(wr: Any, panel: Panel, dash: Dashboard) -> Any:
    return wr.LinePlot(
        title=panel.title,
        x=panel.x,
        y=list(panel.y),
        groupby_aggfunc=dash.center,
        groupby_rangefunc=dash.range,
        legend_position="north",
    )


def _claims_text(section: Section) -> str:
    lines = [
        f"- **{c['id']}**: {c['claim']}" + (f" (paper: {c['paper']})" if c["paper"] else "") for c in section.claims
    ]
    notes = [f"- {p.title}: {p.note}" for p in section.panels if p.note]
    grouped = ", ".join(section.group_by)
    return "\n".join(
        [*lines, *notes, f"\nEach line is one group ({grouped}): the median over its seeds, min–max shaded."]
    )


def forest_filter(dash: Dashboard) -> str:
    """The run set of the forest plot: the preset's ``figures`` summary run, by its name."""
    return f"JobType = {FIGURES_JOB_TYPE!r} and Name = {dash.forest_run!r}"


def _forest_blocks(wr: Any, dash: Dashboard, entity: str, project: str) -> list[Any]:
    """The forest plot as the report's first panel grid (none when the dashboard has no forest run)."""
    if not dash.forest_run:
        return []
    runset = wr.Runset(entity=entity, project=project, name="forest", filters=forest_filter(dash))
    text = (
        "Every claim's difference between its arms (or ratio, log axis) with its 95 % interval, coloured by "
        "verdict; the band is an equivalence claim's margin. Logged by `normbench-figures --log-to-wandb`."
    )
    media = wr.MediaBrowser(title="forest plot", media_keys=[FOREST_KEY], num_columns=1)
    return [wr.H2("What the verdicts rest on"), wr.MarkdownBlock(text), wr.PanelGrid(runsets=[runset], panels=[media])]


def to_report(dash: Dashboard, entity: str, project: str) -> Any:
    """The ``wandb_workspaces.reports.v2.Report`` of ``dash`` (not saved)."""
    wr = _workspaces()
    swept = ", ".join(f"{k}: {v}" for k, v in dash.swept.items())
    blocks: list[Any] = [wr.P(f"{dash.description} Runs: job type {dash.job_type}; the sweep varies {swept}.")]
    blocks += _forest_blocks(wr, dash, entity, project)
    for section in dash.sections:
        runset = wr.Runset(
            entity=entity,
            project=project,
            name=section.figure,
            filters=filter_expression(dash.job_type, section.select, dash.group),
            groupby=[f"config.{k}" for k in section.group_by],
            pinned_columns=columns(section),
        )
        panels = [_line(wr, p, dash) for p in section.panels if p.kind == "line"]
        blocks += [
            wr.H2(section.title),
            wr.MarkdownBlock(_claims_text(section)),
            wr.PanelGrid(runsets=[runset], panels=panels),
        ]
    return wr.Report(entity=entity, project=project, title=dash.title, description=dash.description, blocks=blocks)


def create(dash: Dashboard, entity: str, project: str) -> str:
    """Save the report to W&B (needs the network and a login); its URL."""
    report = to_report(dash, entity, project)
    report.save()
    return str(report.url)
