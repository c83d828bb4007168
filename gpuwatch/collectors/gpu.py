"""The GPU collector: one interface, two backends behind it.

:class:`GpuBackend` is what the collector talks to; :mod:`~gpuwatch.collectors.nvml_backend`
reads real GPUs through NVML and :mod:`~gpuwatch.collectors.sim_backend` is a seeded device
model for machines without one. Both return one :class:`~gpuwatch.wire.GpuSample` per GPU per
call, covering the time since the previous call, and both reduce their 1 s polls with the same
helpers (:func:`util_stats`, :func:`order_reasons`) so a simulated duty cycle reads exactly as
a real one would.

``gpu.backend`` picks the backend (:func:`make_backend`): ``auto`` uses NVML when
``nvmlInit`` succeeds, else :mod:`~gpuwatch.collectors.amdsmi_backend` when amdsmi finds an
AMD GPU, and otherwise disables the collector, saying why once in the log; a node without
GPUs is "no data", not a failure.
"""

from __future__ import annotations

import logging
import math
import statistics
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from gpuwatch.collectors.base import Collector, register
from gpuwatch.config import GpuBackendKind, GpuConfig, Settings
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

        Not on the wire (v1 has no MIG sample kind): the agent logs them and ``/metrics``
        exposes them (``gpuwatch_gpu_mig_*``). Reading this never samples again.
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


class GpuCollector(Collector):
    """The ``gpu`` collector: whatever backend was chosen, sampled once per agent cycle."""

    name = "gpu"

    def __init__(self, backend: GpuBackend) -> None:
        self.backend = backend

    def collect(self, now: datetime) -> list[GpuSample]:
        samples = self.backend.sample(now)
        # the attribution collector (which runs after this one) maps these pids to Slurm jobs
        from gpuwatch.collectors.attribution import GPU_PROCESSES

        GPU_PROCESSES.publish(samples)
        return samples

    def close(self) -> None:
        self.backend.close()


_auto_disabled_logged = False


def make_backend(config: GpuConfig, *, interval_s: float) -> GpuBackend | None:
    """The backend ``config.backend`` asks for, or None when the collector is off.

    ``interval_s`` is the agent's sample interval; the simulated backend uses it as the
    length of its first interval. ``nvml`` that cannot initialise raises
    :class:`GpuBackendUnavailable`; ``auto`` in the same case logs once and returns None.
    """
    global _auto_disabled_logged
    # imported here: both backend modules import this one for GpuBackend
    if config.backend is GpuBackendKind.NONE:
        return None
    # "replay" (GpuBackendKind.REPLAY, gpu.replay_file, gpu.replay_loop) once config.py has them
    if getattr(config.backend, "value", config.backend) == "replay":
        from gpuwatch.collectors.recording import ReplayBackend

        replay_file = getattr(config, "replay_file", None)
        if replay_file is None:
            raise GpuBackendUnavailable("gpu.backend = 'replay' needs gpu.replay_file")
        return ReplayBackend(replay_file, loop=bool(getattr(config, "replay_loop", False)))
    if config.backend is GpuBackendKind.SIM:
        from gpuwatch.collectors.sim_backend import SimulatedBackend

        return SimulatedBackend(
            config.sim_scenario,
            gpus=config.sim_gpus,
            seed=config.sim_seed,
            model=config.sim_model,
            poll_interval_s=config.poll_interval_s,
            interval_s=interval_s,
        )
    if config.backend is GpuBackendKind.WORKLOAD:
        # simulated GPUs following a live `gpuwatch workload --activity-file` stream (no torch)
        from gpuwatch.workload.sim_bridge import WorkloadDrivenBackend

        if config.activity_file is None:
            raise GpuBackendUnavailable("gpu.backend = 'workload' needs gpu.activity_file")
        try:
            return WorkloadDrivenBackend(
                config.activity_file,
                model=config.sim_model,
                seed=config.sim_seed,
                poll_interval_s=config.poll_interval_s,
                interval_s=interval_s,
                follow=True,
            )
        except (OSError, ValueError) as exc:
            raise GpuBackendUnavailable(f"gpu.activity_file {config.activity_file}: {exc}") from exc
    from gpuwatch.collectors.amdsmi_backend import AmdSmiBackend  # imports amdsmi only when started
    from gpuwatch.collectors.nvml_backend import NvmlBackend

    if config.backend is GpuBackendKind.AMDSMI:
        try:
            return AmdSmiBackend(poll_interval_s=config.poll_interval_s)
        except GpuBackendUnavailable as exc:
            raise GpuBackendUnavailable(f"gpu.backend = 'amdsmi' but amdsmi cannot start: {exc}") from exc
    try:
        # gpu.watch_events (XID event thread) defaults to on while config.py has no such key
        return NvmlBackend(
            poll_interval_s=config.poll_interval_s, watch_events=bool(getattr(config, "watch_events", True))
        )
    except GpuBackendUnavailable as exc:
        if config.backend is GpuBackendKind.NVML:
            raise GpuBackendUnavailable(f"gpu.backend = 'nvml' but NVML cannot start: {exc}") from exc
        nvml_reason = exc
    try:  # auto: AMD GPUs next
        return AmdSmiBackend(poll_interval_s=config.poll_interval_s)
    except GpuBackendUnavailable as exc:
        if not _auto_disabled_logged:
            _auto_disabled_logged = True
            log.info("no NVIDIA GPU/driver (%s) nor AMD GPU (%s); GPU collector disabled", nvml_reason, exc)
        return None


@register("gpu")
def gpu_collector(settings: Settings) -> GpuCollector | None:
    """Factory for the agent: the GPU collector, or None on a node without GPUs."""
    backend = make_backend(settings.gpu, interval_s=settings.agent.interval_s)
    return None if backend is None else GpuCollector(backend)
