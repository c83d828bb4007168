"""A module-shaped fake of ``pynvml`` for testing the NVML backend without a GPU.

It answers with the real binding's ctypes structs (``c_nvmlUtilization_t``,
``c_nvmlMemory_v2_t``, ``c_nvmlGpmMetricsGet_t``...) and raises the real exception classes
(``pynvml.NVMLError_NotSupported``...), so the backend sees what it would see on a card.
Constants and structs it does not define itself come from the real ``pynvml``; a real
*function* it does not define is absent, as it would be in an older binding.

What each card can do is a capability table (:data:`CARDS`): an H200 with GPM, an A100
without it, and a Kepler-era card on which many calls raise ``NotSupported`` or
``FunctionNotFound``. Readings are plain attributes of :class:`FakeGpu`; :meth:`FakeNvml.advance`
moves the fake clock and integrates the energy and GPM counters, so GPM metrics come out of
two samples exactly as NVML computes them: counter delta / time delta.
"""

from __future__ import annotations

import ctypes
import inspect
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pynvml

NotSupported = pynvml.NVMLError_NotSupported
FunctionNotFound = pynvml.NVMLError_FunctionNotFound
_MIB = 1024 * 1024


@dataclass(frozen=True)
class CardModel:
    """One card model: static properties and which calls fail on it, with what."""

    name: str
    memory_total: int
    memory_reserved: int
    power_limit_mw: int
    sm_clock_max_mhz: int
    gpm: bool
    #: NVML function name (``nvmlDeviceGetMemoryInfo_v2`` for the v2 path) -> error it raises
    fails: dict[str, type[pynvml.NVMLError]] = field(default_factory=dict)


CARDS: dict[str, CardModel] = {
    "H200": CardModel("NVIDIA H200", 143_771 * _MIB, 600 * _MIB, 700_000, 1980, gpm=True),
    "A100": CardModel("NVIDIA A100-SXM4-80GB", 81_920 * _MIB, 500 * _MIB, 400_000, 1410, gpm=False),
    # Kepler on an old driver: no v2 memory info, no energy counter (Volta+), no clocks-event
    # name (driver 535+), no process utilization or PCIe throughput (Maxwell+), ECC off, no GPM
    "K80": CardModel(
        "Tesla K80",
        12_288 * _MIB,
        0,
        149_000,
        875,
        gpm=False,
        fails={
            "nvmlDeviceGetMemoryInfo_v2": FunctionNotFound,
            "nvmlDeviceGetTotalEnergyConsumption": NotSupported,
            "nvmlDeviceGetCurrentClocksEventReasons": FunctionNotFound,
            "nvmlDeviceGetProcessesUtilizationInfo": FunctionNotFound,
            "nvmlDeviceGetProcessUtilization": NotSupported,
            "nvmlDeviceGetPcieThroughput": NotSupported,
            "nvmlDeviceGetTotalEccErrors": NotSupported,
            "nvmlGpmQueryDeviceSupport": FunctionNotFound,
        },
    ),
}


@dataclass
class FakeGpu:
    """One fake device; tests set its readings directly (NVML's units)."""

    card: CardModel
    index: int
    util_gpu: int = 0  # percent
    util_memory: int = 0
    power_mw: int = 70_000
    energy_mj: float = 5.0e9
    sm_clock_mhz: int = 345
    memory_clock_mhz: int = 2619
    temperature: int = 30
    reasons: int = 0
    memory_used: int = 0
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    pcie_tx_kib: int = 0
    pcie_rx_kib: int = 0
    #: (pid, used bytes or None)
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    #: (timestamp us, pid, sm %, mem %)
    process_samples: list[tuple[int, int, int, int]] = field(default_factory=list)
    #: what an empty process-utilization answer raises: 0 (pynvml's quirk) or NOT_FOUND
    process_empty_error: int = 0
    #: GPM metric id -> rate (percent, or MiB/s) integrated by FakeNvml.advance
    gpm_rates: dict[int, float] = field(default_factory=dict)
    gpm_counters: dict[int, float] = field(default_factory=dict)
    #: when set, every call on this device raises it (e.g. NVMLError_GpuIsLost)
    failure: type[pynvml.NVMLError] | None = None


class FakeNvml:
    """Stands in for the ``pynvml`` module: pass it as ``NvmlBackend(nvml=...)``."""

    def __init__(self, cards: list[str], *, init_error: type[pynvml.NVMLError] | None = None) -> None:
        self.gpus = [FakeGpu(CARDS[card], index) for index, card in enumerate(cards)]
        self.init_error = init_error
        self.now = 1000.0
        self.calls: Counter[str] = Counter()
        self.initialized = False
        self.shutdowns = 0
        #: address of a GPM sample buffer -> (buffer, snapshot: (gpu index, time, counters))
        self.gpm_buffers: dict[int, tuple[Any, tuple[int, float, dict[int, float]] | None]] = {}

    def __getattr__(self, name: str) -> Any:
        value = getattr(pynvml, name)
        if inspect.isfunction(value):
            raise AttributeError(f"fake pynvml has no {name}")
        return value

    # -- test controls ------------------------------------------------------------------

    def clock(self) -> float:
        """The fake monotonic clock; pass as ``NvmlBackend(clock=fake.clock)``."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass: energy and GPM counters integrate the current readings."""
        self.now += seconds
        for gpu in self.gpus:
            gpu.energy_mj += gpu.power_mw * seconds
            for metric, rate in gpu.gpm_rates.items():
                gpu.gpm_counters[metric] = gpu.gpm_counters.get(metric, 0.0) + rate * seconds

    def _enter(self, name: str, gpu: FakeGpu | None = None) -> None:
        self.calls[name] += 1
        if not self.initialized:
            raise pynvml.NVMLError_Uninitialized()
        if gpu is None:
            return
        if gpu.failure is not None:
            raise gpu.failure()
        if name in gpu.card.fails:
            raise gpu.card.fails[name]()

    # -- library ------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise self.init_error()
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized = False
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        gpu = self.gpus[index]
        if gpu.failure is not None:
            raise gpu.failure()
        return gpu

    # -- identity -----------------------------------------------------------------------

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> str:
        self._enter("nvmlDeviceGetName", gpu)
        return gpu.card.name

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        self._enter("nvmlDeviceGetUUID", gpu)
        return f"GPU-00000000-0000-0000-0000-{gpu.index:012d}"

    def nvmlDeviceGetPciInfo(self, gpu: FakeGpu) -> pynvml.nvmlPciInfo_t:
        self._enter("nvmlDeviceGetPciInfo", gpu)
        info = pynvml.nvmlPciInfo_t()
        info.busId = f"00000000:{0x18 + gpu.index:02X}:00.0".encode()
        return info

    # -- cheap readings -----------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> pynvml.c_nvmlUtilization_t:
        self._enter("nvmlDeviceGetUtilizationRates", gpu)
        return pynvml.c_nvmlUtilization_t(gpu=gpu.util_gpu, memory=gpu.util_memory)

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        self._enter("nvmlDeviceGetPowerUsage", gpu)
        return gpu.power_mw

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, clock_type: int) -> int:
        self._enter("nvmlDeviceGetClockInfo", gpu)
        return gpu.sm_clock_mhz if clock_type == pynvml.NVML_CLOCK_SM else gpu.memory_clock_mhz

    def nvmlDeviceGetMaxClockInfo(self, gpu: FakeGpu, clock_type: int) -> int:
        self._enter("nvmlDeviceGetMaxClockInfo", gpu)
        return gpu.card.sm_clock_max_mhz if clock_type == pynvml.NVML_CLOCK_SM else gpu.memory_clock_mhz

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature", gpu)
        return gpu.temperature

    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: FakeGpu) -> int:
        self._enter("nvmlDeviceGetCurrentClocksEventReasons", gpu)
        return gpu.reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, gpu: FakeGpu) -> int:
        self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", gpu)
        return gpu.reasons

    # -- per-sample readings ------------------------------------------------------------

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu, version: int | None = None) -> Any:
        if not version:
            self._enter("nvmlDeviceGetMemoryInfo", gpu)
            # v1: used includes the reserve
            used = gpu.memory_used + gpu.card.memory_reserved
            return pynvml.c_nvmlMemory_t(
                total=gpu.card.memory_total, free=gpu.card.memory_total - used, used=used
            )
        self._enter("nvmlDeviceGetMemoryInfo_v2", gpu)
        free = gpu.card.memory_total - gpu.card.memory_reserved - gpu.memory_used
        return pynvml.c_nvmlMemory_v2_t(
            version=version,
            total=gpu.card.memory_total,
            reserved=gpu.card.memory_reserved,
            free=free,
            used=gpu.memory_used,
        )

    def nvmlDeviceGetEnforcedPowerLimit(self, gpu: FakeGpu) -> int:
        self._enter("nvmlDeviceGetEnforcedPowerLimit", gpu)
        return gpu.card.power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:
        self._enter("nvmlDeviceGetTotalEnergyConsumption", gpu)
        return int(gpu.energy_mj)

    def nvmlDeviceGetTotalEccErrors(self, gpu: FakeGpu, error_type: int, counter_type: int) -> int:
        self._enter("nvmlDeviceGetTotalEccErrors", gpu)
        if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return gpu.ecc_corrected
        return gpu.ecc_uncorrected

    def nvmlDeviceGetPcieThroughput(self, gpu: FakeGpu, counter: int) -> int:
        self._enter("nvmlDeviceGetPcieThroughput", gpu)
        return gpu.pcie_tx_kib if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else gpu.pcie_rx_kib

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGpu) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses", gpu)
        result = []
        for pid, used in gpu.processes:
            info = pynvml.c_nvmlProcessInfo_t(pid=pid, usedGpuMemory=used or 0)
            obj = pynvml.nvmlStructToFriendlyObject(info)
            if used is None:  # what pynvml does with NVML_VALUE_NOT_AVAILABLE
                obj.usedGpuMemory = None
            result.append(obj)
        return result

    def _process_samples(self, gpu: FakeGpu, since_us: int) -> list[tuple[int, int, int, int]]:
        newer = [s for s in gpu.process_samples if s[0] > since_us]
        if not newer:
            raise pynvml.NVMLError(gpu.process_empty_error)
        return newer

    def nvmlDeviceGetProcessesUtilizationInfo(self, gpu: FakeGpu, since_us: int) -> list[Any]:
        self._enter("nvmlDeviceGetProcessesUtilizationInfo", gpu)
        return [
            pynvml.c_nvmlProcessUtilizationInfo_v1_t(timeStamp=ts, pid=pid, smUtil=sm, memUtil=mem)
            for ts, pid, sm, mem in self._process_samples(gpu, since_us)
        ]

    def nvmlDeviceGetProcessUtilization(self, gpu: FakeGpu, since_us: int) -> list[Any]:
        self._enter("nvmlDeviceGetProcessUtilization", gpu)
        return [
            pynvml.c_nvmlProcessUtilizationSample_t(pid=pid, timeStamp=ts, smUtil=sm, memUtil=mem)
            for ts, pid, sm, mem in self._process_samples(gpu, since_us)
        ]

    # -- GPM ----------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, gpu: FakeGpu) -> pynvml.c_nvmlGpmSupport_t:
        self._enter("nvmlGpmQueryDeviceSupport", gpu)
        return pynvml.c_nvmlGpmSupport_t(
            version=pynvml.NVML_GPM_SUPPORT_VERSION, isSupportedDevice=int(gpu.card.gpm)
        )

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        buffer = ctypes.pointer(pynvml.struct_c_nvmlGpmSample_t())
        self.gpm_buffers[ctypes.addressof(buffer.contents)] = (buffer, None)
        return buffer

    def nvmlGpmSampleFree(self, buffer: Any) -> None:
        self._enter("nvmlGpmSampleFree")
        del self.gpm_buffers[ctypes.addressof(buffer.contents)]

    def nvmlGpmSampleGet(self, gpu: FakeGpu, buffer: Any) -> Any:
        self._enter("nvmlGpmSampleGet", gpu)
        address = ctypes.addressof(buffer.contents)
        self.gpm_buffers[address] = (
            self.gpm_buffers[address][0],
            (gpu.index, self.now, dict(gpu.gpm_counters)),
        )
        return buffer

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        self._enter("nvmlGpmMetricsGet")
        first = self.gpm_buffers[ctypes.addressof(request.sample1.contents)][1]
        second = self.gpm_buffers[ctypes.addressof(request.sample2.contents)][1]
        if first is None or second is None or first[0] != second[0] or second[1] <= first[1]:
            raise pynvml.NVMLError_InvalidArgument()
        gpu = self.gpus[first[0]]
        elapsed = second[1] - first[1]
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            if metric.metricId in gpu.gpm_rates:
                delta = second[2].get(metric.metricId, 0.0) - first[2].get(metric.metricId, 0.0)
                metric.value = delta / elapsed
                metric.nvmlReturn = pynvml.NVML_SUCCESS
            else:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return request
