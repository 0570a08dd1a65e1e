"""Reading results into claims, figures, dashboards, the leaderboard and the findings pages.

Rooms by concern, each importing only the rooms below it (ARCHITECTURE.md's table):
``loading`` (runs and their records) < ``judging`` (the rules, per-run values, statistics,
verdicts, power and plans) < ``wording`` (units, numbers and claims as text; display names)
< ``dashboards`` (the W&B dashboard, a sweep's report) < ``figures`` (the papers' figures,
``normbench-figures``) < ``leaderboard`` (``normbench-leaderboard``) < ``findings`` (the
findings page's tables, the committed claims re-judged) < ``reports`` (``normbench-reports``).

Importing any of them imports `normbench.analysis.figures`, whose modules register the measures and
the code figures that the claims and the figures look up by name.
"""

from __future__ import annotations

from normbench.analysis import figures  # noqa: F401  (registers the measures and the code figures)
