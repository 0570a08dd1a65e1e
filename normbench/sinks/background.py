"""`SerialWorker`: a sink's calls run in order on a thread of their own, so the training loop does
not wait on them.

W&B's ``run.log`` costs the calling thread ~0.5 ms of Python a row and then waits on W&B's own I/O
thread (`wandb.sdk.lib.asyncio_manager`): at a log row every 10 steps, ~50-150 µs a step of the
loop's host time (`scripts/bench_host.py`: diagnostics off with W&B against ``logger=local``). On
the worker the loop pays a queue put instead. The calls keep their order (one thread, FIFO); the
queue is bounded, so a sink that falls behind slows the loop to its pace, as a direct call would;
an error is raised in the caller's thread at its next call (`submit`, `drain`), carrying the step it
failed at (``failed_step``), and the calls queued after it are skipped. Torch's ops release the
GIL while they run, so the worker's Python runs beside the step's kernels.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

_STOP = object()


class SerialWorker:
    """Runs submitted calls one after another on a daemon thread named ``name``."""

    def __init__(self, name: str, max_pending: int = 256) -> None:
        self._queue: queue.Queue[Any] = queue.Queue(max_pending)
        self._error: BaseException | None = None  # raised once, in the caller's thread
        self._failed = False  # from the first error on, queued calls are skipped
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any, step: int | None = None) -> None:
        """Queue ``fn(*args)`` (``step``: the training step it is for, named if it fails). An
        earlier call's error is raised here first."""
        self._raise_error()
        if not self._thread.is_alive():
            raise RuntimeError(f"{self._thread.name} is closed")
        self._queue.put((fn, args, step))

    def drain(self) -> None:
        """Return when every queued call has run; raise the first error one of them raised."""
        self._queue.join()
        self._raise_error()

    def close(self) -> None:
        """Run what is queued, then stop the thread (errors are left to `drain`)."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    def _raise_error(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            raise error

    def _serve(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is _STOP:
                    return
                fn, args, step = item
                if not self._failed:  # after an error the rest is skipped: the caller drops the sink
                    fn(*args)
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                if step is not None:
                    e.failed_step = step  # type: ignore[attr-defined]
                self._error, self._failed = e, True
            finally:
                self._queue.task_done()
