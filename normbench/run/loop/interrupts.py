"""The signals that stop a run: SIGINT (Ctrl-C), SIGTERM (what SLURM sends before it kills a
job), SIGHUP (a closed terminal, a dropped SSH session) and SIGUSR1 / SIGUSR2 (what a cluster
sends ahead of a time limit or a preemption: SLURM's ``--signal``). `STOP_SIGNALS` is the one
list; every one of them is handled alike.

`Interrupts` turns the first signal into a stop at the next step boundary with a checkpoint of
that step (`normbench.resume.checkpointer.Checkpointer.request_stop`); `normbench.run.loop.train.run` holds it
around the whole run. What the run then writes (status ``interrupted``, W&B's exit code) is
`normbench.run.loop.train.finish`'s; the exit code 128 + signal, `normbench.cli.main`'s.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

from normbench.base.errors import RunInterrupted, signal_name
from normbench.base.output import warn
from normbench.resume.checkpointer import Checkpointer

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)
"""The signals a run stops at a step boundary on. Their default action ends the process with no
summary and no checkpoint; submitit's own handlers (SIGUSR2: requeue, SIGTERM) are left alone."""


class Interrupts:
    """The `STOP_SIGNALS` while a run is on.

    Until a checkpointer is attached (`attach`, once training starts) a signal stops the run at
    once (`RunInterrupted`). After that, the first signal asks for a checkpoint at the next step
    (`Checkpointer.request_stop`): the run stops at that step boundary with a checkpoint to resume
    from, its summary written with status ``interrupted``; a second signal stops it at once.
    Signals that come once the run is stopping are ignored, so that its summary gets written. A
    handler that other code installed (submitit's for SIGTERM, which requeues the job) is left
    as it is; handlers exist only in the main thread. Used as a context manager: the previous
    handlers come back on exit."""

    SIGNALS = STOP_SIGNALS

    def __init__(self) -> None:
        self.checkpointer: Checkpointer | None = None
        self.received: list[int] = []
        self.stopping = False
        """A signal has stopped the run at once; later ones are ignored."""
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                current = signal.getsignal(signum)
                if current in (signal.SIG_DFL, signal.default_int_handler):
                    self._previous[signum] = signal.signal(signum, self.handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def attach(self, checkpointer: Checkpointer) -> None:
        self.checkpointer = checkpointer

    def handle(self, signum: int, frame: Any) -> None:
        ckpt = self.checkpointer
        if self.stopping or (ckpt is not None and ckpt.stopped):
            return  # the run is already on its way out: let it write its summary
        self.received.append(signum)
        if ckpt is not None and ckpt.writing:  # raising inside torch.save would abort the process
            ckpt.request_stop(signum)  # the run stops as soon as this checkpoint is complete
            return
        if len(self.received) > 1 or ckpt is None or not ckpt.enabled:
            self.stopping = True
            raise RunInterrupted(signum)
        ckpt.request_stop(signum)
        name = signal_name(signum)
        warn(f"{name}: the run stops after this step, with a checkpoint to resume from ({name} again: at once)")
