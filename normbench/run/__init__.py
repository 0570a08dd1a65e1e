"""The run wing: one training run from its set-up to its summary.

- `loop/`: the runner (`train.run` → parse → setup → fit → finish), its state (`state.Run`), how a run
  starts over, continues or ends (`policy`), the stop signals (`interrupts`) and the checks made
  before any data is read (`validate`);
- `resume/`: checkpoints, their verified files and the random streams;
- `records/`: the run directory (one writer, what a refused run may remove) and the run's segments;
- `divergence`: when a run has diverged (a result, not a crash).

Device, precision, compile and data parallelism live below the wing, in `normbench.placement`
(the runner holds one `Placement`).
"""
