"""Draw a preset's paper figure(s) from its runs: the same as the ``normbench-figures`` command
(`normbench.analysis.figures_cli`), for a checkout without the package installed.

    python scripts/figures.py santurkar_vgg_cpu --runs outputs/multirun/2026-11-29_15-00-00
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's normbench

from normbench.analysis.figures_cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
