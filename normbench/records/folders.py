"""Which folders a run or a sweep may write into (issue 59.6): not an empty path (an unset
``$VAR``), not the file system's root, not the checkout of this package or a folder above it."""

from __future__ import annotations

import os
from pathlib import Path

from normbench.base.errors import ConfigError


class RunDirError(ConfigError):
    """The run directory cannot be taken: nothing may be written into it."""


def checkout_root() -> Path | None:
    """The git checkout this package runs from (None when installed from a wheel: a repository
    that merely encloses ``site-packages`` is not normbench's tree)."""
    root = Path(__file__).resolve().parents[2]  # normbench/records/folders.py
    return root if (root / ".git").exists() else None


def check_output_folder(path: str | Path, key: str) -> None:
    """A run or sweep folder a run may write into: not empty (an unset ``$VAR``), not the file
    system's root, not the checkout of this package or a folder above it (its files would mix with
    the code's); else `RunDirError` naming ``key`` and the value."""
    text = str(path)
    if not text.strip():
        raise RunDirError(f"{key} is empty (an unset shell variable?); name the folder the run writes into, "
                          "e.g. outputs/<name>")  # fmt: skip
    folder = Path(os.path.abspath(os.path.expanduser(text)))
    if folder == Path(folder.anchor):
        raise RunDirError(f"{key}={text!r} is the file system's root; name a folder for the run, e.g. outputs/<name>")
    checkout = checkout_root()
    if checkout is not None and checkout.is_relative_to(folder):
        where = "is" if folder == checkout else "holds"
        raise RunDirError(f"{key}={text!r} {where} the checkout {checkout}: a run's files would mix with the code's; "
                          "name a folder inside it (outputs/<name>) or elsewhere")  # fmt: skip
