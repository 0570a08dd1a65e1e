"""``normbench-figures``: draw a preset's paper figure(s) from its runs, with the CSV of the plotted
numbers and the claims table.

    normbench-figures santurkar_vgg_cpu --runs outputs/multirun/2026-11-29_15-00-00
    normbench-figures powernorm_mt --wandb my-entity/normbench --group sweep-2026-11-29_15-00-00
    normbench-figures powernorm_mt --wandb my-entity/normbench --job-type powernorm_mt --log-to-wandb

Writes ``<out>/<figure>.png``, ``.pdf``, ``.csv`` and ``<out>/claims.csv``, ``claims.md``,
``runs.csv`` (default ``<out>``: ``results/<preset>``). Every figure is checked as written
(`normbench.analysis.figure_checks`: empty panels, one-point curves, overlapping tick labels, text
cut at the edge, a legend over data): each problem is one ``error:`` line and the exit status is 1,
after everything is written. From W&B, runs are selected by group (one
sweep invocation) and/or job type (the preset: every sweep of it), and only the keys the figures
plot are fetched. ``--log-to-wandb`` logs each figure as a ``wandb.Image`` and each claims table as
a ``wandb.Table`` into a summary run of the group (job type ``figures``).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path

from normbench.analysis import figure_fn, figure_keys, load_local_runs, load_wandb_runs, make_figures, write_outputs
from normbench.analysis.claims import claims_markdown
from normbench.analysis.plot import FigureResult
from normbench.analysis.provenance import check_provenance
from normbench.analysis.runs import Run
from normbench.errors import ConfigError
from normbench.output import warn
from normbench.rules import base_preset, rules_hash


def check_rules(preset: str, runs: Sequence[Run]) -> None:
    """Refuse runs of another preset, and runs made under rules that are no longer ``preset``'s
    (a rule changed after the runs: judging them by the new one would be choosing after looking).
    Runs that recorded no rules (made before runs recorded them) get one warning."""
    want, unrecorded = rules_hash(preset), 0
    for r in runs:
        record = r.summary.get("rules")
        if not isinstance(record, dict) or not record.get("preset"):
            unrecorded += 1
            ran = next((o.split("=", 1)[1] for o in r.overrides if o.startswith("experiment=")), None)
            if ran is not None and base_preset(ran) != base_preset(preset):  # a run from before rules were recorded
                raise ConfigError(f"{r.source} is a run of experiment={ran}, not of {preset!r}")
            continue
        if base_preset(str(record["preset"])) != base_preset(preset):
            raise ConfigError(f"{r.source} is a run of preset {record['preset']!r}, not of {preset!r}")
        if record.get("hash") != want:
            raise ConfigError(
                f"{r.source} was made under rules {record.get('hash')} and {preset}'s rules are now {want}: "
                "a rule changed after the run; rerun the preset (or judge at the commit the runs were made at)"
            )
    if unrecorded:
        warn(f"{unrecorded} of {len(runs)} runs recorded no rules hash: their rules cannot be checked")


def check_out(out: Path) -> None:
    """``--out`` must be a folder (or not exist yet): a `ConfigError` before any run is read."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r} is a file, not a folder; pass a folder for the figures and tables")


def write_runs_table(runs: Sequence[Run], path: Path) -> Path:
    """One row per run: where it came from, its overrides, status, wall time and seed."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["source", "overrides", "status", "seed", "steps", "wall_time_s"])
        for r in runs:
            writer.writerow(
                [r.source, " ".join(r.overrides), r.status, r.seed, r.final_step, r.summary.get("wall_time_s")]
            )
    return path


def log_to_wandb(
    results: Sequence[FigureResult], out: Path, entity_project: str, group: str | None, preset: str
) -> str:
    """Each figure as a ``wandb.Image`` and each figure's claims as a ``wandb.Table``, in one summary
    run of ``group`` (job type ``figures``); returns the run's id."""
    import wandb

    entity, _, project = entity_project.rpartition("/")
    run = wandb.init(entity=entity or None, project=project, group=group, job_type="figures",
                     name=f"figures-{preset}", tags=[preset, "figures"])  # fmt: skip
    try:
        for res in results:
            row = {f"figures/{res.name}": wandb.Image(str(out / f"{res.name}.png"))}
            if res.claims:
                columns = ["claim", "paper", "measured", "verdict"]
                row[f"claims/{res.name}"] = wandb.Table(
                    columns=columns, data=[[c.claim, c.paper, c.measured, c.verdict] for c in res.claims]
                )
            run.log(row)
        return run.id
    finally:
        run.finish()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="normbench-figures", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("preset", help="experiment preset, e.g. santurkar_vgg or santurkar_vgg_cpu")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--runs", nargs="+", metavar="DIR", help="multirun directories (each job: metrics.jsonl ...)")
    source.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read the runs from W&B")
    parser.add_argument("--group", help="W&B group: one sweep invocation (sweep-<dir name>)")
    parser.add_argument("--job-type", help="W&B job type: the preset (every sweep of it); default with --wandb "
                        "and no --group: the preset's name")  # fmt: skip
    parser.add_argument("--out", help="output folder (default: results/<preset>)")
    parser.add_argument("--log-to-wandb", metavar="ENTITY/PROJECT", nargs="?", const="",
                        help="log the figures and claims tables into a W&B summary run of the group "
                        "(default project: the one read with --wandb)")  # fmt: skip
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        figure_fn(args.preset)
        check_out(Path(args.out or Path("results") / args.preset))
        if args.runs:
            runs = load_local_runs(args.runs)
        else:
            job_type = args.job_type or (None if args.group else args.preset)
            runs = load_wandb_runs(args.wandb, args.group, job_type=job_type, keys=figure_keys(args.preset))
        check_rules(args.preset, runs)
        check_provenance(runs, args.out or Path("results") / args.preset)
        results = make_figures(args.preset, runs)
    except ConfigError as e:
        print(f"normbench-figures: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out or Path("results") / args.preset)
    for path in [*write_outputs(results, out), write_runs_table(runs, out / "runs.csv")]:
        print(f"[figures] wrote {path}")
    total = sum(float(r.summary.get("wall_time_s") or 0.0) for r in runs)
    print(f"[figures] {len(runs)} runs, {total:.0f} s of run wall time in all")
    print(claims_markdown([c for r in results for c in r.claims]))
    if args.log_to_wandb is not None:
        target = args.log_to_wandb or args.wandb
        if not target:
            print("normbench-figures: error: --log-to-wandb needs ENTITY/PROJECT (or --wandb)", file=sys.stderr)
            return 2
        run_id = log_to_wandb(results, out, target, args.group, args.preset)
        print(f"[figures] logged to W&B run {run_id}")
    return report_problems(results)


def report_problems(results: Sequence[FigureResult]) -> int:
    """One line on stderr per readability problem of a written figure (`check_figure`); 1 when
    there is any (everything is written first: the claims stand, the figure is to be fixed), else 0."""
    problems = [f"{res.name}: {p}" for res in results for p in res.problems]
    for line in problems:
        print(f"normbench-figures: error: figure {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
