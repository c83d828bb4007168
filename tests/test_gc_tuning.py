"""The agent's, daemon's and commands' collector settings (why: gpuwatch/gc_tuning.py)."""

from __future__ import annotations

import gc

import pytest

from gpuwatch import gc_tuning


@pytest.mark.parametrize(
    "thresholds", [gc_tuning.AGENT_THRESHOLDS, gc_tuning.DAEMON_THRESHOLDS, gc_tuning.COMMAND_THRESHOLDS]
)
def test_settle_freezes_what_is_alive_and_sets_thresholds(thresholds):
    before = gc.get_threshold()
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        gc_tuning.settle(thresholds)
        assert gc.get_freeze_count() > 1000  # the interpreter, pytest and gpuwatch's modules
        assert gc.get_threshold() == thresholds
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
