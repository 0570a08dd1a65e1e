"""The W&B dashboard of a preset (`dashboard`, `dashboard_report`, `dashboard_cli`: normbench-dashboard)
and a sweep's report (`sweep_report`)."""
