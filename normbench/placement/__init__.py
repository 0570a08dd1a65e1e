"""Where a run runs: device, precision and compile (`hardware`); data parallelism over processes
(`distributed`); `placement.Placement`, the one object the runner asks about both, made once from
``config.hardware``."""
