"""`SerialWorker` (a sink's calls on a thread of their own) and how `MetricLogger` treats a sink
whose row fails there: the order kept, the caller not waiting, the error raised in the caller's
thread with the step it failed at, the sink dropped with one warning and the run going on."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from normbench.run.loop.state import save_checkpoint
from normbench.sinks.background import SerialWorker
from normbench.sinks.files import LocalSink, MetricLogger
from tests.faults import fault


def test_calls_run_in_order_on_one_other_thread() -> None:
    worker, seen = SerialWorker("test-worker"), []
    for i in range(200):
        worker.submit(lambda i=i: seen.append((i, threading.current_thread().name)), step=i)
    worker.drain()
    assert [i for i, _ in seen] == list(range(200))
    assert {name for _, name in seen} == {"test-worker"}
    worker.close()


def test_the_caller_does_not_wait_for_a_slow_call() -> None:
    worker, release, done = SerialWorker("test-worker"), threading.Event(), []
    t0 = time.perf_counter()
    worker.submit(lambda: (release.wait(5), done.append(1)))
    submitted = time.perf_counter() - t0
    assert not done and submitted < 0.5  # the call is blocked on the event: the caller went on
    release.set()
    worker.drain()
    assert done == [1]
    worker.close()


def test_an_error_is_raised_at_the_next_call_with_its_step_and_later_calls_are_skipped() -> None:
    worker, seen = SerialWorker("test-worker"), []
    worker.submit(seen.append, 1, step=10)
    worker.submit(lambda: 1 / 0, step=20)
    worker.submit(seen.append, 3, step=30)  # queued behind the failing call: skipped
    with pytest.raises(ZeroDivisionError) as raised:
        worker.drain()
    assert raised.value.failed_step == 20 and seen == [1]
    worker.drain()  # raised once
    worker.close()


def test_a_full_queue_slows_the_caller_to_the_workers_pace() -> None:
    worker, release = SerialWorker("test-worker", max_pending=2), threading.Event()
    worker.submit(release.wait, 5)  # running
    worker.submit(lambda: None)
    worker.submit(lambda: None)  # the queue holds 2
    blocked = threading.Thread(target=worker.submit, args=(lambda: None,))
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive()  # a third pending call waits for room
    release.set()
    blocked.join(5)
    assert not blocked.is_alive()
    worker.drain()
    worker.close()


class WorkerSink:
    """A sink that logs on a `SerialWorker`, as `WandbSink` does; its row ``fail_at`` raises."""

    def __init__(self, fail_at: int) -> None:
        self.worker, self.fail_at, self.rows, self.finished = SerialWorker("test-sink"), fail_at, [], None

    def log(self, step: int, epoch: int, metrics: dict[str, Any]) -> None:
        self.worker.submit(self._log, step, dict(metrics), step=step)

    def _log(self, step: int, metrics: dict[str, Any]) -> None:
        if step == self.fail_at:
            raise ConnectionError("the service went away")
        self.rows.append(step)

    def flush(self) -> None:
        self.worker.drain()

    def finish(self, summary: dict[str, Any], exit_code: int = 0) -> None:
        self.worker.close()
        self.finished = exit_code


@fault("W&B failing while it logs a row, on its worker thread (issue 61: rows logged off the loop's thread)",
       "one warning naming the step the row failed at; W&B switched off; the run and metrics.jsonl go on",
       "result")  # fmt: skip
@pytest.mark.parametrize("fail_at", [20, 40], ids=["mid-run", "last-row"])
def test_a_row_failing_on_the_worker_drops_the_sink_once_naming_its_step(tmp_path: Path, capsys, fail_at: int) -> None:
    sink = WorkerSink(fail_at)
    logger = MetricLogger([LocalSink(tmp_path, {"seed": 0}, "seed: 0\n"), sink])
    for step in (10, 20, 30, 40):
        logger.log(step, 0, {"train/batch_loss": 1.0})
        sink.worker._queue.join()  # the row is done before the next: the error shows at the next call
    logger.finish({"status": "finished"})
    err = capsys.readouterr().err
    assert err.count("WorkerSink failed") == 1
    assert f"WorkerSink failed at step {fail_at} (ConnectionError: the service went away)" in err
    assert sink.rows == [s for s in (10, 20, 30, 40) if s < fail_at]
    assert sink.finished == 0  # a dropped sink still ends its run
    local = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(local) == 4  # the local record has every row


class FlushFailingSink(WorkerSink):
    """A sink whose flush at the run's end fails with an error that names no step."""

    def flush(self) -> None:
        raise OSError("disk gone")


def test_a_flush_failing_at_the_end_without_a_step_is_named_at_the_runs_end(tmp_path: Path, capsys) -> None:
    sink = FlushFailingSink(fail_at=-1)
    logger = MetricLogger([LocalSink(tmp_path, {"seed": 0}, "seed: 0\n"), sink])
    logger.log(10, 0, {"train/batch_loss": 1.0})
    logger.finish({"status": "finished"})
    err = capsys.readouterr().err
    assert "FlushFailingSink failed at the run's end (OSError: disk gone)" in err
    assert "step -1" not in err and sink.finished == 0


class CheckpointingSink(WorkerSink):
    """`WorkerSink` with W&B's `log_checkpoint`: the rows before it are flushed first, as `WandbSink`'s are."""

    def __init__(self, fail_at: int) -> None:
        super().__init__(fail_at)
        self.artifacts: list[int] = []

    def log_checkpoint(self, path: Path, step: int) -> None:
        self.flush()
        self.artifacts.append(step)


def test_a_row_failing_on_the_worker_before_a_checkpoint_drops_the_sink_there_naming_its_step(
    tmp_path: Path, capsys
) -> None:
    """The first call after the failed row is the checkpoint's artifact: the sink is dropped with
    `log`'s one warning, not the run failed (as when rows were logged on the loop's thread)."""
    sink = CheckpointingSink(fail_at=10)
    logger = MetricLogger([LocalSink(tmp_path, {"seed": 0}, "seed: 0\n"), sink])
    logger.log(10, 0, {"train/batch_loss": 1.0})
    run = SimpleNamespace(step=10, checkpointer=SimpleNamespace(save=lambda run, position: tmp_path / "ckpt.pt"),
                          sinks=SimpleNamespace(logger=logger, wandb=sink))  # fmt: skip
    save_checkpoint(run, 0, 1, None, {})
    err = capsys.readouterr().err
    assert err.count("CheckpointingSink failed at step 10 (ConnectionError: the service went away)") == 1
    assert sink not in logger.sinks
