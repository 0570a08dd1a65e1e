"""Resuming a run: the run's `Checkpointer` (`checkpointer`: the resume policy, the random streams, save
and restore), what a checkpoint holds (`checkpoint`), its verified files (`files`), the random streams (`seeds`)."""
