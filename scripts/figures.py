"""Draw a preset's paper figure(s) from its runs, with the CSV of the plotted numbers and the
claims table.

    python scripts/figures.py santurkar_vgg_cpu --runs outputs/multirun/2026-11-29_15-00-00
    python scripts/figures.py powernorm_mt --wandb my-entity/normbench   # W&B group = preset

Writes ``<out>/<figure>.png``, ``.pdf``, ``.csv`` and ``<out>/claims.csv``, ``claims.md``
(default ``<out>``: ``results/<preset>``).
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from normbench.analysis import figure_fn, load_local_runs, load_wandb_runs, make_figures, write_outputs  # noqa: E402
from normbench.analysis.claims import claims_markdown  # noqa: E402
from normbench.analysis.runs import Run  # noqa: E402
from normbench.errors import ConfigError  # noqa: E402


def write_runs_table(runs: list[Run], path: Path) -> Path:
    """One row per run: where it came from, its overrides, status, wall time and seed."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["source", "overrides", "status", "seed", "steps", "wall_time_s"])
        for r in runs:
            writer.writerow(
                [r.source, " ".join(r.overrides), r.status, r.seed, r.final_step, r.summary.get("wall_time_s")]
            )
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("preset", help="experiment preset, e.g. santurkar_vgg or santurkar_vgg_cpu")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--runs", nargs="+", metavar="DIR", help="multirun directories (each job: metrics.jsonl ...)")
    source.add_argument("--wandb", metavar="ENTITY/PROJECT", help="read the runs from W&B")
    parser.add_argument("--group", help="W&B group (default: the preset's name)")
    parser.add_argument("--out", help="output folder (default: results/<preset>)")
    args = parser.parse_args(argv)
    try:
        figure_fn(args.preset)
        runs = load_local_runs(args.runs) if args.runs else load_wandb_runs(args.wandb, args.group or args.preset)
        results = make_figures(args.preset, runs)
    except ConfigError as e:
        print(f"figures: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out or Path("results") / args.preset)
    for path in [*write_outputs(results, out), write_runs_table(runs, out / "runs.csv")]:
        print(f"[figures] wrote {path}")
    total = sum(float(r.summary.get("wall_time_s") or 0.0) for r in runs)
    print(f"[figures] {len(runs)} runs, {total:.0f} s of run wall time in all")
    print(claims_markdown([c for r in results for c in r.claims]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
