"""Garbage-collector settings for the long-running processes (agent, daemon), and for every
``gpuwatch`` command until one of those takes over.

Both allocate many short-lived, acyclic objects per cycle or request (a validated batch is
thousands of pydantic models and lists), and CPython's default thresholds (700, 10, 10)
make the collector run several times per batch and, every hundred collections, rescan
everything alive — in the daemon that includes every batch queued for the writer.
Measured under ``python bench/ingest.py`` (``gc.callbacks`` timing the collections): the
daemon's parse of a 480-sample batch takes 7.5 ms with the defaults, 4.35 ms after
``settle()``, 4.2 ms with the collector off. Under 32 concurrent clients posting 30-cycle
batches, the time inside gen-0 collections is ~1.1 ms per batch at (20000, 100, 100) and
~0.3 ms at the daemon's (100000, 100, 100): every collection walks the batches still in flight.

A command (``gpuwatch jobs --low-util --format json``) imports its modules and builds its rows
(three objects per job listed) and exits: with the defaults the collector runs after every 700
of them and rescans the imported modules' objects, about a sixth of the command's CPU at 1,000
nodes (``bench/README.md``, the low-util command).
"""

from __future__ import annotations

import gc

#: (gen0, gen1, gen2) thresholds; CPython's defaults are (700, 10, 10)
AGENT_THRESHOLDS = (10_000, 10, 10)
DAEMON_THRESHOLDS = (100_000, 100, 100)
#: a command's: what it allocates lives until it exits, or dies by reference counting
COMMAND_THRESHOLDS = (100_000, 50, 50)


def settle(thresholds: tuple[int, int, int]) -> None:
    """Call once start-up is done: what is alive now lives as long as the process.

    ``gc.freeze()`` moves it out of every future collection; the larger thresholds let a
    request's garbage die by reference counting before the collector looks. Reference
    cycles are still collected, just less often: at most a gen-0's worth of tracked objects
    waits (the agent's 10,000 are small beside its 60 MB RSS goal).
    """
    gc.freeze()
    gc.set_threshold(*thresholds)
