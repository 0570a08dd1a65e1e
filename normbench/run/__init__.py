"""The run wing: the runner, one training run from its set-up to its summary.

- `loop/`: the runner (`train.run` → parse → setup → fit → finish), its state (`state.Run`), how a run
  starts over, continues or ends (`policy`), the stop signals (`interrupts`) and the checks made
  before any data is read (`validate`).

The rooms it uses sit below the wing, beside it: `normbench.placement` (device, precision, compile,
data parallelism: the runner holds one `Placement`), `normbench.resume` (checkpoints, their verified
files and the random streams: one `Checkpointer`), `normbench.records` (the run directory: one
writer, what a refused run may remove, the run's segments) and `normbench.divergence` (when a run
has diverged: a result, not a crash).
"""
