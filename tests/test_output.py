"""normbench.base.output: atomic writes leave the old file or the new one, and no temporary file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from normbench.base.output import atomic_write_text


def test_a_failed_write_keeps_the_old_file_and_leaves_no_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "summary.json"
    atomic_write_text(path, "old\n")

    def full_disk(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_text(path, "new\n")
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]
