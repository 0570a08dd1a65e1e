"""How long a bad override takes to be refused, against ``python -c "import torch"`` (issue 59, item 8).

A user's typo should cost no more than starting Python with torch: the target is a refusal within
1.5x the time of ``import torch`` alone. Each round runs ``python -c "import torch"``, then each
bad command in turn, then ``import torch`` again (A-B-...-A), so a case's ratio is its wall time
over the mean of the two ``import torch`` times around its round, free of the machine's drift
between rounds; ``ratio`` in the summary is the median over rounds. Every case must be refused
(exit 2, one line on stderr) or the script says so and exits 1. The load averages at the start and
the end are written with each row.

    python scripts/bench_refusal.py                       # results/bench/refusal_cpu.csv
    python scripts/bench_refusal.py --rounds 3 --out -    # print only
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_io import CsvRows, versions

REPO = Path(__file__).resolve().parents[1]
TARGET = 1.5
CASES = {
    "unknown norm": ["norm=bogus"],
    "lr not a number": ["lr=abc"],
    "a key the schema lacks": ["+bogus=1"],
    "ResNet depth not 6n+2": ["model=resnet20", "model.depth=7"],
    "unknown experiment": ["experiment=bogus"],
}
"""A bad override as a user types it → the arguments after ``normbench``."""
IMPORT_TORCH = [sys.executable, "-c", "import torch"]


def normbench(args: list[str]) -> list[str]:
    """The command line for ``normbench <args>`` in this interpreter (W&B offline, no folder kept)."""
    return [sys.executable, "-m", "normbench", *args, "logger=local"]


def timed(command: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    """The wall time of ``command`` in seconds, and its result."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120,
                          env={**os.environ, "WANDB_MODE": "offline"})  # fmt: skip
    return time.perf_counter() - start, done


def one_round(rows: CsvRows, index: int, load: str) -> list[dict]:
    """``import torch``, each case, ``import torch``; one row per case."""
    before, _ = timed(IMPORT_TORCH)
    measured = [(name, *timed(normbench(args))) for name, args in CASES.items()]
    after, _ = timed(IMPORT_TORCH)
    base = (before + after) / 2
    return [rows.write({"case": name, "command": "normbench " + " ".join(CASES[name]), "round": index,
                        "import_torch_s": round(base, 3), "refusal_s": round(seconds, 3),
                        "ratio": round(seconds / base, 3), "exit": done.returncode,
                        "stderr_lines": len(done.stderr.strip().splitlines()), "load_start": load})
            for name, seconds, done in measured]  # fmt: skip


def summary(rows: list[dict]) -> list[str]:
    """One line per case: its median ratio over rounds, the range, and whether it was refused."""
    lines = []
    for name in CASES:
        mine = [r for r in rows if r["case"] == name]
        ratios = [r["ratio"] for r in mine]
        refused = all(r["exit"] == 2 and r["stderr_lines"] == 1 for r in mine)
        verdict = "within" if statistics.median(ratios) <= TARGET else "NOT within"
        lines.append(f"{name:<24} x{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f}) "
                     f"{verdict} x{TARGET}; {'refused in one line, exit 2' if refused else 'NOT refused in one line'}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(REPO / "results" / "bench" / "refusal_cpu.csv"),
                        help="the CSV to write ('-': none)")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: must be at least 1")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    rows = CsvRows(None if args.out == "-" else Path(args.out), versions("cpu"))
    measured = [row for i in range(args.rounds) for row in one_round(rows, i, load)]
    end = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average (1, 5, 15 min): {load} at the start, {end} at the end; {args.rounds} rounds")
    lines = summary(measured)
    print("\n".join(lines))
    return 0 if all("NOT refused" not in line for line in lines) else 1


if __name__ == "__main__":
    sys.exit(main())
