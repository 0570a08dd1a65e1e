"""Rebuild ``results/README.md`` from what the reproduction runs left in ``results/``.

Each ``results/<preset>/`` holds ``claims.csv`` (written by ``normbench-figures``) and ``RUN.txt``
(written by ``scripts/reproduce_cpu.sh``: commit, start, wall clock, commands). This script lists
the presets with their commit and wall clock and gathers every claim with its verdict into one
table, so the index never disagrees with the folders. The leaderboard is linked first.

    python scripts/results_index.py            # writes results/README.md
    python scripts/results_index.py --check    # exit 1 if results/README.md is out of date
"""

from __future__ import annotations

import argparse
import csv
import re
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "results"

HEADER = """# Reproductions at CPU scale

**The benchmark: [the norm leaderboard at CPU scale](leaderboard_cpu/README.md)** (ResNet20 on the
CIFAR-10 subset, transformer_tiny on the de-en subset; every norm, 3 seeds, 95 % t-intervals).

What the papers' figures look like when their presets run at CPU scale on real data: the CIFAR-10
subset (`../shared/data/cifar10-subset`, 10,000 / 2,000 images) and, in place of IWSLT14, the
Multi30k de-en subset (`../shared/data/de-en-subset`) with `transformer_tiny`. Each folder has the
figure(s) (PNG, PDF), the CSV of every plotted number (median over seeds, min, max, n),
`claims.md`, `runs.csv`, `RUN.txt` (commit, commands, wall clock) and a README that maps the
paper's setting onto ours. Rebuild everything with `bash scripts/reproduce_cpu.sh` and this page
with `python scripts/results_index.py`.

Verdicts are computed by `normbench-figures` from the runs, on rules fixed in the presets before
the runs (`normbench/analysis/stats.py`): **holds** = medians over seeds ordered as claimed and
the seeds' ranges apart; **mixed** = medians ordered, ranges overlap; **not reproduced at this
scale** = not ordered as claimed, at a scale the preset declares far from the paper's;
**contradicted** = not ordered as claimed at the paper's scale. A diverged run counts in its arm.
"""


def read_run_txt(folder: Path) -> dict[str, str]:
    """``preset``, ``commit``, ``start``, ``wall`` and ``status`` from ``RUN.txt`` (missing: empty)."""
    path = folder / "RUN.txt"
    if not path.exists():
        return {}
    text = path.read_text()
    out = {}
    for key, pattern in (
        ("commit", r"^commit: (\S+)"),
        ("start", r"^start \(UTC\): ([^;]+);"),
        ("wall", r"wall clock: ([^(\n]+)"),
        ("status", r"^exit status: (\S+)"),
    ):
        m = re.search(pattern, text, re.M)
        out[key] = m.group(1).strip() if m else ""
    return out


def build() -> str:
    presets = sorted(p for p in RESULTS.iterdir() if (p / "claims.csv").exists())
    lines = [HEADER, "## Runs", "", "| preset | commit | start (UTC) | wall clock | exit status |"]
    lines.append("|---|---|---|---|---|")
    total = 0
    for folder in presets:
        run = read_run_txt(folder)
        m = re.match(r"(\d+) min (\d+) s", run.get("wall", ""))
        total += int(m.group(1)) * 60 + int(m.group(2)) if m else 0
        lines.append(
            f"| [{folder.name}]({folder.name}/README.md) | {run.get('commit', '?')} | {run.get('start', '?')} "
            f"| {run.get('wall', '?')} | {run.get('status', '?')} |"
        )
    lines.append(f"| **all** | | | **{total // 60} min {total % 60} s** (one preset after another) | |")
    lines += ["", "## Claims", "", "| claim | paper | measured: median [min, max] over seeds | verdict | figure |"]
    lines.append("|---|---|---|---|---|")
    for folder in presets:
        with open(folder / "claims.csv", newline="") as f:
            for row in csv.DictReader(f):
                figure = f"[{row['figure']}]({folder.name}/{row['figure']}.png)"
                cells = [row["claim"], row["paper"], row["measured"], f"**{row['verdict']}**", figure]
                lines.append("| " + " | ".join(c.replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    lines += ["", "Speed of the norms themselves (eager and compiled, CPU): [bench/](bench/README.md).", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if results/README.md is out of date")
    args = parser.parse_args(argv)
    text = build()
    target = RESULTS / "README.md"
    if args.check:
        if target.read_text() != text:
            print(f"{target} is out of date: run python scripts/results_index.py", file=sys.stderr)
            return 1
        return 0
    target.write_text(text)
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
