"""Logging and sinks: `metrics.jsonl` / `summary.json` (`files`), the W&B run (`wandb_run`,
`wandb_layout`) and the console progress display (`progress`).
"""
