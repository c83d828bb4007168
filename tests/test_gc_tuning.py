"""The agent's and daemon's collector settings (why: gpuwatch/gc_tuning.py)."""

from __future__ import annotations

import gc

from gpuwatch import gc_tuning


def test_settle_freezes_what_is_alive_and_raises_gen0():
    before = gc.get_threshold()
    gc.unfreeze()
    try:
        assert gc.get_freeze_count() == 0
        gc_tuning.settle()
        assert gc.get_freeze_count() > 1000  # the interpreter, pytest and gpuwatch's modules
        assert gc.get_threshold() == (gc_tuning.GEN0_THRESHOLD, before[1], before[2])
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)
