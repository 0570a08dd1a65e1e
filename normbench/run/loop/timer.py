"""The training clock: `StepTimer` (`normbench.run.loop.state.Run.timer`)."""

from __future__ import annotations

import time

import torch


class StepTimer:
    """Wall time of training steps only: paused around evaluation, diagnostics and checkpoints.

    ``total``: every training step of this segment, the first ones (torch.compile's compilation,
    the throughput warm-up) included — the run's training clock (`Run.train_time`). ``elapsed``:
    the steps started with ``counted=True`` only, since the throughput's last reset (tokens/s or
    samples/s divide by it). The device is synchronized where the timer starts and stops, never
    in between."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.elapsed = 0.0
        self.total = 0.0
        self._start: float | None = None
        self._counted = False

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def start(self, counted: bool = True) -> None:
        """Run the clock; from the first counted step on, the throughput's time runs too."""
        if self._start is not None and counted and not self._counted:
            self.stop()  # the warm-up ends: from here the throughput counts
        if self._start is None:
            self._sync()
            self._start = time.perf_counter()
            self._counted = counted

    def stop(self) -> None:
        if self._start is not None:
            self._sync()
            dt = time.perf_counter() - self._start
            self.total += dt
            if self._counted:
                self.elapsed += dt
            self._start = None

    @property
    def counting(self) -> bool:
        """Whether the throughput's time runs (the timer runs on a counted step)."""
        return self._start is not None and self._counted

    def lap(self) -> float:
        """Seconds since `start` (no sync: for progress display only)."""
        return time.perf_counter() - self._start if self._start is not None else 0.0

    @property
    def running(self) -> bool:
        return self._start is not None
