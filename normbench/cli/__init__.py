"""The Hydra/CLI boundary: the `normbench` command (`main`), its `--help` (`help`), the command line
checked against conf/ (`overrides`), Hydra callbacks and the sweep's lock, plan and summary.
"""
