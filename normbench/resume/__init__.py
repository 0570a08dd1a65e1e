"""Resuming a run: checkpoints (`checkpoint`), their verified files (`files`) and the random streams (`seeds`)."""
