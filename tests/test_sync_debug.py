"""``scripts/sync_debug.py``'s counting, on the CPU: torch's sync debug mode issues a UserWarning per
synchronizing call (only on CUDA); the script counts those by phase and ignores the notice torch
issues when the mode is set ("... is a prototype feature"), which on the first GPU run (torch 2.11,
an H200) stood in the control's row in place of the control's own ``.item()``."""

from __future__ import annotations

import warnings

import pytest

from tests.conftest import REPO, load_script

NOTICE = (
    "Synchronization debug mode is a prototype feature and does not yet detect all synchronizing operations"
    " (Triggered internally at /pytorch/torch/csrc/cuda/Module.cpp:1003.)"
)
SYNC = "called a synchronizing CUDA operation (Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:162.)"


def load_sync_debug(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))  # as `python scripts/sync_debug.py` has it (bench_io)
    return load_script("sync_debug")


def test_syncs_are_counted_by_phase_and_the_prototype_notice_is_not_a_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    sync_debug = load_sync_debug(monkeypatch)
    assert sync_debug.is_sync_warning(SYNC) and not sync_debug.is_sync_warning(NOTICE)
    with warnings.catch_warnings(record=True) as shown, sync_debug.SyncLog().capture() as log:
        warnings.warn(NOTICE, UserWarning, stacklevel=1)  # set_sync_debug_mode("warn"): outside the step
        warnings.warn(SYNC, UserWarning, stacklevel=1)  # outside the step
        log.counting = True
        for _ in range(3):
            warnings.warn(SYNC, UserWarning, stacklevel=1)
        log.counting = False
    by_phase = {(phase, text): n for (phase, text, _, _), n in log.counts.items()}
    assert by_phase == {("outside", SYNC.splitlines()[0]): 1, ("step", SYNC.splitlines()[0]): 3}
    assert [str(w.message) for w in shown] == [NOTICE]  # the notice goes to the usual display
