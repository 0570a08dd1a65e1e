"""Two runs' ``metrics.jsonl`` equal row for row, timing keys aside (issue 61: the runner's host
work cut, its records unchanged).

    python scripts/same_metrics.py REFERENCE/metrics.jsonl NEW/metrics.jsonl

Every row must have the same keys and exactly the same values (floats compared as written, bit
for bit), except the keys that measure time: ``perf/*`` (train_s, samples_per_s, tokens_per_s,
diag_seconds, diag_share). Prints ``same: N rows`` (exit 0) or the first difference in one line
(exit 1); a missing or unreadable file is one line (exit 2).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

TIMING_PREFIX = "perf/"


def rows(path: Path) -> list[dict[str, Any]]:
    """The file's rows without their timing keys."""
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            out.append({k: v for k, v in json.loads(line).items() if not k.startswith(TIMING_PREFIX)})
    return out


def first_difference(reference: list[dict[str, Any]], new: list[dict[str, Any]]) -> str | None:
    """The first row (1-based) and key where the two differ, in words; None: the same."""
    for i, (a, b) in enumerate(zip(reference, new), start=1):
        if a.keys() != b.keys():
            return f"row {i}: keys differ (only in reference: {sorted(a.keys() - b.keys())}, only in new: {sorted(b.keys() - a.keys())})"  # noqa: E501
        for k in a:
            if a[k] != b[k] and not (a[k] != a[k] and b[k] != b[k]):  # NaN equals NaN here
                return f"row {i} (step {a.get('step')}): {k} = {a[k]!r} in reference, {b[k]!r} in new"
    if len(reference) != len(new):
        return f"{len(reference)} rows in reference, {len(new)} in new"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reference", type=Path)
    parser.add_argument("new", type=Path)
    args = parser.parse_args(argv)
    try:
        reference, new = rows(args.reference), rows(args.new)
    except (OSError, ValueError) as e:
        print(f"same_metrics: cannot read {getattr(e, 'filename', None) or 'a file'}: {e}", file=sys.stderr)
        return 2
    diff = first_difference(reference, new)
    if diff is not None:
        print(f"different: {diff}")
        return 1
    print(f"same: {len(new)} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
