"""``normbench-figures``: draw a preset's paper figure(s) from its runs, with the CSV of the plotted
numbers and the claims table.

    normbench-figures santurkar_vgg_cpu --runs outputs/multirun/2026-11-29_15-00-00
    normbench-figures powernorm_mt --wandb my-entity/normbench --group sweep-2026-11-29_15-00-00
    normbench-figures powernorm_mt --wandb my-entity/normbench --job-type powernorm_mt --log-to-wandb
    normbench-figures gn_groups_cpu --per-run results/gn_groups_cpu/per_run.csv
    normbench-figures santurkar_vgg_cpu --forest-only --out results/santurkar_vgg_cpu

Writes, first, ``<out>/forest.png`` (``.pdf``, ``.csv``: every judged claim's difference, signed
toward its claim in its natural unit, with its 95 % interval, `normbench.analysis.figures.forest`; none
when no claim was judged), then ``<out>/<figure>.png``, ``.pdf``, ``.csv`` and
``<out>/claims.csv``, ``claims.md``, ``per_run.csv`` (every value the claims and checks are judged
on, one row per run), ``runs.csv`` (default ``<out>``: ``results/<preset>``). From ``--per-run`` (a
``per_run.csv``) only ``claims.csv``, ``claims.md`` and the forest plot are written, the claims
byte-identical to those judged from the runs. Both refuse, in one line and before anything is
written, the runs of the preset's other variant (``x_cpu`` judged as ``x``), a confirmatory
attempt that reuses an earlier attempt's seeds, and per-run values the ``--per-run`` reader would
refuse (`normbench.analysis.judging.evidence.vouch_rows`: a finished run's NaN measure); a run
without metrics is left out in a warning that names it. ``claims.md`` reads as the findings page does
(`normbench.analysis.wording.claims_text`). ``--forest-only`` redraws the forest plot and ``claims.md``
from ``<out>/claims.csv`` alone (no runs read; the leaderboard's too, though its table and figure
are normbench-leaderboard's). From W&B, runs are selected by group (one sweep
invocation) and/or job type (the preset: every sweep of it), and only the keys the figures plot
are fetched. ``--log-to-wandb`` logs the forest plot and each figure as a ``wandb.Image`` and each
claims table as a ``wandb.Table`` into a summary run of the group (job type ``figures``). Every
figure is checked as written (`normbench.analysis.figures.figure_checks`: empty panels, one-point curves,
overlapping tick labels, text cut at the edge, a legend over data): each problem is one ``error:``
line and the exit status is 1, after everything is written.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from normbench.analysis.figures import DRAWN_ELSEWHERE, FIGURES, figure_fn, figure_keys, make_figures, usable_runs
from normbench.analysis.figures.forest import remove_forest, write_forest
from normbench.analysis.figures.plot import FigureResult, figure_formats, write_outputs
from normbench.analysis.judging.claims import Claim, claims_markdown, csv_row, judge_rows, load_rules, write_claims
from normbench.analysis.judging.evidence import vouch_rows
from normbench.analysis.judging.per_run import per_run_rows, read_per_run, vouch_table, vouch_whole, write_per_run
from normbench.analysis.judging.rules_schema import Rules
from normbench.analysis.judging.verdicts import check_fresh_seeds
from normbench.analysis.loading.attempts import earlier_seeds
from normbench.analysis.loading.provenance import check_provenance
from normbench.analysis.loading.runs import Run, load_local_runs, load_wandb_runs
from normbench.analysis.loading.table_digest import stamp_digest
from normbench.analysis.wording.claim_meta import annotate, claim_meta
from normbench.analysis.wording.claims_text import write_claims_markdown
from normbench.analysis.wording.present import preset_words
from normbench.base.errors import ConfigError, is_environment_error, one_line_os_error
from normbench.base.layout import conf_dir
from normbench.base.output import check_out_dir, plain_text, warn
from normbench.rules import base_preset, rules_hash, variant


def check_rules(preset: str, runs: Sequence[Run]) -> None:
    """Refuse runs of another preset, and runs made under rules that are no longer ``preset``'s
    (a rule changed after the runs: judging them by the new one would be choosing after looking).
    Runs that recorded no rules (made before runs recorded them) get one warning."""
    want, unrecorded = rules_hash(preset), 0
    for r in runs:
        record = r.summary.get("rules")
        ran = next((o.split("=", 1)[1] for o in r.overrides if o.startswith("experiment=")), None)
        if isinstance(record, dict) and record.get("preset") and ran is not None and ran != record["preset"]:
            raise ConfigError(f"{r.source} was launched as experiment={ran} (.hydra/overrides.yaml) but recorded the "
                              f"rules of {record['preset']!r} (summary.json): its records are not one run's; move "
                              "it out of the folder, or rerun it")  # fmt: skip
        if not isinstance(record, dict) or not record.get("preset"):
            unrecorded += 1
            if ran is not None and base_preset(ran) != base_preset(preset):  # a run from before rules were recorded
                raise ConfigError(f"{r.source} is a run of experiment={ran}, not of {preset!r}")
            _same_variant(r.source, ran, preset)
            continue
        if base_preset(str(record["preset"])) != base_preset(preset):
            raise ConfigError(f"{r.source} is a run of preset {record['preset']!r}, not of {preset!r}")
        _same_variant(r.source, str(record["preset"]), preset)
        if record.get("hash") != want:
            raise ConfigError(
                f"{r.source} was made under rules {record.get('hash')} and {preset}'s rules are now {want}: "
                "a rule changed after the run; rerun the preset (or judge at the commit the runs were made at)"
            )
    if unrecorded:
        warn(f"{unrecorded} of {len(runs)} runs recorded no rules hash: their rules cannot be checked")


def _same_variant(source: str, ran: str | None, preset: str) -> None:
    """A run of ``preset``'s other variant (``x_cpu`` judged as ``x``, or the reverse: another scale,
    another seed block) is refused in one line naming the preset to judge it as."""
    if ran is not None and variant(ran) != variant(preset):
        raise ConfigError(f"{source} is a run of {ran!r}, not of {preset!r} (its other variant: another scale "
                          f"and seed block); judge the runs as {ran}")  # fmt: skip


def check_out(out: Path) -> None:
    """``--out`` must be a folder that can be written (`normbench.base.output.check_out_dir`): a
    `ConfigError` before any run is read."""
    check_out_dir(out, "the figures and tables")


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


def forest_title(preset: str, judged_hash: str | None = None) -> str:
    title, _ = claim_meta(preset, judged_hash)
    where = preset_words(preset) if title == base_preset(preset) else f"{title} ({preset_words(preset)})"
    return f"{where}: each judged claim's difference (or ratio)"


def write_preset_forest(preset: str, rows: Sequence[dict], out: Path) -> list[Path]:
    """The preset's forest plot from its claims' rows (``claims.csv``'s), judged claims only; when it
    judged none, no forest (a stale one is removed)."""
    annotated = annotate(rows, preset)
    if not any(r.get("verdict") not in ("passed", "failed", "not judged") and r.get("estimate") not in ("", None)
               for r in annotated):  # fmt: skip
        for gone in remove_forest(out):
            print(f"[figures] removed {gone}: no judged claim to draw")
        return []
    hashes = {str(r.get("rules_hash") or "") for r in rows} - {""}
    title = forest_title(preset, next(iter(hashes)) if len(hashes) == 1 else None)
    return write_forest(annotated, out, title=title)


def write_presented_claims(preset: str, out: Path) -> Path:
    """``<out>/claims.md`` rewritten from ``<out>/claims.csv`` as people read it
    (`normbench.analysis.wording.claims_text`: signed toward each claim, natural units, no e-notation)."""
    with open(out / "claims.csv", newline="") as f:
        return write_claims_markdown(preset, list(csv.DictReader(f)), out)


def forest_only(preset: str, out: Path) -> list[Path]:
    """``--forest-only``: redraw ``<out>/forest.*`` from ``<out>/claims.csv``."""
    path = out / "claims.csv"
    if not path.is_file():
        raise ConfigError(f"--forest-only reads {str(path)!r}, which does not exist; run normbench-figures first")
    with open(path, newline="") as f:
        return [*write_preset_forest(preset, list(csv.DictReader(f)), out), write_presented_claims(preset, out)]


def log_to_wandb(
    results: Sequence[FigureResult], out: Path, entity_project: str, group: str | None, preset: str
) -> str:
    """The forest plot first (``figures/forest``), then each figure as a ``wandb.Image`` and each
    figure's claims as a ``wandb.Table``, in one summary run of ``group`` (job type ``figures``,
    name ``figures-<preset>``: the run the preset's W&B report shows the forest plot from); returns
    the run's id."""
    import wandb

    entity, _, project = entity_project.rpartition("/")
    run = wandb.init(entity=entity or None, project=project, group=group, job_type="figures",
                     name=f"figures-{preset}", tags=[preset, "figures"])  # fmt: skip
    try:
        if (out / "forest.png").is_file():
            run.log({"figures/forest": wandb.Image(str(out / "forest.png"))})
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
        prog="normbench-figures", description=plain_text(__doc__), formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("preset", nargs="?", help="experiment preset, e.g. santurkar_vgg or santurkar_vgg_cpu; none "
                        "(or one without rules, e.g. quickstart) with --runs: any sweep's curves, finals")  # fmt: skip
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--runs", nargs="+", metavar="DIR", help="multirun directories (each job: metrics.jsonl ...)")
    source.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read the runs from W&B")
    source.add_argument("--per-run", metavar="PATH", help="a per_run.csv: rebuild claims.csv / claims.md and the "
                        "forest plot from it alone (no paper figures)")  # fmt: skip
    parser.add_argument("--group", help="W&B group: one sweep invocation (sweep-<dir name>)")
    parser.add_argument("--job-type", help="W&B job type: the preset (every sweep of it); default with --wandb "
                        "and no --group: the preset's name")  # fmt: skip
    parser.add_argument("--out", help="output folder (default: results/<preset>, with --pilot results/<preset>/pilot)")
    parser.add_argument(
        "--pilot",
        action="store_true",
        help="the runs are the rules' pilot runs (their seeds are "
        "the rules' pilot seeds): judged for planning only (normbench-plan reads their per_run.csv)",
    )
    parser.add_argument("--log-to-wandb", metavar="ENTITY/PROJECT", nargs="?", const="",
                        help="log the figures and claims tables into a W&B summary run of the group "
                        "(default project: the one read with --wandb)")  # fmt: skip
    parser.add_argument("--forest-only", action="store_true",
                        help="redraw only the forest plot, from <out>/claims.csv (no runs read)")  # fmt: skip
    args = parser.parse_args(argv)
    if not args.forest_only and not (args.runs or args.wandb or args.per_run):
        parser.error("one of the arguments --runs --wandb --per-run is required (or --forest-only)")
    return args


def sibling_preset(preset: str) -> str:
    """The other variant of ``preset``: ``x`` for ``x_cpu``, ``x_cpu`` for ``x``."""
    return base_preset(preset) if variant(preset) == "cpu" else f"{preset}_cpu"


def preset_setting(preset: str, key: str, seen: frozenset[str] = frozenset()) -> int | None:
    """A top-level integer ``key`` (``max_steps``, ``epochs``) as ``conf/experiment/<preset>.yaml``
    sets it, else as the experiment files it builds on set it (its ``defaults``, the last one that
    sets it winning, as Hydra composes them); None when none sets it (or it is swept)."""
    import yaml

    conf = conf_dir()
    path = conf / "experiment" / f"{preset}.yaml" if conf is not None else None
    data = yaml.safe_load(path.read_text()) if path is not None and path.is_file() and preset not in seen else None
    if not isinstance(data, dict):
        return None
    value = data.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    for parent in reversed([d for d in data.get("defaults") or [] if isinstance(d, str) and d != "_self_"]):
        if (found := preset_setting(parent, key, seen | {preset})) is not None:
            return found
    return None


def run_length(preset: str) -> tuple[str, int] | None:
    """How long ``preset``'s runs train, as the ``per_run.csv`` column a finished run reaches it in:
    (``final:step``, ``max_steps``) where it sets one, else (``final:epoch``, ``epochs``); None: unknown."""
    if (steps := preset_setting(preset, "max_steps")) is not None:
        return "final:step", steps
    epochs = preset_setting(preset, "epochs")
    return None if epochs is None else ("final:epoch", epochs)


def _reached(rows: Sequence[dict], column: str) -> set[float]:
    """The values of ``column`` the table's finished runs reached (numbers only)."""
    return {v for r in rows if r["status"] == "finished" and isinstance(v := r.get(column), (int, float))
            and not math.isnan(v)}  # fmt: skip


def check_table_scale(preset: str, rows: Sequence[dict], path: str, pilot: bool = False) -> None:
    """A one-line `ConfigError` when a ``per_run.csv`` holds the runs of ``preset``'s other variant
    (the table records no preset; the rules' hash is the same for both): a seed of the rules'
    confirmatory block of another variant only (not a pilot), or every finished run trained the
    other variant's length (`run_length`) where it is not ``preset``'s. A table of neither length
    (synthetic runs, a length the config does not set) is not refused: only the other variant's
    evidence is."""
    other = sibling_preset(preset)
    rules = load_rules(preset)
    if rules is not None and pilot:
        check_pilot_seeds(rules, rows, path)
    if rules is not None and not pilot:
        mine = rules.seeds.get(variant(preset))
        for name, block in rules.seeds.items():
            strays = sorted({r["seed"] for r in rows if r["seed"] in block and not (mine and r["seed"] in mine)})
            if name != variant(preset) and strays:
                raise ConfigError(f"{path}: seeds {strays} are in the rules' {name} seed block, not {preset}'s: "
                                  f"the table holds {other}'s runs; judge it as {other}")  # fmt: skip
    want, theirs = run_length(preset), run_length(other)
    if theirs is not None and theirs != want and _reached(rows, theirs[0]) == {theirs[1]}:
        own = f"{want[0]} {want[1]}" if want else "a length its config does not set"
        raise ConfigError(f"{path}: every finished run reached {theirs[0]} {theirs[1]}, where {other}'s runs end "
                          f"({preset}'s: {own}): these are {other}'s runs; judge the table as {other}")  # fmt: skip
    check_run_length(preset, rows, path)


def check_pilot_seeds(rules: Rules, rows: Sequence[dict], path: str) -> None:
    """A table judged as a pilot (``--pilot``) holds no seed of the rules' confirmatory blocks:
    confirmatory runs read as a pilot would size a plan from the evidence and judge nothing."""
    for name, block in rules.seeds.items():
        if strays := sorted({r["seed"] for r in rows if r["seed"] in block}):
            pilots = ", ".join(map(str, getattr(rules, "pilot_seeds", ()))) or "none named"
            raise ConfigError(f"{path}: seeds {strays} are in the rules' {name} confirmatory seed block, so these are "
                              f"confirmatory runs, not a pilot's (the pilot's seeds: {pilots}); judge them without "
                              "--pilot")  # fmt: skip


def check_run_length(preset: str, rows: Sequence[dict], path: str) -> None:
    """A one-line `ConfigError` for a run the table says finished short of ``preset``'s length
    (`run_length`): a finished run trained every step (a run stopped early is not finished)."""
    want = run_length(preset)
    if want is None:
        return
    column, length = want
    for i, row in enumerate(rows):
        reached = row.get(column)
        if row["status"] == "finished" and isinstance(reached, (int, float)) and reached != length:
            raise ConfigError(f"{path}: row {i + 1} ({row['source']}) has status 'finished' but {column} {reached}, "
                              f"where {preset}'s runs end at {length}: a run that stopped early did not finish; "
                              "write the table again (normbench-figures --runs)")  # fmt: skip


def check_fresh(preset: str, rows: Sequence[dict], out: Path) -> None:
    """A confirmatory table's seeds: none an earlier attempt in ``out`` used (its HISTORY.md, the
    pilot, an earlier per_run.csv; the runs judged now, by source and commit, aside):
    `check_fresh_seeds`, as ``--runs`` and ``--per-run`` both judge."""
    rules = load_rules(preset)
    if rules is None or not rows:
        return
    earlier = earlier_seeds(out, [str(r["source"]) for r in rows], str(rows[0].get("commit") or ""))
    check_fresh_seeds(rules, earlier, rows)


def from_per_run(preset: str, path: str, out: Path, pilot: bool = False) -> list[Claim]:
    """``claims.csv`` / ``claims.md`` judged from a ``per_run.csv`` alone, into ``out``: refused when
    the table is the runs of the preset's other variant (`check_table_scale`) or a confirmatory
    table reuses an earlier attempt's seeds (`check_fresh`)."""
    rows = read_per_run(path, preset)
    check_table_scale(preset, rows, path, pilot)
    if not pilot:
        if (rules := load_rules(preset)) is not None:
            vouch_whole(rows, rules, preset, path)
        check_fresh(preset, rows, out)
    claims = judge_rows(preset, rows, pilot)
    out.mkdir(parents=True, exist_ok=True)
    for written in [*write_preset_forest(preset, [csv_row(c) for c in claims], out), *write_claims(claims, out)]:
        print(f"[figures] wrote {written}")
    write_presented_claims(preset, out)
    print(
        f"[figures] judged from {path} alone: the claims and the forest plot; no paper figures "
        "(they need the runs themselves: --runs or --wandb)"
    )
    return claims


def from_runs(args: argparse.Namespace, out: Path) -> tuple[list[Claim], list[str]]:
    """Figures, ``per_run.csv``, ``claims.csv`` / ``claims.md`` and ``runs.csv`` from the runs; returns
    the claims and the figures' readability problems (``<figure>: <problem>``)."""
    if args.runs:
        runs = load_local_runs(args.runs, needs=("norm",))
    else:
        job_type = args.job_type or (None if args.group else args.preset)
        runs = load_wandb_runs(args.wandb, args.group, job_type=job_type, keys=figure_keys(args.preset))
    check_rules(args.preset, runs)
    check_provenance(runs, out)
    usable = usable_runs(args.preset, runs)
    rows = per_run_rows(args.preset, usable)
    if rows:  # what --per-run would refuse is refused here, before anything is written
        where = f"the per-run values of {args.runs[0] if args.runs else args.wandb}"
        vouch_rows(rows, where)
        if (rules := load_rules(args.preset)) is not None:
            vouch_table(rows, list(rows[0]), rules, args.preset, where)
            if not args.pilot:  # a run left out (killed, no metrics): its arm short of a seed
                vouch_whole(rows, rules, args.preset, where)
    if args.pilot and (rules := load_rules(args.preset)) is not None:
        check_pilot_seeds(rules, rows, args.runs[0] if args.runs else str(args.wandb))
    if not args.pilot:  # a confirmatory attempt's seeds: none an earlier attempt used
        check_fresh(args.preset, rows, out)
    claims = judge_rows(args.preset, rows, args.pilot)
    results = make_figures(args.preset, usable, claims)
    out.mkdir(parents=True, exist_ok=True)
    forest = write_preset_forest(args.preset, [csv_row(c) for c in claims], out)  # first: what verdicts rest on
    outputs = [*forest, *write_outputs(results, out, claims), write_per_run(rows, out / "per_run.csv")]
    outputs += [p for p in [stamp_digest(out)] if p is not None]  # the table as the runs gave it (index --check)
    if (out / "claims.csv").is_file():
        write_presented_claims(args.preset, out)
    for path in [*outputs, write_runs_table(runs, out / "runs.csv")]:
        print(f"[figures] wrote {path}")
    total = sum(float(r.summary.get("wall_time_s") or 0.0) for r in runs)
    used = f"{len(usable)} runs" if len(usable) == len(runs) else f"{len(usable)} runs used of {len(runs)} read"
    print(f"[figures] {used}, {total:.0f} s of run wall time in all")
    if args.log_to_wandb is not None:
        target = args.log_to_wandb or args.wandb
        run_id = log_to_wandb(results, out, target, args.group, args.preset)
        print(f"[figures] logged to W&B run {run_id}")
    return claims, [f"{res.name}: {problem}" for res in results for problem in res.problems]


def is_own_sweep(preset: str | None) -> bool:
    """No preset, or an experiment config (``conf/experiment/<preset>.yaml``) without figures or rules:
    the runs are analysed as any sweep (`normbench.analysis.dashboards.sweep_report`); a name that is neither
    stays an unknown preset."""
    if preset is None:
        return True
    from normbench.analysis.dashboards.dashboard import conf_dir

    known = base_preset(preset) in FIGURES or base_preset(preset) in DRAWN_ELSEWHERE
    return not known and (conf_dir() / "experiment" / f"{preset}.yaml").is_file()


def sweep_main(args: argparse.Namespace) -> int:
    """``normbench-figures [preset] --runs SWEEP`` for a sweep of no paper preset: its swept keys'
    curves and final values with intervals over seeds, into ``--out`` (default ``<SWEEP>/figures``)."""
    from normbench.analysis.dashboards.sweep_report import sweep_figures

    try:
        if not args.runs:
            raise ConfigError("a sweep without a preset is read from its folder: --runs SWEEP")
        out = Path(args.out or Path(args.runs[0]) / "figures")
        check_out(out)
        for path in sweep_figures(load_local_runs(args.runs, unfinished=True), out):
            print(f"[figures] wrote {path}")
    except ConfigError as e:
        print(f"normbench-figures: error: {e}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if is_own_sweep(args.preset):
        return sweep_main(args)
    out = Path(args.out or Path("results") / args.preset / ("pilot" if args.pilot else ""))
    try:
        if not ((args.forest_only or args.per_run) and base_preset(args.preset) in DRAWN_ELSEWHERE):
            figure_fn(args.preset)  # the leaderboard's forest and claims are redrawn from its folder too
        figure_formats()  # a bad NORMBENCH_FIGURE_FORMATS: one line before anything is written
        check_out(out)
        if args.log_to_wandb is not None and not (args.log_to_wandb or args.wandb):
            raise ConfigError("--log-to-wandb needs ENTITY/PROJECT (or --wandb)")
        if args.per_run and args.log_to_wandb is not None:
            raise ConfigError("--log-to-wandb logs figures; --per-run draws none: leave one out")
        if args.forest_only:
            for path in forest_only(args.preset, out):
                print(f"[figures] wrote {path}")
            return 0
        if args.per_run:
            claims, problems = from_per_run(args.preset, args.per_run, out, args.pilot), []
        else:
            claims, problems = from_runs(args, out)
    except ConfigError as e:
        print(f"normbench-figures: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the disk refused a write the checks could not foresee (full, gone read-only)
        print(f"normbench-figures: error: {one_line_os_error(e)}", file=sys.stderr)
        return 1 if is_environment_error(e) else 2
    print(claims_markdown(claims))
    return report_problems(problems)


def report_problems(problems: Sequence[str]) -> int:
    """One line on stderr per readability problem of a written figure (`check_figure`, as
    ``<figure>: <problem>``); 1 when there is any (everything is written first: the claims stand,
    the figure is to be fixed), else 0."""
    for line in problems:
        print(f"normbench-figures: error: figure {line}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
