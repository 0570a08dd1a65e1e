"""``normbench-reports``: one command for the pages normbench writes about its own evidence.

    normbench-reports index [--check]                                  # results/README.md, forests, claims.md
    normbench-reports history FOLDER [--planned] --changed "what and why"   # an attempt in HISTORY.md
    normbench-reports reliability [--run] [--check RELIABILITY.md]     # the fault table, from the tests
    normbench-reports invariances [--write FILE | --check FILE]        # INVARIANCES.md, measured

Each subcommand is its module's ``main`` (`normbench.analysis.reports.<name>`), with the same
options and exit codes; ``normbench-reports <name> --help`` lists them.
"""

from __future__ import annotations

import importlib
import sys

PROG = "normbench-reports"
COMMANDS = {
    "index": "rebuild (or --check) the findings page, the forests and every claims.md",
    "history": "append an attempt (or --planned, a planned one) to a results folder's HISTORY.md",
    "reliability": "the fault table of RELIABILITY.md, collected from the tests (--run, --check FILE)",
    "invariances": "INVARIANCES.md, measured (--write FILE, --check FILE)",
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"usage: {PROG} {{{','.join(COMMANDS)}}} [options]", "",
             "The pages normbench writes about its own evidence.", "", "commands:"]  # fmt: skip
    lines += [f"  {name:<{width}}  {text}" for name, text in COMMANDS.items()]
    return "\n".join([*lines, "", f"{PROG} <command> --help lists a command's options."])


def main(argv: list[str] | None = None) -> int:
    """Run the subcommand named first in ``argv`` with the rest; exit 2 with one line on an unknown one."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["-h"], ["--help"]):
        print(usage())
        return 0
    if not argv:
        print(f"{PROG}: name a command: {', '.join(COMMANDS)} ({PROG} --help says what each does)", file=sys.stderr)
        return 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"{PROG}: unknown command {name!r}; valid: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module = importlib.import_module(f"normbench.analysis.reports.{name}")
    return module.main(rest, prog=f"{PROG} {name}")


if __name__ == "__main__":
    sys.exit(main())
