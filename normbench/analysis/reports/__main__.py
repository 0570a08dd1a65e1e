"""``python -m normbench.analysis.reports <command> ...``: the same as ``normbench-reports``."""

import sys

from normbench.analysis.reports.cli import main

sys.exit(main())
