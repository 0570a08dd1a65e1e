"""Errors that mean "the user asked for something that cannot work": reported in one line.

- `ConfigError`: a config value or a file that cannot work (the user's to fix); exit code 2.
- `RunInterrupted`: the run was stopped by a signal (SIGINT, SIGTERM); exit code 128 + signal.
- `one_line_os_error`: a disk that is full or read-only, a file that cannot be written
  (`is_environment_error`), in one line naming the file (exit code 1).
"""

from __future__ import annotations

import errno
import signal

ENVIRONMENT_ERRNOS = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}
)
"""``OSError`` numbers that say the machine refused a write (full, read-only, not permitted, broken
disk), not that the code is wrong: reported in one line rather than a traceback."""


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key, the value and what is allowed."""


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
