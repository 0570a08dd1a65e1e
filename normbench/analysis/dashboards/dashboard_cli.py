"""``normbench-dashboard``: a paper preset's figures (or the leaderboard's table) as a W&B report.

    normbench-dashboard --entity E --project P --preset santurkar_vgg  # writes outputs/dashboards/santurkar_vgg.json
    normbench-dashboard --entity E --project P --preset all --preset all_cpu   # every preset, both scales
    normbench-dashboard --entity E --project P --preset santurkar_vgg --create # and saves the report to W&B
    normbench-dashboard --entity E --project P --runs multirun/2026-12-06/10-00-00   # any sweep of one's own

By default it writes the specification only (``<out>/<preset>.json``: the sections, their run
filters and groupings, the panels and their keys; see `normbench.analysis.dashboards.dashboard`), and needs
no network. ``--out`` defaults to ``outputs/dashboards`` under the current folder, beside the
runs' ``outputs/`` and, like it, ignored by git in a checkout (a file written into the checkout
would make every later run record a dirty tree). ``--create`` builds the report with
wandb-workspaces and saves it to W&B (``pip install "normbench[dashboard]"``, ``wandb login``),
printing its URL.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from normbench.analysis.dashboards.dashboard import Dashboard, all_presets, build_dashboard
from normbench.analysis.dashboards.dashboard_report import columns, create, filter_expression, forest_filter
from normbench.base.errors import ConfigError
from normbench.base.output import atomic_write_text, check_out_dir, plain_text

DEFAULT_OUT = Path("outputs") / "dashboards"
"""Beside the runs' ``outputs/`` (Hydra's default), which a checkout's ``.gitignore`` ignores."""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="normbench-dashboard", description=plain_text(__doc__.splitlines()[0]))
    parser.add_argument("--entity", required=True, help="the W&B entity (user or team) that holds the runs")
    parser.add_argument("--project", required=True, help="the W&B project the sweep logged to")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--preset",
        action="append",
        help="a paper preset (santurkar_vgg, ..., or its _cpu variant), leaderboard[_cpu], all or all_cpu; repeatable",
    )
    what.add_argument("--runs", type=Path, metavar="SWEEP",
                      help="any local sweep folder: its swept keys, curves, finals (no preset needed)")  # fmt: skip
    parser.add_argument("--group", help="with --runs: the sweep's W&B group (default: sweep-<folder name>)")
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="where the JSON goes (default %(default)s, git-ignored)"
    )
    parser.add_argument("--create", action="store_true", help="also save the report to W&B (needs network and login)")
    return parser.parse_args(argv)


def expand(presets: Sequence[str]) -> list[str]:
    out: list[str] = []
    for p in presets:
        out += all_presets(cpu=p == "all_cpu") if p in ("all", "all_cpu") else [p]
    return list(dict.fromkeys(out))


def specification(preset: str, entity: str, project: str) -> dict:
    """The dashboard as JSON-ready data, with each section's W&B run filter and table columns."""
    dash = build_dashboard(preset)
    data = {"entity": entity, "project": project, **dash.to_json()}
    if dash.forest_run:  # the report's first panel: the forest plot logged by normbench-figures
        data["wandb_forest_filter"] = forest_filter(dash)
    for section, node in zip(dash.sections, data["sections"]):
        node["wandb_filter"] = filter_expression(dash.job_type, section.select, dash.group)
        node["wandb_groupby"] = [f"config.{k}" for k in section.group_by]
        node["wandb_columns"] = columns(section)
    return data


def sweep_specification(dash: Dashboard, entity: str, project: str) -> dict:
    """`specification` of a sweep's dashboard (`normbench.analysis.dashboards.sweep_report.sweep_dashboard`)."""
    data = {"entity": entity, "project": project, **dash.to_json()}
    for section, node in zip(dash.sections, data["sections"], strict=True):
        node["wandb_filter"] = filter_expression(dash.job_type, section.select, dash.group)
        node["wandb_groupby"] = [f"config.{k}" for k in section.group_by]
        node["wandb_columns"] = columns(section)
    return data


def sweep_main(args: argparse.Namespace) -> int:
    """``--runs SWEEP``: the report of any sweep, its runs read from the local folder."""
    from normbench.analysis.dashboards.sweep_report import sweep_dashboard, sweep_group
    from normbench.analysis.loading.runs import load_local_runs

    runs = load_local_runs([args.runs], unfinished=True)
    dash = sweep_dashboard(runs, args.group or sweep_group(args.runs))
    data = sweep_specification(dash, args.entity, args.project)
    path = args.out / f"{dash.group}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    print(f"{dash.group}: {len(runs)} runs, the sweep varies {', '.join(dash.swept) or 'nothing'} -> {path}")
    if args.create:
        print(f"{dash.group}: created {create(dash, args.entity, args.project)}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        check_out_dir(args.out, "the dashboards' JSON")
        if args.runs is not None:
            return sweep_main(args)
        if args.group:
            raise ConfigError("--group goes with --runs (a preset's report shows every sweep of it)")
        for preset in expand(args.preset):
            data = specification(preset, args.entity, args.project)
            path = args.out / f"{preset}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
            panels = sum(len(s["panels"]) for s in data["sections"])
            print(f"{preset}: {len(data['sections'])} sections, {panels} panels -> {path}")
            if args.create:
                print(f"{preset}: created {create(build_dashboard(preset), args.entity, args.project)}")
    except ConfigError as e:
        print(f"normbench-dashboard: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001  (--create: not logged in, no network, no permission)
        if not args.create:
            raise
        reason = " ".join(str(e).split()[:40]) or type(e).__name__
        print(f"normbench-dashboard: W&B refused the report ({type(e).__name__}: {reason})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
