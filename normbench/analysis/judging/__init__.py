"""Judging a preset's claims: its rules parsed (`rules_schema`, `rules_judging`, `figure_schema`), the
per-run values (`per_run`, `measures`, `evidence`), the statistics (`stats`), the verdicts (`verdicts`,
`claims`, `claims_csv`) and the sizing of a run (`power`, `plan`, `plan_inputs`, `plan_cli`: normbench-plan)."""
