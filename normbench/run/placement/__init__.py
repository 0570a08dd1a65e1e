"""Where a run runs: device, precision and compile (`hardware`); data parallelism over processes (`distributed`)."""
