"""The pages normbench writes about its own evidence, each rebuilt from committed files or from the
code and checked for staleness by the tests: the findings page and each results folder's
``claims.md`` and forest (`index`), each folder's attempt record ``HISTORY.md`` (`history`), the
fault table of ``RELIABILITY.md`` (`reliability`) and ``INVARIANCES.md`` (`invariances`).

One command runs them: ``normbench-reports <index|history|reliability|invariances> [options]``
(`normbench.analysis.reports.cli`), or ``python -m normbench.analysis.reports.<name>``.
"""
