"""What normbench writes outside the metric sinks: its terminal lines, files written atomically,
CSV files and plain-text tables.

Every terminal line goes through the ``normbench`` logger (`LOG`): `info` lines (``[normbench] …``)
on stdout, `warn` lines (``normbench: warning: …``) on stderr, the text unchanged. Under Hydra the
job's logging config (``conf/hydra/job_logging/normbench.yaml``) gives the logger the same two
console handlers plus a file handler, so ``<run dir>/<job>.log`` holds what the terminal showed;
outside Hydra (a script, a test calling `normbench.run.loop.train.run`) the logger has the two console
handlers of `use_console`. The log file's handler is `JobLogHandler`: a disk that refuses its
writes (full, read-only) ends the file with one warning instead of a traceback per line.
"""

from __future__ import annotations

import contextlib
import csv
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

from normbench.base.errors import ConfigError, one_line_os_error

LOG = logging.getLogger("normbench")


class ConsoleHandler(logging.StreamHandler):
    """Records to ``sys.stdout`` or ``sys.stderr`` as they are when the record is written (not when
    the handler was made: redirections and pytest's capture see every line), below ``below`` only
    when it is given (stdout: the lines under WARNING; stderr takes WARNING and up)."""

    def __init__(self, stream_name: str = "stdout", below: int | str | None = None, level: int | str = 0) -> None:
        logging.Handler.__init__(self, level)  # no stream is bound: `stream` looks it up
        if stream_name not in ("stdout", "stderr"):
            raise ValueError(f"stream_name={stream_name!r}: stdout or stderr")
        self.stream_name = stream_name
        self.below = logging.getLevelName(below) if isinstance(below, str) else below

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return getattr(sys, self.stream_name)

    def filter(self, record: logging.LogRecord) -> bool:  # type: ignore[override]
        return (self.below is None or record.levelno < self.below) and bool(super().filter(record))


def use_console() -> None:
    """The logger as outside Hydra: INFO and up, ``%(message)s`` on stdout (below WARNING) and
    stderr (WARNING and up), nothing else (a job's log file from an earlier Hydra job is let go)."""
    for handler in list(LOG.handlers):
        LOG.removeHandler(handler)
    LOG.addHandler(ConsoleHandler("stdout", below=logging.WARNING))
    LOG.addHandler(ConsoleHandler("stderr", level=logging.WARNING))
    LOG.setLevel(logging.INFO)
    LOG.propagate = False


class JobLogHandler(logging.FileHandler):
    """``<run dir>/<job>.log`` (``conf/hydra/job_logging/normbench.yaml``). logging's own handler
    prints a traceback for every line it cannot write, so a full disk turned one error into a
    screen of them. Here the first refused write (an ``OSError``: no space, read-only, quota)
    closes the file with one warning on stderr and the log stops; the terminal's lines go on, and
    the run reports the error that stops it (``metrics.jsonl`` or a checkpoint on the same disk)
    itself. Any other error (a bad format string: a bug) is logging's usual report."""

    stopped = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.stopped:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802  (logging's name)
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            super().handleError(record)
            return
        self.stopped = True
        with contextlib.suppress(OSError):  # what is still buffered cannot be written either
            self.close()
        error.filename = error.filename or self.baseFilename
        print(
            f"normbench: warning: {one_line_os_error(error)}; the job's log stops here (the terminal shows the rest)",
            file=sys.stderr,
            flush=True,
        )


if not LOG.handlers:  # Hydra may have configured it already (its job logging runs before the task imports)
    use_console()


def info(message: str) -> None:
    """``message`` on stdout (and in the job's log file under Hydra)."""
    LOG.info(message)


def warn(message: str) -> None:
    """``normbench: warning: <message>`` on stderr (and in the job's log file under Hydra)."""
    LOG.warning(f"normbench: warning: {message}")


def error_line(message: str) -> None:
    """``normbench: error: <message>``: the one line a refused run prints on stderr."""
    print(f"normbench: error: {message}", file=sys.stderr, flush=True)


def plain_text(doc: str) -> str:
    """A docstring as a terminal shows it (``--help``): reStructuredText's double and single
    backquotes around literals and references dropped, the words kept."""
    return re.sub(r"`([^`\n]+)`", r"\1", re.sub(r"``([^`\n]+)``", r"\1", doc))


def check_out_dir(out: Path, what: str) -> None:
    """A `ConfigError` (one line naming ``--out``) unless ``out`` is a folder, or can be made as
    one, that this process may write ``what`` into: not a file, not a path through a file, not
    under a folder it may not write (read-only, not permitted). Checked before anything is read
    or made, so that a refused command leaves nothing."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {str(out)!r} is a file, not a folder; pass a folder for {what}")
    existing = out
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ConfigError(f"--out {str(out)!r} goes through {str(existing)!r}, a file; pass a folder for {what}")
    if not os.access(existing, os.W_OK | os.X_OK):
        shown = "" if existing == out else f" ({str(existing)!r} is where it would be made)"
        raise ConfigError(
            f"--out {str(out)!r} cannot be written: permission denied or a read-only file system{shown}; "
            f"pass --out <a writable folder> for {what}"
        )


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temporary file, flush + fsync, then ``os.replace``: readers see the old file or
    the new one, never half of one; a failed write (a full disk, a signal) leaves no temporary file,
    and its ``OSError`` names ``path`` (a write or fsync that fails names no file of its own, and
    the temporary file is gone), so that its one line says which file found no room."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError) and (e.filename is None or e.filename == str(tmp)):
            e.filename = str(path)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """``text`` (UTF-8) into ``path`` by `atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"))


def write_csv(path: Path, rows: list[dict[str, Any]]) -> list[str]:
    """``rows`` as a CSV file (parent folders made), columns in order of first appearance;
    returns the columns."""
    columns = list(dict.fromkeys(k for row in rows for k in row))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return columns


def format_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    """``rows`` as an aligned plain-text table of ``columns`` (floats to 4 significant digits)."""

    def fmt(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else ("" if v is None else str(v))

    cells = [[fmt(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in cells]
    return "\n".join(lines)
