"""What a GPU backend is, and the reductions every backend shares.

:class:`GpuBackend` is what the GPU collector talks to; :mod:`~gpuwatch.collectors.nvml_backend`
reads real GPUs through NVML, :mod:`~gpuwatch.collectors.sim_backend` is a seeded device model
for machines without one, :mod:`~gpuwatch.collectors.workload_backend` drives that model from a
reference workload's activity stream and :mod:`~gpuwatch.collectors.recording` replays a
recording. Each returns one :class:`~gpuwatch.wire.GpuSample` per GPU per call, covering the
time since the previous call, and each reduces its 1 s polls with the same helpers
(:func:`util_stats`, :func:`order_reasons`, :func:`reduce_xids`) so a simulated duty cycle
reads exactly as a real one would.
"""

from __future__ import annotations

import logging
import math
import statistics
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuwatch.wire import GpuSample

log = logging.getLogger(__name__)

#: Clocks-event ("throttle") reason bits and the names the wire uses for them, in bit order.
#: The bits are NVML's ``nvmlClocksEventReason*`` / ``nvmlClocksThrottleReason*`` values
#: (``nvidia-smi --query-gpu=clocks_event_reasons.active``); both backends report these names.
CLOCKS_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x0001, "gpu_idle"),
    (0x0002, "applications_clocks_setting"),
    (0x0004, "sw_power_cap"),
    (0x0008, "hw_slowdown"),
    (0x0010, "sync_boost"),
    (0x0020, "sw_thermal_slowdown"),
    (0x0040, "hw_thermal_slowdown"),
    (0x0080, "hw_power_brake_slowdown"),
    (0x0100, "display_clocks_setting"),
    (0x0200, "board_limit"),
    (0x0400, "reliability"),
)
_REASON_RANK = {name: rank for rank, (_, name) in enumerate(CLOCKS_EVENT_REASONS)}


#: a MIG device's wire gpu_index: MIG_INDEX_BASE + MIG_INDEX_STRIDE x card index + slot
MIG_INDEX_BASE = 1000
MIG_INDEX_STRIDE = 10


def mig_index(card_index: int, slot: int) -> int:
    """The ``gpu_index`` a MIG device is sent under: 1000 + 10 x card index + slot (a card has
    at most 7 slots on A100/H100/H200), clear of every card's own NVML index."""
    return MIG_INDEX_BASE + MIG_INDEX_STRIDE * card_index + slot


class GpuBackendUnavailable(RuntimeError):
    """The backend cannot start on this host: no NVML library, no driver, or no device."""


class GpuBackend(ABC):
    """A source of :class:`GpuSample` s, one per GPU per :meth:`sample` call."""

    #: short name for logs (``nvml``, ``sim``)
    name: str = ""
    #: True when the readings are made up; copied into every sample's ``simulated``
    simulated: bool = False

    @abstractmethod
    def sample(self, now: datetime) -> list[GpuSample]:
        """One sample per GPU stamped ``now``, covering the interval since the previous call.

        A GPU that stopped answering is a sample with ``state="lost"``, never an exception,
        so one dead GPU does not hide the others.
        """

    def mig_devices(self) -> list[MigDevice]:
        """MIG devices seen by the latest :meth:`sample`; none unless a GPU is in MIG mode.

        Each is also one of that sample's :class:`GpuSample` s (what a job holds; see
        ``nvml_backend``); this layout is what ``/metrics`` exposes as ``gpuwatch_gpu_mig_*``.
        Reading this never samples again.
        """
        return []

    def close(self) -> None:  # noqa: B027 - optional hook; the simulated backend holds nothing
        """Stop threads and release library handles."""


@dataclass(frozen=True)
class MigDevice:
    """One MIG device (a GPU instance + compute instance) of a GPU in MIG mode.

    From ``nvmlDeviceGetMigDeviceHandleByIndex`` on the parent, then on the MIG handle
    ``nvmlDeviceGetUUID``, ``nvmlDeviceGetGpuInstanceId``, ``nvmlDeviceGetComputeInstanceId``,
    ``nvmlDeviceGetMemoryInfo`` and ``nvmlDeviceGetAttributes`` (SM count); any of them may be
    None where the driver does not say.
    """

    gpu_index: int  # the parent's NVML index
    parent_uuid: str | None
    mig_index: int  # slot in 0..nvmlDeviceGetMaxMigDeviceCount-1
    uuid: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    multiprocessor_count: int | None


def mig_devices_of(samples: Sequence[GpuSample]) -> list[MigDevice]:
    """The MIG layout that one :meth:`GpuBackend.sample` result carries: a device per MIG
    instance sample (one with ``parent_gpu_index``), its slot read back from its wire index
    (:func:`mig_index`). For backends that hold no NVML handles (simulated, replay)."""
    return [
        MigDevice(
            gpu_index=s.parent_gpu_index,
            parent_uuid=s.parent_uuid,
            mig_index=s.gpu_index - mig_index(s.parent_gpu_index, 0),
            uuid=s.uuid,
            gpu_instance_id=s.mig_gpu_instance_id,
            compute_instance_id=s.mig_compute_instance_id,
            memory_used_bytes=s.memory_used_bytes,
            memory_total_bytes=s.memory_total_bytes,
            multiprocessor_count=None,
        )
        for s in samples
        if s.parent_gpu_index is not None
    ]


@dataclass(frozen=True)
class UtilStats:
    """``nvmlDeviceGetUtilizationRates().gpu`` over the polls of one interval."""

    mean: float | None
    #: share of polls reading exactly 0 %: a loader-stalled job has many, a busy one none
    idle_fraction: float | None
    #: population std-dev; None below two polls, where it would say nothing
    stddev: float | None


def clamp_ratio(value: float) -> float:
    """Into 0..1: NVML and GPM percentages can overshoot 100 by rounding."""
    return min(1.0, max(0.0, value))


def util_stats(ratios: Sequence[float]) -> UtilStats:
    """Mean, idle fraction and std-dev of per-poll GPU utilization ratios (0..1)."""
    if not ratios:
        return UtilStats(None, None, None)
    mean = clamp_ratio(math.fsum(ratios) / len(ratios))
    idle = sum(1 for value in ratios if value == 0.0) / len(ratios)
    stddev = statistics.pstdev(ratios) if len(ratios) >= 2 else None
    return UtilStats(mean, idle, stddev)


def mean_or_none(values: Iterable[float | None]) -> float | None:
    """Mean of the values that exist; None when none do ("no data" is not zero)."""
    present = [value for value in values if value is not None]
    return math.fsum(present) / len(present) if present else None


def reduce_xids(codes: Iterable[int] | None) -> list[int] | None:
    """XID codes of one interval as the wire has them: distinct, in order of first arrival.

    None means "not watched" (no event support, or watching off) and stays None; a watched GPU
    with no event is ``[]``. Both backends reduce through this, so a simulated XID reads as a
    real one.
    """
    if codes is None:
        return None
    return list(dict.fromkeys(int(code) for code in codes))


def order_reasons(names: Iterable[str]) -> list[str]:
    """Distinct reason names in bit order, unknown names last, so equal sets compare equal."""
    return sorted(set(names), key=lambda name: (_REASON_RANK.get(name, len(_REASON_RANK)), name))


class ThreadOwner:
    """Owns one daemon thread that runs until ``_stop`` is set: the NVML poller, the XID watcher."""

    _stop: threading.Event
    _thread: threading.Thread | None
    _closed: bool

    def _end_thread(self) -> bool:
        """Set ``_stop`` and join the thread; False when already done, so ``close`` is safe twice."""
        if self._closed:
            return False
        self._closed = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return True


class DeviceLost(Exception):
    """The vendor library said a GPU is gone: aborts reading that device (its sample says lost)."""


#: polls kept per device if nobody calls sample(): an hour at 1 Hz
MAX_POLLS = 3600


@dataclass
class PolledDevice:
    """One GPU of a vendor backend (NVML, amdsmi): its cached handle and identity, and what the
    backend learned about it so far. :class:`DevicePoller` and :func:`sample_identity` read these
    fields; each backend subclasses it with what its own library needs besides."""

    index: int
    handle: Any = None
    uuid: str | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    lost: bool = False
    #: call keys the library said it cannot answer on this GPU (or that the binding lacks):
    #: never asked again
    unsupported: set[str] = field(default_factory=set)
    #: (call key, error) pairs already logged
    logged: set[tuple[str, str]] = field(default_factory=set)
    #: the cheap readings since the last sample, oldest first
    polls: deque[Any] = field(default_factory=lambda: deque(maxlen=MAX_POLLS))
    memory_clock_max_hz: float | None = None

    def first_failure(self, key: str, message: str) -> bool:
        """True the first time call ``key`` fails with ``message`` on this GPU, and remembers it:
        a failure that repeats every poll is logged once."""
        if (key, message) in self.logged:
            return False
        self.logged.add((key, message))
        return True


class DevicePoller(ThreadOwner):
    """The cheap-readings thread of a vendor backend: every ``poll_interval_s`` one reading of
    each device that answers, appended to its ``polls`` under ``_lock``; a device whose library
    says it is gone is marked lost (logged once) and skipped until the next sample retries it.

    A backend gives ``_devices`` (its :class:`PolledDevice` subclass), ``_read_cheap(dev)``, and
    may narrow ``_answers(dev)``.
    """

    poll_interval_s: float
    _lock: threading.Lock
    _devices: list[Any]

    def _start_polling(self, start: bool, thread_name: str) -> None:
        """Ready the stop event; start the poller thread unless the caller polls by hand."""
        self._stop = threading.Event()
        self._thread = None
        if start:
            self._thread = threading.Thread(target=self._poll_loop, name=thread_name, daemon=True)
            self._thread.start()

    def _poll_loop(self) -> None:
        while not self._stop.wait(self.poll_interval_s):
            self.poll()

    def poll(self) -> None:
        """One cheap reading of every GPU that answers; the poller thread calls this."""
        for dev in self._devices:
            if not self._answers(dev):
                continue
            try:
                reading = self._read_cheap(dev)
            except DeviceLost as exc:
                self._mark_lost(dev, exc)
                continue
            with self._lock:
                dev.polls.append(reading)

    def _answers(self, dev: Any) -> bool:
        return not dev.lost

    def _read_cheap(self, dev: Any) -> Any:
        raise NotImplementedError

    def _mark_lost(self, dev: PolledDevice, exc: Exception) -> None:
        if not dev.lost:
            log.warning("GPU %d (%s) lost: %s", dev.index, dev.uuid, exc)
        dev.lost = True


def sample_identity(dev: PolledDevice, now: datetime, interval_s: float) -> dict[str, Any]:
    """What names a GPU's sample, lost or not: the stamp, the interval and the GPU as last opened."""
    return {
        "ts": now,
        "gpu_index": dev.index,
        "uuid": dev.uuid,
        "name": dev.name,
        "pci_bus_id": dev.pci_bus_id,
        "interval_s": interval_s,
    }


def poll_means(polls: Sequence[Any]) -> dict[str, Any]:
    """A sample's readings from its interval's 1 s polls, as GpuSample keyword arguments: the
    utilization statistics and the means of memory activity, power, clocks and temperature
    (each poll has ``util_gpu``, ``util_memory``, ``power_watts``, ``sm_clock_hz``,
    ``memory_clock_hz`` and ``temperature_celsius``, None where the card has none)."""
    stats = util_stats([p.util_gpu for p in polls if p.util_gpu is not None])
    return {
        "util_gpu_ratio": stats.mean,
        "util_gpu_idle_fraction_ratio": stats.idle_fraction,
        "util_gpu_stddev_ratio": stats.stddev,
        "util_memory_ratio": mean_or_none(p.util_memory for p in polls),
        "power_watts": mean_or_none(p.power_watts for p in polls),
        "sm_clock_hz": mean_or_none(p.sm_clock_hz for p in polls),
        "memory_clock_hz": mean_or_none(p.memory_clock_hz for p in polls),
        "temperature_celsius": mean_or_none(p.temperature_celsius for p in polls),
    }
