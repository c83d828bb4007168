"""A module-shaped fake of ``pynvml`` for testing the NVML backend without a GPU.

It answers with the real binding's ctypes structs (``c_nvmlUtilization_t``,
``c_nvmlMemory_v2_t``, ``c_nvmlGpmMetricsGet_t``...) and raises the real exception classes
(``pynvml.NVMLError_NotSupported``...), so the backend sees what it would see on a card.
Constants and structs it does not define itself come from the real ``pynvml``; a real
*function* it does not define is absent, as it would be in an older binding.

What each card can do is a capability table (:data:`CARDS`): an H200 with GPM, an A100
without it (NVLink through field values instead, MIG capable), a V100 (Volta: ECC on, page
retirement instead of row remapping) and a Kepler-era card on which many calls raise
``NotSupported`` or ``FunctionNotFound``.

Memory health, as NVML documents it: ``nvmlDeviceGetRemappedRows`` (corrRows, uncRows,
isPending, failureOccurred) on Ampere and newer, ``NotSupported`` before, and ``NotSupported``
on a card in MIG mode with instances ("On MIG-enabled GPUs with active instances, querying the
number of remapped rows is not supported"); ``nvmlDeviceGetRetiredPages`` (by cause: multiple
single-bit / double-bit ECC) and ``nvmlDeviceGetRetiredPagesPendingStatus`` only where the card
retires pages - before Ampere and with ECC on (row remapping replaced page retirement:
NVIDIA's "GPU Memory Error Management"; pages are retired only with ECC enabled: "Dynamic Page
Retirement"); ``nvmlDeviceGetPcieReplayCounter`` on every card it models (Kepler and newer).
Tests set :class:`FakeGpu`'s ``remapped_*``, ``remap_pending``/``remap_failed``,
``retired_*`` and ``pcie_replays``. Readings are plain attributes of
:class:`FakeGpu`; :meth:`FakeNvml.advance` moves the fake clock and integrates the energy,
GPM and NVLink counters, so GPM metrics come out of two samples exactly as NVML computes them:
counter delta / time delta.

MIG (:class:`FakeMig`, :meth:`FakeGpu.enable_mig`): a card in MIG mode answers
``nvmlDeviceGetMigMode`` [current, pending], ``nvmlDeviceGetMaxMigDeviceCount`` and
``nvmlDeviceGetMigDeviceHandleByIndex`` (an empty slot raises ``NVMLError_NotFound``); a MIG
device handle answers ``nvmlDeviceIsMigDeviceHandle``, ``nvmlDeviceGetDeviceHandleFromMigDeviceHandle``,
its GPU/compute instance ids, a ``MIG-`` UUID, its own memory and processes and
``nvmlDeviceGetAttributes`` (SMs, slice counts). As NVML documents (and dcgm-exporter #216
reports), ``nvmlDeviceGetUtilizationRates`` raises ``NVMLError_NotSupported`` on a MIG device
and on a card in MIG mode: per-instance activity comes from GPM, ``nvmlGpmMigSampleGet(card,
gpuInstanceId, sample)`` then ``nvmlGpmMetricsGet`` (graphics engine, SM, tensor, DRAM), each
instance with its own counters.

Events: ``nvmlEventSetCreate`` / ``nvmlDeviceRegisterEvents`` / ``nvmlEventSetWait_v2`` work
as NVML's do, with a real blocking wait (a condition variable, up to the timeout, then
``NVMLError_Timeout``), so the backend's event thread runs for real;
:meth:`FakeNvml.raise_event` is the driver reporting one. Each fake GPU has a real
``nvmlDevice_t`` pointer (``_as_parameter_``), which is what an event's ``device`` holds.
"""

from __future__ import annotations

import ctypes
import inspect
import threading
from collections import Counter, deque
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
    #: the limit the card boots with (power.default_limit); enforced unless a test caps it
    power_limit_mw: int
    sm_clock_max_mhz: int
    gpm: bool
    #: cumulative NVLink throughput field values (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_*)
    nvlink: bool = False
    #: nvmlDeviceGetMigMode exists (A100 and newer)
    mig_capable: bool = False
    #: nvmlDeviceGetSupportedEventTypes
    events: int = (
        pynvml.nvmlEventTypeXidCriticalError
        | pynvml.nvmlEventTypeDoubleBitEccError
        | pynvml.nvmlEventTypeSingleBitEccError
    )
    #: nvmlDeviceGetRemappedRows answers (Ampere and newer)
    row_remapping: bool = False
    #: nvmlDeviceGetRetiredPages(+PendingStatus) answer (before Ampere, with ECC on)
    page_retirement: bool = False
    #: NVML function name (``nvmlDeviceGetMemoryInfo_v2`` for the v2 path) -> error it raises
    fails: dict[str, type[pynvml.NVMLError]] = field(default_factory=dict)


CARDS: dict[str, CardModel] = {
    "H200": CardModel(
        "NVIDIA H200",
        143_771 * _MIB,
        600 * _MIB,
        700_000,
        1980,
        gpm=True,
        nvlink=True,
        mig_capable=True,
        row_remapping=True,
    ),
    "A100": CardModel(
        "NVIDIA A100-SXM4-80GB",
        81_920 * _MIB,
        500 * _MIB,
        400_000,
        1410,
        gpm=False,
        nvlink=True,
        mig_capable=True,
        row_remapping=True,
    ),
    # Volta: no GPM, no MIG; ECC on, so pages are retired (no row remapping before Ampere)
    "V100": CardModel(
        "Tesla V100-SXM2-32GB",
        32_768 * _MIB,
        300 * _MIB,
        300_000,
        1530,
        gpm=False,
        nvlink=True,
        page_retirement=True,
    ),
    # Kepler on an old driver: no v2 memory info, no energy counter (Volta+), no clocks-event
    # name (driver 535+), no process utilization or PCIe throughput (Maxwell+), ECC off, no GPM
    "K80": CardModel(
        "Tesla K80",
        12_288 * _MIB,
        0,
        149_000,
        875,
        gpm=False,
        events=pynvml.nvmlEventTypeXidCriticalError,
        fails={
            "nvmlDeviceGetMigMode": NotSupported,
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
class FakeMig:
    """One MIG device (GPU instance + compute instance) of a fake GPU in MIG mode."""

    slot: int
    gpu_instance_id: int
    compute_instance_id: int
    memory_total: int
    memory_used: int = 0
    multiprocessor_count: int = 14
    #: GPU-instance slices (of the card's nvmlDeviceGetMaxMigDeviceCount): 1 for a 1g profile
    slices: int = 1
    #: the card it lives on (set by FakeGpu.enable_mig); its index makes the UUID unique
    parent_index: int = 0
    #: how many layouts the card had before this one: a re-created instance gets a new UUID,
    #: as NVML gives one
    generation: int = 0
    #: (pid, used bytes) of the compute processes in this instance
    processes: list[tuple[int, int]] = field(default_factory=list)
    #: GPM metric id -> rate (percent), integrated per instance by FakeNvml.advance
    gpm_rates: dict[int, float] = field(default_factory=dict)
    gpm_counters: dict[int, float] = field(default_factory=dict)

    @property
    def uuid(self) -> str:
        return f"MIG-00000000-0000-{self.generation:04d}-{self.parent_index:04d}-{self.slot:012d}"

    @property
    def profile(self) -> str:
        """NVIDIA's profile name, e.g. ``1g.18gb``."""
        return f"{self.slices}g.{round(self.memory_total / 1024**3)}gb"

    def busy(self, percent: float) -> None:
        """Run work that keeps the graphics engine (and SMs, proportionally) ``percent`` busy."""
        self.gpm_rates.update(
            {
                pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: percent,
                pynvml.NVML_GPM_METRIC_SM_UTIL: percent * 0.9,
                pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: percent * 0.5,
                pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: percent * 0.4,
            }
        )


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
    #: nvmlDeviceGetRemappedRows: rows remapped (correctable, uncorrectable), pending, failure
    remapped_correctable: int = 0
    remapped_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failed: bool = False
    #: nvmlDeviceGetRetiredPages: addresses of retired pages per cause; pending a reload
    retired_sbe: list[int] = field(default_factory=list)
    retired_dbe: list[int] = field(default_factory=list)
    retired_pending: bool = False
    #: nvmlDeviceGetPcieReplayCounter
    pcie_replays: int = 0
    #: a cap set with nvidia-smi -pl (milliwatts): the enforced limit while the default stays
    power_cap_mw: int | None = None
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
    #: NVLink payload rate (KiB/s per direction) that FakeNvml.advance integrates
    nvlink_tx_kib_per_s: float = 0.0
    nvlink_rx_kib_per_s: float = 0.0
    nvlink_tx_kib: float = 0.0
    nvlink_rx_kib: float = 0.0
    #: MIG mode [current, pending] and the MIG devices present when current is on
    mig_mode: tuple[int, int] = (0, 0)
    mig_devices: list[FakeMig] = field(default_factory=list)
    mig_slots: int = 7
    #: layouts made by enable_mig so far (the next one's instances get new UUIDs)
    mig_layouts: int = 0

    def __post_init__(self) -> None:
        # the opaque nvmlDevice_t NVML hands out; events carry the same pointer
        self._as_parameter_ = ctypes.pointer(pynvml.struct_c_nvmlDevice_t())

    @property
    def mig_enabled(self) -> bool:
        return self.mig_mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE

    def enable_mig(self, slices: list[int]) -> list[FakeMig]:
        """MIG mode on, with one GPU instance (and one compute instance filling it) per entry of
        ``slices`` (its slice count: 1 for 1g, 2 for 2g...), in slots 0, 1, ...; memory is the
        card's usable memory split by slices over :attr:`mig_slots`, as NVIDIA's profiles do."""
        assert self.card.mig_capable and sum(slices) <= self.mig_slots
        self.mig_mode = (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE)
        per_slice = (self.card.memory_total - self.card.memory_reserved) // self.mig_slots
        self.mig_devices = [
            FakeMig(
                slot,
                gpu_instance_id=slot + 1,
                compute_instance_id=0,
                memory_total=per_slice * n,
                multiprocessor_count=16 * n,
                slices=n,
                parent_index=self.index,
                generation=self.mig_layouts,
            )
            for slot, n in enumerate(slices)
        ]
        self.mig_layouts += 1
        return self.mig_devices

    def disable_mig(self) -> None:
        """MIG mode off (``nvidia-smi -mig 0`` and a GPU reset): the instances are gone."""
        self.mig_mode = (pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_DISABLE)
        self.mig_devices = []


@dataclass
class FakeEventSet:
    """One ``nvmlEventSet_t``: registrations (device address -> mask) and queued events."""

    registered: dict[int, int] = field(default_factory=dict)
    queue: deque[tuple[FakeGpu, int, int]] = field(default_factory=deque)
    freed: bool = False


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
        #: id of an nvmlEventSet_t -> its state; the condition guards every set
        self.event_sets: dict[int, FakeEventSet] = {}
        self._events_changed = threading.Condition()

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
            for owner in (gpu, *gpu.mig_devices):
                for metric, rate in owner.gpm_rates.items():
                    owner.gpm_counters[metric] = owner.gpm_counters.get(metric, 0.0) + rate * seconds
            gpu.nvlink_tx_kib += gpu.nvlink_tx_kib_per_s * seconds
            gpu.nvlink_rx_kib += gpu.nvlink_rx_kib_per_s * seconds

    def raise_event(self, index: int, event_type: int, data: int = 0) -> int:
        """The driver reports an event on GPU ``index``; returns how many sets it reached."""
        gpu = self.gpus[index]
        address = ctypes.cast(gpu._as_parameter_, ctypes.c_void_p).value
        reached = 0
        with self._events_changed:
            for event_set in self.event_sets.values():
                if event_set.registered.get(address, 0) & event_type and not event_set.freed:
                    event_set.queue.append((gpu, event_type, data))
                    reached += 1
            self._events_changed.notify_all()
        return reached

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

    def nvmlDeviceGetName(self, gpu: FakeGpu | FakeMig) -> str:
        if isinstance(gpu, FakeMig):  # NVML names a MIG device after its card and profile
            self._enter("nvmlDeviceGetName")
            return f"{self._parent(gpu).card.name} MIG {gpu.profile}"
        self._enter("nvmlDeviceGetName", gpu)
        return gpu.card.name

    def nvmlDeviceGetUUID(self, gpu: FakeGpu | FakeMig) -> str:
        if isinstance(gpu, FakeMig):
            self._enter("nvmlDeviceGetUUID")
            return gpu.uuid
        self._enter("nvmlDeviceGetUUID", gpu)
        return f"GPU-00000000-0000-0000-0000-{gpu.index:012d}"

    def nvmlDeviceGetPciInfo(self, gpu: FakeGpu) -> pynvml.nvmlPciInfo_t:
        self._enter("nvmlDeviceGetPciInfo", gpu)
        info = pynvml.nvmlPciInfo_t()
        info.busId = f"00000000:{0x18 + gpu.index:02X}:00.0".encode()
        return info

    # -- cheap readings -----------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu | FakeMig) -> pynvml.c_nvmlUtilization_t:
        if isinstance(gpu, FakeMig):  # not supported on MIG devices (dcgm-exporter #216)
            self._enter("nvmlDeviceGetUtilizationRates")
            raise NotSupported()
        self._enter("nvmlDeviceGetUtilizationRates", gpu)
        if gpu.mig_enabled:  # nor on a card in MIG mode: nvidia-smi shows N/A
            raise NotSupported()
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

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu | FakeMig, version: int | None = None) -> Any:
        if isinstance(gpu, FakeMig):
            self._enter("nvmlDeviceGetMemoryInfo")
            free = gpu.memory_total - gpu.memory_used
            if version:
                return pynvml.c_nvmlMemory_v2_t(
                    version=version, total=gpu.memory_total, reserved=0, free=free, used=gpu.memory_used
                )
            return pynvml.c_nvmlMemory_t(total=gpu.memory_total, free=free, used=gpu.memory_used)
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
        return gpu.card.power_limit_mw if gpu.power_cap_mw is None else gpu.power_cap_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, gpu: FakeGpu) -> int:
        self._enter("nvmlDeviceGetPowerManagementDefaultLimit", gpu)
        return gpu.card.power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, gpu: FakeGpu) -> int:
        self._enter("nvmlDeviceGetTotalEnergyConsumption", gpu)
        return int(gpu.energy_mj)

    def nvmlDeviceGetFieldValues(self, gpu: FakeGpu, field_ids: list[Any]) -> Any:
        """Per-field answers, as NVML gives them: the call succeeds, each value has its own return."""
        self._enter("nvmlDeviceGetFieldValues", gpu)
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        counters = {
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: gpu.nvlink_tx_kib,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: gpu.nvlink_rx_kib,
        }
        for i, requested in enumerate(field_ids):
            field_id, scope = requested if isinstance(requested, tuple) else (requested, 0)
            values[i].fieldId, values[i].scopeId = field_id, scope
            values[i].timestamp = int(self.now * 1e6)
            if gpu.card.nvlink and field_id in counters:
                values[i].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
                values[i].value.ullVal = int(counters[field_id])
                values[i].nvmlReturn = pynvml.NVML_SUCCESS
            else:
                values[i].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values

    def nvmlDeviceGetTotalEccErrors(self, gpu: FakeGpu, error_type: int, counter_type: int) -> int:
        self._enter("nvmlDeviceGetTotalEccErrors", gpu)
        if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return gpu.ecc_corrected
        return gpu.ecc_uncorrected

    def nvmlDeviceGetRemappedRows(self, gpu: FakeGpu) -> tuple[int, int, int, int]:
        """pynvml's tuple (corrRows, uncRows, isPending, failureOccurred)."""
        self._enter("nvmlDeviceGetRemappedRows", gpu)
        if not gpu.card.row_remapping or (gpu.mig_enabled and gpu.mig_devices):
            raise NotSupported()
        return (
            gpu.remapped_correctable,
            gpu.remapped_uncorrectable,
            int(gpu.remap_pending),
            int(gpu.remap_failed),
        )

    def nvmlDeviceGetRetiredPages(self, gpu: FakeGpu, cause: int) -> list[int]:
        """pynvml's list of page addresses retired for ``cause``."""
        self._enter("nvmlDeviceGetRetiredPages", gpu)
        if not gpu.card.page_retirement:
            raise NotSupported()
        if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS:
            return list(gpu.retired_sbe)
        if cause == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR:
            return list(gpu.retired_dbe)
        raise pynvml.NVMLError_InvalidArgument()

    def nvmlDeviceGetRetiredPagesPendingStatus(self, gpu: FakeGpu) -> int:
        """An ``nvmlEnableState_t``: NVML_FEATURE_ENABLED while a retirement waits for a reload."""
        self._enter("nvmlDeviceGetRetiredPagesPendingStatus", gpu)
        if not gpu.card.page_retirement:
            raise NotSupported()
        return pynvml.NVML_FEATURE_ENABLED if gpu.retired_pending else pynvml.NVML_FEATURE_DISABLED

    def nvmlDeviceGetPcieReplayCounter(self, gpu: FakeGpu) -> int:
        self._enter("nvmlDeviceGetPcieReplayCounter", gpu)
        return gpu.pcie_replays

    def nvmlDeviceGetPcieThroughput(self, gpu: FakeGpu, counter: int) -> int:
        self._enter("nvmlDeviceGetPcieThroughput", gpu)
        return gpu.pcie_tx_kib if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else gpu.pcie_rx_kib

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGpu | FakeMig) -> list[Any]:
        """On a MIG device its own processes; on a card in MIG mode those of every instance,
        each with its gpuInstanceId/computeInstanceId (``nvmlProcessInfo_v2_t``)."""
        if isinstance(gpu, FakeMig):
            self._enter("nvmlDeviceGetComputeRunningProcesses")
            return [self._process(pid, used, gpu) for pid, used in gpu.processes]
        self._enter("nvmlDeviceGetComputeRunningProcesses", gpu)
        if gpu.mig_enabled:
            return [self._process(pid, used, mig) for mig in gpu.mig_devices for pid, used in mig.processes]
        result = []
        for pid, used in gpu.processes:
            info = pynvml.c_nvmlProcessInfo_t(pid=pid, usedGpuMemory=used or 0)
            obj = pynvml.nvmlStructToFriendlyObject(info)
            if used is None:  # what pynvml does with NVML_VALUE_NOT_AVAILABLE
                obj.usedGpuMemory = None
            result.append(obj)
        return result

    @staticmethod
    def _process(pid: int, used: int, mig: FakeMig) -> Any:
        info = pynvml.c_nvmlProcessInfo_t(
            pid=pid,
            usedGpuMemory=used,
            gpuInstanceId=mig.gpu_instance_id,
            computeInstanceId=mig.compute_instance_id,
        )
        return pynvml.nvmlStructToFriendlyObject(info)

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

    # -- MIG ----------------------------------------------------------------------------

    def nvmlDeviceGetMigMode(self, gpu: FakeGpu) -> list[int]:
        self._enter("nvmlDeviceGetMigMode", gpu)
        if not gpu.card.mig_capable:
            raise NotSupported()
        return list(gpu.mig_mode)

    def nvmlDeviceGetMaxMigDeviceCount(self, gpu: FakeGpu) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", gpu)
        return gpu.mig_slots if gpu.card.mig_capable else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, gpu: FakeGpu, slot: int) -> FakeMig:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", gpu)
        if gpu.mig_mode[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            raise pynvml.NVMLError_InvalidArgument()
        for mig in gpu.mig_devices:
            if mig.slot == slot:
                return mig
        raise pynvml.NVMLError_NotFound()

    def nvmlDeviceIsMigDeviceHandle(self, handle: FakeGpu | FakeMig) -> ctypes.c_uint:
        """As pynvml: a ``c_uint``, 1 for a MIG device handle."""
        self._enter("nvmlDeviceIsMigDeviceHandle")
        return ctypes.c_uint(int(isinstance(handle, FakeMig)))

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, mig: FakeMig) -> FakeGpu:
        self._enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        if not isinstance(mig, FakeMig):
            raise pynvml.NVMLError_InvalidArgument()
        return self._parent(mig)

    def _parent(self, mig: FakeMig) -> FakeGpu:
        return next(gpu for gpu in self.gpus if any(m is mig for m in gpu.mig_devices))

    def nvmlDeviceGetGpuInstanceId(self, mig: FakeMig) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId")
        return mig.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, mig: FakeMig) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId")
        return mig.compute_instance_id

    def nvmlDeviceGetAttributes(self, mig: FakeMig) -> Any:
        self._enter("nvmlDeviceGetAttributes")
        return pynvml.c_nvmlDeviceAttributes(
            multiprocessorCount=mig.multiprocessor_count,
            gpuInstanceSliceCount=mig.slices,
            computeInstanceSliceCount=mig.slices,
            memorySizeMB=mig.memory_total // _MIB,
        )

    # -- events ---------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> Any:
        self._enter("nvmlEventSetCreate")
        handle = pynvml.c_nvmlEventSet_t()
        with self._events_changed:
            self.event_sets[id(handle)] = FakeEventSet()
        return handle

    def _event_set(self, handle: Any) -> FakeEventSet:
        event_set = self.event_sets.get(id(handle))
        if event_set is None or event_set.freed:
            raise pynvml.NVMLError_InvalidArgument()
        return event_set

    def nvmlDeviceGetSupportedEventTypes(self, gpu: FakeGpu) -> int:
        self._enter("nvmlDeviceGetSupportedEventTypes", gpu)
        return gpu.card.events

    def nvmlDeviceRegisterEvents(self, gpu: FakeGpu, event_types: int, handle: Any) -> None:
        self._enter("nvmlDeviceRegisterEvents", gpu)
        if event_types & ~gpu.card.events:
            raise NotSupported()
        address = ctypes.cast(gpu._as_parameter_, ctypes.c_void_p).value
        with self._events_changed:
            event_set = self._event_set(handle)
            event_set.registered[address] = event_set.registered.get(address, 0) | event_types

    def nvmlEventSetWait_v2(self, handle: Any, timeout_ms: int) -> Any:
        self._enter("nvmlEventSetWait_v2")
        with self._events_changed:
            event_set = self._event_set(handle)
            if not event_set.queue:
                self._events_changed.wait_for(lambda: bool(event_set.queue), timeout_ms / 1000)
            if not event_set.queue:
                raise pynvml.NVMLError_Timeout()
            gpu, event_type, data = event_set.queue.popleft()
        return pynvml.c_nvmlEventData_t(
            device=gpu._as_parameter_,
            eventType=event_type,
            eventData=data,
            gpuInstanceId=0xFFFFFFFF,
            computeInstanceId=0xFFFFFFFF,
        )

    def nvmlEventSetFree(self, handle: Any) -> None:
        self._enter("nvmlEventSetFree")
        with self._events_changed:
            self._event_set(handle).freed = True
            self._events_changed.notify_all()

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
            ((gpu.index, None), self.now, dict(gpu.gpm_counters)),
        )
        return buffer

    def nvmlGpmMigSampleGet(self, gpu: FakeGpu, gpu_instance_id: int, buffer: Any) -> Any:
        """A GPM sample of one GPU instance of a card in MIG mode (pynvml's signature: the
        card's handle, the GPU instance id, the buffer)."""
        self._enter("nvmlGpmMigSampleGet", gpu)
        if not gpu.card.gpm:
            raise NotSupported()
        mig = next((m for m in gpu.mig_devices if m.gpu_instance_id == gpu_instance_id), None)
        if not gpu.mig_enabled or mig is None:
            raise pynvml.NVMLError_InvalidArgument()
        address = ctypes.addressof(buffer.contents)
        self.gpm_buffers[address] = (
            self.gpm_buffers[address][0],
            ((gpu.index, gpu_instance_id), self.now, dict(mig.gpm_counters)),
        )
        return buffer

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        self._enter("nvmlGpmMetricsGet")
        first = self.gpm_buffers[ctypes.addressof(request.sample1.contents)][1]
        second = self.gpm_buffers[ctypes.addressof(request.sample2.contents)][1]
        if first is None or second is None or first[0] != second[0] or second[1] <= first[1]:
            raise pynvml.NVMLError_InvalidArgument()
        index, gpu_instance_id = first[0]
        gpu = self.gpus[index]
        owner: FakeGpu | FakeMig = gpu
        if gpu_instance_id is not None:
            owner = next(m for m in gpu.mig_devices if m.gpu_instance_id == gpu_instance_id)
        elapsed = second[1] - first[1]
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            if metric.metricId in owner.gpm_rates:
                delta = second[2].get(metric.metricId, 0.0) - first[2].get(metric.metricId, 0.0)
                metric.value = delta / elapsed
                metric.nvmlReturn = pynvml.NVML_SUCCESS
            else:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return request
