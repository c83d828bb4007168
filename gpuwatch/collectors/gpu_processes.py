"""The board on which the GPU collector leaves each cycle's per-GPU process pids.

The GPU collector publishes every cycle's samples here and the attribution collector, which
runs after it in the same cycle, reads them to map pids to Slurm jobs, so NVML is asked once
(see :mod:`gpuwatch.collectors.attribution` for why a second listing would be wrong).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from gpuwatch.wire import GpuSample


@dataclass(frozen=True)
class GpuSeen:
    """One GPU as the GPU collector saw it this cycle."""

    index: int
    uuid: str | None
    #: compute process pids; None when the backend could not list them
    pids: tuple[int, ...] | None


class GpuProcessBoard:
    """The GPU collector's latest per-GPU process lists, for the attribution collector.

    Thread-safe; holds one snapshot (the newest publish), stamped with the samples' ``ts``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ts: datetime | None = None
        self._gpus: dict[int, GpuSeen] = {}

    def publish(self, samples: Iterable[GpuSample]) -> None:
        """Replace the snapshot with these GPU samples' indices, UUIDs and process pids."""
        gpus: dict[int, GpuSeen] = {}
        ts: datetime | None = None
        for s in samples:
            pids = None if s.processes is None else tuple(sorted({p.pid for p in s.processes}))
            gpus[s.gpu_index] = GpuSeen(s.gpu_index, s.uuid, pids)
            ts = s.ts if ts is None else max(ts, s.ts)
        with self._lock:
            self._ts, self._gpus = ts, gpus

    def latest(self, now: datetime, max_age_s: float) -> dict[int, GpuSeen] | None:
        """The snapshot if it is at most ``max_age_s`` older than ``now``, else None."""
        with self._lock:
            ts, gpus = self._ts, self._gpus
        if ts is None or abs((now - ts).total_seconds()) > max_age_s:
            return None
        return dict(gpus)

    def clear(self) -> None:
        with self._lock:
            self._ts, self._gpus = None, {}


#: the process-wide board the GPU collector publishes on
GPU_PROCESSES = GpuProcessBoard()
