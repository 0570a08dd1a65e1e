"""``normbench-leaderboard``: runs read from sweep folders or a W&B group, then the leaderboard of
`normbench.analysis.leaderboard.leaderboard` as Markdown, CSV and one figure (each norm's score with its 95 %
t-interval; against relative throughput only when the runs recorded a quiet machine:
`normbench.analysis.leaderboard.leaderboard_figure`), optionally logged to W&B as a table and an image in a
summary run of the group.

    normbench-leaderboard outputs/multirun/leaderboard_cpu --out results/leaderboard_cpu
    normbench-leaderboard --wandb ENTITY/PROJECT --group sweep-2026-11-30_12-00-00 --log-to-wandb
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

from normbench.analysis.figures.figure_checks import check_figure
from normbench.analysis.leaderboard.leaderboard import (
    CONFIDENCE,
    HEADLINES,
    IMAGES,
    NA,
    REFERENCE,
    TAIL,
    THROUGHPUT,
    Row,
    headline_key,
    leaderboard,
)
from normbench.analysis.leaderboard.leaderboard_figure import figure
from normbench.analysis.leaderboard.leaderboard_setup import what_ran
from normbench.analysis.leaderboard.leaderboard_verdicts import apply_rules, preset_of, write_judged
from normbench.analysis.loading.provenance import check_provenance
from normbench.analysis.loading.runs import Run, load_local_runs, load_wandb_runs
from normbench.base.errors import ConfigError, is_environment_error, one_line_os_error
from normbench.base.output import check_out_dir

PROG = "normbench-leaderboard"
STEM = "leaderboard"
CSV_COLUMNS = (
    "model", "dataset", "task", "norm", "normalizes_over", "verdict", "metric", "n", "seeds", "mean", "ci_lo",
    "ci_hi", "train_loss", "throughput_key", "throughput", "reference", "relative_throughput", "diverged", "failed",
    "runs", "reason",
    *(h.column for h in HEADLINES),
)  # fmt: skip


CELL_KEYS = ("norm", "model", "dataset")
"""What a run's config must name to have a place on the leaderboard."""


def load_runs(paths: Iterable[str | Path]) -> list[Run]:
    """Every job under the given folders, jobs refused or killed before training included (as
    failed runs): `normbench.analysis.loading.runs.load_local_runs`, which names what it does not use and
    refuses a folder with no usable run and a run read twice, in one line each."""
    return load_local_runs(paths, unfinished=True, needs=CELL_KEYS)


def check_finished(runs: Sequence[Run], sources: Sequence[str]) -> None:
    """`ConfigError` when not one run finished (every job crashed, was refused or diverged): a
    leaderboard of such runs scores nothing, so none is written (its empty figure was written,
    then refused)."""
    if any(r.status == "finished" for r in runs):
        return
    counts = Counter(r.status for r in runs)
    ended = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    raise ConfigError(
        f"no run of {', '.join(sources)} finished ({ended}); a leaderboard scores finished runs, so nothing was "
        "written; each run's summary.json (and traceback.txt) says why it stopped"
    )


def wanted_keys(summary_keys: Collection[str]) -> list[str]:
    """The history keys the leaderboard reads from a run that logged ``summary_keys``."""
    keys = [k for k in THROUGHPUT.values() if k in summary_keys]
    keys += [k for h in HEADLINES if (k := headline_key(summary_keys, h)) is not None]
    return keys


def load_wandb(path: str, group: str | None, job_type: str | None = None, api: Any = None) -> list[Run]:
    """The training runs of W&B project ``path`` in ``group`` (one sweep) and/or ``job_type`` (the
    preset: every sweep of it, e.g. the two sweeps of a leaderboard preset), with the history of
    only the keys in `wanted_keys` (`normbench.analysis.loading.runs.load_wandb_runs`). Jobs refused before
    ``wandb.init`` have no W&B run: only the rules show them."""
    return [r for r in load_wandb_runs(path, group, job_type, keys=wanted_keys, api=api) if "norm" in r.config]


def _f(v: float, digits: int = 4) -> str:
    return f"{v:.{digits}g}" if math.isfinite(v) else ""


def csv_rows(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """One dict per row, every number at full precision (``""`` where there is none)."""
    out = []
    for r in rows:
        d: dict[str, Any] = {
            "model": r.model, "dataset": r.dataset, "task": r.task, "norm": r.norm, "normalizes_over": r.over,
            "verdict": r.verdict, "metric": r.metric, "n": r.score.n, "seeds": " ".join(map(str, r.seeds)),
            "mean": r.score.mean,
            "ci_lo": r.score.lo, "ci_hi": r.score.hi, "train_loss": r.train_loss,
            "throughput_key": THROUGHPUT[r.task], "throughput": r.throughput, "reference": REFERENCE[r.task],
            "relative_throughput": r.relative_throughput, "diverged": r.diverged, "failed": r.failed,
            "runs": r.runs, "reason": r.reason,
        }  # fmt: skip
        d.update({h.column: r.headlines.get(h.column, math.nan) for h in HEADLINES})
        out.append({k: ("" if isinstance(v, float) and math.isnan(v) else v) for k, v in d.items()})
    return out


def _score(r: Row) -> str:
    scale, unit = (100.0, " %") if r.task == IMAGES else (1.0, "")
    s = r.score
    if s.n == 0:
        return ""
    if not (math.isfinite(s.lo) and math.isfinite(s.hi)):
        return f"{s.mean * scale:.2f}{unit} (n = {s.n}: too few seeds for an interval)"
    return f"{s.mean * scale:.2f}{unit} [{s.lo * scale:.2f}, {s.hi * scale:.2f}]"


def _note(r: Row) -> str:
    parts = [r.reason] if r.reason else []
    if r.verdict == NA and r.runs:
        return "; ".join([*parts, f"{r.runs} run(s) not counted"]).replace("|", "/")
    if r.diverged and not r.reason:
        parts.append(f"{r.diverged} of {r.runs} runs diverged")
    if r.failed and r.verdict != NA:
        parts.append(f"{r.failed} of {r.runs} runs failed")
    return "; ".join(parts).replace("|", "/")


def markdown(rows: Sequence[Row], sources: Sequence[str], runs: Sequence[Run], tail: float = TAIL) -> str:
    """The leaderboard as Markdown: how to read it, then one table per model and data set."""
    commits = sorted({str(r.summary.get("git_commit")) for r in runs if r.summary.get("git_commit")})
    wall = sum(float(r.summary.get("wall_time_s") or 0.0) for r in runs)
    lines = [
        "# Norm leaderboard",
        "",
        f"Runs read: {len(runs)} from {', '.join(f'`{s}`' for s in sources)}; commits: "
        f"{', '.join(f'`{c}`' for c in commits) or 'unknown'}; sum of the runs' wall times: {wall / 60:.1f} min.",
        "",
        f"Score: mean over the finished seeds and its {CONFIDENCE:.0%} Student-t interval (mean ± t·s/√n, "
        "n = finished seeds with a value); rows by mean score. Verdict: the row's claim in the leaderboard's "
        "rules (`normbench/rules/leaderboard.yaml`: each norm against its cell's reference, two-sided Welch "
        "interval for the difference, Holm within the cell; `claims.md` beside this file): **different** (the "
        "interval excludes 0, either side), **inconclusive**, **reference**, or **not judged** (too few seeds, "
        "a failed setup check, no rule for the row, or a sweep of no preset with rules). "
        "Diverged runs are counted, not averaged. "
        "Throughput: each run's median over epochs, mean over runs, and relative to the reference norm "
        f"(images: {REFERENCE['images']}, translation: {REFERENCE['translation']}). Diagnostics: each run's mean "
        f"over the last {tail:.0%} of its steps, mean over runs. **n/a**: the norm cannot run in this cell "
        "(the reason says why); **not run**: the sweep did not run it here.",
        "",
        "Diagnostic columns: " + "; ".join(f"`{h.column}` = {h.meaning}" for h in HEADLINES) + ".",
        "",
        "Translation: a norm whose statistics mix time steps runs in the encoder only, with an LN "
        "decoder (`pn (enc) / ln (dec)`, PowerNorm's own comparison); the causal ones run in both stacks. "
        "**normalizes over**: the axes of one normalization in the cell's layout, as each norm declares it.",
        "",
        *what_ran(runs),
    ]
    cells = list(dict.fromkeys((r.model, r.dataset) for r in rows))
    for model, dataset in cells:
        cell = [r for r in rows if (r.model, r.dataset) == (model, dataset)]
        task, metric = cell[0].task, cell[0].metric
        unit = "samples/s" if task == IMAGES else "tokens/s"
        shown = [h for h in HEADLINES if any(h.column in r.headlines for r in cell)]
        header = [
            "norm", "normalizes over", f"{metric} (95 % CI)", "n", "verdict", "train loss", unit,
            f"× {REFERENCE[task]}", "diverged", *(h.column for h in shown), "note",
        ]  # fmt: skip
        lines += ["", f"## {model} on {dataset}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for r in cell:
            counted = r.runs and r.verdict != NA
            values = [
                r.norm, r.over, _score(r), str(r.score.n) if counted else "", r.verdict, _f(r.train_loss),
                _f(r.throughput, 5), _f(r.relative_throughput, 3), str(r.diverged) if counted else "",
                *(_f(r.headlines.get(h.column, math.nan)) for h in shown), _note(r),
            ]  # fmt: skip
            lines.append("| " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


def write(
    rows: Sequence[Row], out: Path, sources: Sequence[str], runs: Sequence[Run], tail: float
) -> tuple[list[Path], list[str]]:
    """``leaderboard.md``, ``leaderboard.csv``, ``leaderboard.png`` / ``.pdf`` under ``out``; returns
    the paths and the figure's readability problems (`check_figure`), each also printed on stderr."""
    import matplotlib.pyplot as plt

    from normbench.analysis.figures.plot import figure_formats

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{STEM}.md", out / f"{STEM}.csv", *(out / f"{STEM}.{ext}" for ext in figure_formats())]
    paths[0].write_text(markdown(rows, sources, runs, tail))
    with open(paths[1], "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(csv_rows(rows))
    fig = figure(rows, runs)
    fig.tight_layout()
    problems = check_figure(fig)
    for path in paths[2:]:
        fig.savefig(path, dpi=150)
    plt.close(fig)
    for problem in problems:  # one line each; the exit status says so (`main`)
        print(f"{PROG}: error: figure {STEM}: {problem}", file=sys.stderr)
    return paths, problems


def _cell(v: Any) -> Any:
    """A table cell: numbers stay numbers; a missing or infinite one is None (JSON has neither)."""
    if v == "" or (isinstance(v, float) and not math.isfinite(v)):
        return None
    return v


def log_to_wandb(
    rows: Sequence[Row], png: Path, project: str | None, entity: str | None, group: str, out: Path, mode: str
) -> str:
    """A summary run (``job_type=leaderboard-summary``) in ``group`` with ``leaderboard/table`` (a
    ``wandb.Table`` of the CSV's columns) and ``leaderboard/figure`` (``wandb.Image``). Returns
    the run's id."""
    import wandb

    run = wandb.init(
        project=project or "normbench", entity=entity, group=group, job_type="leaderboard-summary",
        name=f"leaderboard-{group}", dir=str(out), mode=mode, config={"source_group": group},
    )  # fmt: skip
    try:
        data = [[_cell(row[c]) for c in CSV_COLUMNS] for row in csv_rows(rows)]
        table = wandb.Table(columns=list(CSV_COLUMNS), data=data)
        run.log({"leaderboard/table": table, "leaderboard/figure": wandb.Image(str(png))})
        return str(run.id)
    finally:
        run.finish()


def _local_group(runs: Sequence[Run], sources: Sequence[str]) -> str:
    """The runs' ``logger.group`` when they share one, else the sweep's own group name."""
    groups = {r.record.logger.group for r in runs}
    if len(groups) == 1 and None not in groups:
        return str(groups.pop())
    return f"sweep-{Path(sources[0]).name}"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog=PROG, description="The norm leaderboard from local sweep folders or a W&B group.")
    p.add_argument("runs", nargs="*", help="sweep (or job) folders, e.g. outputs/multirun/<date_time>")
    p.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read the runs of a W&B group instead")
    p.add_argument(
        "--group", help="the W&B group: one sweep (with --wandb; with --log-to-wandb, the summary run's group)"
    )
    p.add_argument(
        "--job-type",
        help="with --wandb: every run of this job type (the preset, e.g. leaderboard_cpu: both of its sweeps)",
    )
    p.add_argument("--out", help="output folder (default: <first runs folder>/leaderboard, or ./leaderboard-<group>)")
    p.add_argument(
        "--preset",
        help="the preset whose rules judge the rows (default: the one the runs recorded, e.g. leaderboard_cpu)",
    )
    p.add_argument("--tail", type=float, default=TAIL, help="end of training: this last fraction of the steps")
    p.add_argument(
        "--pilot",
        action="store_true",
        help="the runs are the rules' pilot runs (their seeds are the rules' pilot seeds): "
        "judged for planning only (normbench-plan reads their per_run.csv)",
    )
    p.add_argument("--log-to-wandb", action="store_true", help="also log the table and figure to W&B")
    return p.parse_args(argv)


def check_preset(preset: str) -> None:
    """``--preset`` names a preset whose rules judge the rows; one that has none (a typo, a sweep of
    no rules) would write the leaderboard without a verdict, silently: a one-line `ConfigError`."""
    from normbench.analysis.judging.rules_schema import load_rules
    from normbench.base.layout import conf_dir

    if load_rules(preset) is None:
        conf = conf_dir()
        known = sorted(p.stem for p in (conf / "experiment").glob("*.yaml")) if conf is not None else []
        valid = ", ".join(p for p in known if load_rules(p) is not None)
        raise ConfigError(f"--preset {preset!r} has no rules to judge the rows by; valid choices: {valid}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if bool(args.runs) == bool(args.wandb):
            raise ConfigError("pass sweep folders or --wandb ENTITY/PROJECT --group GROUP (one of the two)")
        if not 0 < args.tail <= 1:
            raise ConfigError(f"--tail={args.tail} must be in (0, 1]")
        if args.preset is not None:
            check_preset(args.preset)
        from normbench.analysis.figures.plot import figure_formats

        figure_formats()  # a bad NORMBENCH_FIGURE_FORMATS: one line before anything is written
        if args.wandb:
            if not (args.group or args.job_type) or args.wandb.count("/") != 1:
                raise ConfigError("--wandb takes ENTITY/PROJECT and needs --group GROUP or --job-type PRESET")
            try:
                runs = load_wandb(args.wandb, args.group, args.job_type)
            except ConfigError:
                raise
            except Exception as e:  # no network, no API key, no such project: one line, not a traceback
                first = (str(e).splitlines() or [""])[0]
                raise ConfigError(f"reading W&B {args.wandb} failed: {type(e).__name__}: {first}") from None
            selection = args.group or args.job_type
            sources = [f"wandb:{args.wandb}/{selection}"]
            out = Path(args.out or f"leaderboard-{selection}")
        else:
            runs, sources = load_runs(args.runs), list(args.runs)
            out = Path(args.out or Path(args.runs[0]) / "leaderboard")
        check_finished(runs, sources)
        check_out_dir(out, "the leaderboard")
        check_provenance(runs, out)  # results/: one commit, a tree that differed only under results/
        rows = leaderboard(runs, args.tail)
        preset = args.preset or preset_of(runs)
        claims, table = apply_rules(rows, runs, preset, args.pilot)
        paths, problems = write(rows, out, sources, runs, args.tail)
        if claims and preset:
            paths += write_judged(preset, claims, table, out)
        if args.log_to_wandb:
            # reading from W&B: log online beside the runs; local runs: as their sinks do (offline)
            if args.wandb:
                (entity, project), default_mode = args.wandb.split("/"), "online"
            else:
                logger, default_mode = runs[0].record.logger, "offline"
                entity, project = logger.entity, logger.project
            group = args.group or _local_group(runs, sources)
            mode = os.environ.get("WANDB_MODE") or default_mode
            run_id = log_to_wandb(rows, paths[2], project, entity, group, out, mode)
            print(f"[{PROG}] logged to W&B run {run_id} (group {group})")
    except ConfigError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the disk refused a write the checks could not foresee (full, gone read-only)
        print(f"{PROG}: error: {one_line_os_error(e)}", file=sys.stderr)
        return 1 if is_environment_error(e) else 2
    print(paths[0].read_text())
    print(f"[{PROG}] wrote {', '.join(str(p) for p in paths)}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
