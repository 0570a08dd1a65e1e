"""Host synchronisations in a CUDA training step, as torch's sync debug mode reports them.

``tests/test_host_syncs.py`` counts the syncs a training step makes on the CPU, at the ops that
force one there; what only a GPU shows (a copy from pageable memory, a ``torch.cuda``
synchronize, a kernel that waits for the host) is counted here. A ResNet20 training step
(``experiment=quickstart``) and a Transformer training step (``experiment=quickstart_mt``:
transformer_tiny on the synthetic translation corpus) run through the real runner
(``normbench.run.loop.train.run``, default diagnostics, eager) on CUDA under
``torch.cuda.set_sync_debug_mode("warn")``, which makes torch issue a ``UserWarning`` for every
synchronizing call. The run is one warm-up step (set-up transfers, the step timer's start and
the first-step diagnostics are left out), ``--steps`` counted steps and one last step (it logs and
ends the run: left out too). A step is counted from the moment the training loop asks for its
batch (the batch's making and upload) to the moment it asks for the next one (forward,
backward, optimizer, metrics, logging when due). Logging every 1000 steps keeps the logging
cadence out of the counted steps.

``results/bench/gpu_host_syncs.csv``: one row per (model, phase, warning message's first line,
site), with its count. ``phase`` is ``step`` (the counted steps) or ``outside`` (set-up, warm-up
step, last step, evaluation, summary); ``site`` is the innermost normbench frame on the stack
when the warning was issued (``at``: the Python line that made the call). A model whose counted
steps made no sync has one ``step`` row with count 0. The first row is a control: one
``x.sum().item()`` must be reported (otherwise the mode reports nothing here and the zeros mean
nothing: exit 1). A model whose run failed has a row with phase ``error``. Every row ends with
the versions of ``bench_io.VERSION_COLUMNS`` (gpu, driver, cuda, cudnn, torch).

    python scripts/sync_debug.py                  # needs CUDA; exits with status 2 without it

Exit status: 0 all ran, 1 a run failed or the control saw nothing, 2 no CUDA device.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import sys
import tempfile
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # this checkout's normbench, not an installed one

from bench_io import CsvRows, is_sync_warning, versions  # noqa: E402

MODELS = {
    "resnet20": [
        "experiment=quickstart",
        "dataset.num_train=2048",
        "dataset.num_test=256",
        "batch_size=128",
        "eval_batch_size=256",
    ],
    "transformer_tiny": ["experiment=quickstart_mt", "dataset.max_tokens=512", "dataset.eval_bleu=false"],
}
COMMON = [
    "hardware=cuda",
    "logger=local",
    "logger.progress_bar=false",
    "logger.log_every_n_steps=1000",
    "throughput_warmup_steps=0",  # the step timer starts (a synchronize) in the warm-up step
    "checkpoint.enabled=false",
]
WARMUP = 1
COLUMNS = ["model", "phase", "counted_steps", "message", "site", "at", "count"]


PACKAGE = f"{REPO / 'normbench'}{os.sep}"


def short(filename: str, lineno: int) -> str:
    """``file:line``, relative to this checkout (``normbench/run/loop/train.py:301``) or to site-packages."""
    if filename.startswith(f"{REPO}{os.sep}"):
        return f"{filename[len(str(REPO)) + 1 :]}:{lineno}"
    if "/site-packages/" in filename:
        return f"{filename.split('/site-packages/')[-1]}:{lineno}"
    return f"{filename}:{lineno}"


def normbench_frame() -> str:
    """The innermost frame of this checkout's normbench package on the stack, or ``?``."""
    for frame in reversed(traceback.extract_stack()):
        if frame.filename.startswith(PACKAGE):
            return short(frame.filename, frame.lineno or 0)
    return "?"


class SyncLog:
    """Sync warnings by (phase, first line, site, at): ``step`` while `counting`, else ``outside``.
    Other warnings go to the usual display."""

    def __init__(self) -> None:
        self.counting = False
        self.counts: collections.Counter[tuple[str, str, str, str]] = collections.Counter()
        self._show = warnings.showwarning

    def showwarning(self, message: Warning | str, category: type[Warning], filename: str, lineno: int,
                    file: Any = None, line: str | None = None) -> None:  # fmt: skip
        text = str(message).strip().splitlines()[0] if str(message).strip() else ""
        if not is_sync_warning(text):
            self._show(message, category, filename, lineno, file, line)
            return
        phase = "step" if self.counting else "outside"
        self.counts[(phase, text, normbench_frame(), short(filename, lineno))] += 1

    @contextlib.contextmanager
    def capture(self) -> Iterator[SyncLog]:
        """Every warning comes to `showwarning`, the sync warnings each time they are issued."""
        with warnings.catch_warnings():
            warnings.filterwarnings("always", message=".*synchroniz", category=UserWarning)
            warnings.showwarning = self.showwarning
            yield self


def control(log: SyncLog) -> None:
    """One deliberate sync (``.item()``) counted as a step's."""
    x = torch.ones(8, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    log.counting = True
    try:
        x.sum().item()
    finally:
        log.counting = False
        torch.cuda.set_sync_debug_mode("default")


def counted_run(overrides: list[str], log: SyncLog, steps: int) -> dict[str, Any]:
    """``normbench.run.loop.train.run`` for ``WARMUP + steps + 1`` steps under sync debug mode ``warn``;
    ``log.counting`` is set from the batch request of step ``WARMUP`` to that of the last step."""
    from bench_overhead import compose_cfg

    from normbench.run.loop import train

    first, last = WARMUP, WARMUP + steps
    real_epoch = train.train_epoch

    def counted_epoch(run: Any, epoch: int) -> dict[str, Any]:
        batches = run.task.train_batches

        def watched(epoch: int, generator: torch.Generator) -> Iterator[Any]:
            it = batches(epoch, generator)
            while True:
                log.counting = first <= run.step < last
                try:
                    batch = next(it)
                except StopIteration:
                    log.counting = False
                    return
                yield batch

        run.task.train_batches = watched
        try:
            return real_epoch(run, epoch)
        finally:
            run.task.train_batches = batches
            log.counting = False

    cfg = compose_cfg([*overrides, *COMMON, f"max_steps={last + 1}"])
    run_dir = Path(tempfile.mkdtemp(prefix="sync_debug-"))
    train.train_epoch = counted_epoch
    torch.cuda.set_sync_debug_mode("warn")
    try:
        return train.run(cfg, run_dir)
    finally:
        torch.cuda.set_sync_debug_mode("default")
        train.train_epoch = real_epoch
        log.counting = False


def rows_of(model: str, log: SyncLog, steps: int) -> list[dict[str, Any]]:
    """The model's rows: its counted steps' syncs, most frequent first (a 0 row when none), then the others."""
    rows = []
    for phase in ("step", "outside"):
        found = sorted(((k, n) for k, n in log.counts.items() if k[0] == phase), key=lambda kn: -kn[1])
        for (_, text, site, at), n in found:
            rows.append(dict(zip(COLUMNS, (model, phase, steps, text, site, at, n))))
        if phase == "step" and not found:
            rows.append(dict(zip(COLUMNS, (model, phase, steps, "", "", "", 0))))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument("--steps", type=int, default=3, help="counted training steps per model (after 1 warm-up)")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "bench" / "gpu_host_syncs.csv")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    if not torch.cuda.is_available():
        print("sync_debug: no CUDA device is visible; torch's sync debug mode needs a GPU", file=sys.stderr)
        sys.exit(2)
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("WANDB_SILENT", "true")
    status = 0
    with CsvRows(args.out, versions("cuda")) as sink, SyncLog().capture() as log:
        control(log)
        in_step = [(key, n) for key, n in log.counts.items() if key[0] == "step"]
        (_, text, site, at), seen = next(iter(in_step), (("", "", "", ""), 0))
        sink.write(dict(zip(COLUMNS, ("control: x.sum().item()", "step", 1, text, site, at, seen))))
        if not seen:
            print("[sync_debug] the control's .item() was not reported: the zero counts below mean nothing")
            status = 1
        for model in args.models:
            log.counts.clear()
            error = ""
            try:
                result = counted_run(MODELS[model], log, args.steps)
                if result.get("status") != "finished":
                    error = f"the run ended {result.get('status')}: {result.get('error', '')}"
            except Exception as e:  # (one model's failure is a row; the next one still runs)
                error = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}"
            rows = rows_of(model, log, args.steps)
            if error:
                rows.append(dict(zip(COLUMNS, (model, "error", args.steps, error, "", "", ""))))
                status = 1
            for row in rows:
                sink.write(row)
            counted = sum(r["count"] for r in rows if r["phase"] == "step")
            print(f"[sync_debug] {model}: {counted} host sync(s) in {args.steps} counted training steps", flush=True)
    from normbench.base.output import format_table

    print(format_table(sink.rows, COLUMNS))
    print(f"[sync_debug] wrote {args.out}")
    sys.exit(status)


if __name__ == "__main__":
    main()
