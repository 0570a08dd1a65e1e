"""Errors that mean "the user asked for something that cannot work": reported in one line.

- `ConfigError`: a config value or a file that cannot work (the user's to fix); exit code 2.
  `require` raises it in the usual form, ``<key>=<value> is not allowed; <key> must be <allowed>``,
  for the dataclasses that own the values (their ``__post_init__``), in every room.
- `RunInterrupted`: the run was stopped by a signal (`normbench.run.loop.interrupts.STOP_SIGNALS`);
  exit code 128 + signal.
- `one_line_os_error`: a disk that is full or read-only, a file that cannot be written
  (`is_environment_error`), in one line naming the file (exit code 1).
"""

from __future__ import annotations

import errno
import math
import signal
from typing import Any

ENVIRONMENT_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.ESTALE}
)
"""``OSError`` numbers that say the machine refused a write (full, read-only, not permitted, broken
disk, records removed under the run: `RecordsVanished`), not that the code is wrong: reported in
one line rather than a traceback."""


class RecordsVanished(OSError):
    """A run's directory or ``metrics.jsonl`` was removed, replaced or cut short while the run wrote into it
    (`normbench.records.segments.RecordsWatch`): the run stops, failed (``ESTALE``: a stale handle)."""

    def __init__(self, path: object, what: str = "removed or replaced") -> None:
        super().__init__(errno.ESTALE, f"{what} while the run wrote into it; the run stops", str(path))


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key, the value and what is allowed."""


def require(cond: bool, key: str, value: Any, allowed: str) -> None:
    """`ConfigError` ``<key>=<value> is not allowed; <key> must be <allowed>`` unless ``cond``."""
    if not cond:
        raise ConfigError(f"{key}={value} is not allowed; {key} must be {allowed}")


def require_in(key: str, value: float, interval: str) -> None:
    """`require` ``value`` in ``interval``, written as in the message: ``[0, 1)``, ``(0, 1]``,
    ``[1, inf)``. NaN lies in no interval, infinity only in one closed at ``inf``."""
    low_open, high_open = interval[0] == "(", interval[-1] == ")"
    low, high = (float(b) for b in interval[1:-1].split(","))
    inside = (low < value if low_open else low <= value) and (value < high if high_open else value <= high)
    require(inside, key, value, f"in {interval}")


def require_positive(key: str, value: float, what: str = "> 0") -> None:
    """`require` a finite ``value`` > 0 (``what`` says it in the message: ``a positive integer``)."""
    require(math.isfinite(value) and value > 0, key, value, what)


SEED_RANGE = (-(2**63), 2**63 - 1)
"""Seeds normbench takes: 64-bit signed integers. torch takes -2**63 .. 2**64 - 1; the upper half
is left out so that the seeds drawn from one (``seed + epoch``, a data split's ``seed + offset``)
stay in torch's range."""


def require_seed(key: str, value: int) -> None:
    """`require` a seed in `SEED_RANGE` (torch refuses what lies beyond 64 bits, and would do so mid-run)."""
    low, high = SEED_RANGE
    require(low <= value <= high, key, value, "a 64-bit signed integer (-2**63 .. 2**63-1)")


class DatasetMissingError(ConfigError):
    """The data set's files are not where the config says, and could not be fetched."""


class DataFileError(ConfigError):
    """A data file that is there but cannot be used as it is (empty, not UTF-8, misaligned, a
    CIFAR-10 batch of the wrong shape); the message names the file."""


class RunInterrupted(BaseException):
    """The run was stopped by a signal. A `BaseException`, like `KeyboardInterrupt`, so that
    ``except Exception`` blocks let it through."""

    def __init__(self, signum: int, step: int | None = None, checkpoint: str | None = None) -> None:
        self.signum = signum
        self.step = step
        self.checkpoint = checkpoint
        super().__init__(f"interrupted by {signal_name(signum)}")

    @property
    def exit_code(self) -> int:
        """128 + the signal number, as a shell reports a process that a signal ended (130: SIGINT)."""
        return 128 + self.signum


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def is_environment_error(e: BaseException) -> bool:
    """Whether ``e`` is an ``OSError`` the machine caused (`ENVIRONMENT_ERRNOS`)."""
    return isinstance(e, OSError) and e.errno in ENVIRONMENT_ERRNOS


def one_line_os_error(e: OSError) -> str:
    """``<file>: No space left on device (errno 28)``: the file (when known) and the reason."""
    reason = e.strerror or str(e) or type(e).__name__
    return f"{e.filename}: {reason} (errno {e.errno})" if e.filename else f"{reason} (errno {e.errno})"


def yaml_error_line(error: Exception, path: object = None) -> str:
    """A YAML syntax error, or a tag ``yaml.safe_load`` refuses (``!!python/object``), in one line:
    ``<file> line L, column C: <problem> (<context>)``. ``path``: the file, where the error does
    not name it (a parse of text read earlier)."""
    mark = getattr(error, "problem_mark", None)
    where = str(path or getattr(mark, "name", "") or "the YAML")
    if mark is not None:
        where += f" line {mark.line + 1}, column {mark.column + 1}"
    problem = " ".join(str(getattr(error, "problem", None) or error).split())
    context = " ".join(str(getattr(error, "context", None) or "").split())
    return f"{where}: {problem}" + (f" ({context})" if context else "") + "; fix the file (YAML, no Python tags)"
