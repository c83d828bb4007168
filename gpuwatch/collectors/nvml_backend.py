"""Real GPUs through NVML (``pynvml``, package ``nvidia-ml-py``).

This is the only module that imports ``pynvml``. ``nvmlInit`` runs once, device handles are
cached, and the readings follow the wire's rule that "cannot tell" is None, never zero.

How NVML fails, and what each failure becomes here:

* ``NVMLError_LibraryNotFound`` / ``DriverNotLoaded`` / no devices at ``nvmlInit``:
  :class:`~gpuwatch.collectors.gpu_backend.GpuBackendUnavailable` (``auto`` then disables the collector);
* ``NVMLError_NotSupported`` / ``FunctionNotFound`` (card too old, driver too old, ECC off):
  the field is None, and the call is remembered per device and not retried every cycle;
  a binding that lacks the function altogether counts the same;
* ``NVMLError_GpuIsLost`` / ``Unknown``: that GPU's sample has ``state="lost"``; the others and
  the agent carry on, and the next sample tries the GPU again;
* the process-utilization calls raise a bare ``NVMLError`` with value 0 (pynvml's reading of a
  successful empty first call) or ``NVML_ERROR_NOT_FOUND`` when no samples are newer than the
  timestamp: that is "no samples", so the per-process ratios are None;
* any other ``NVMLError`` (e.g. ``NoPermission`` in a container): None for this cycle, logged
  once per device and call.

Poll cost decides where each reading happens. Utilization, power, clocks, temperature and
clocks-event reasons are cheap and are polled every ``poll_interval_s`` (1 s by default) by a
background thread, then averaged into the sample, so idle fraction and std-dev come from real
1 s polls. Memory, energy, ECC, PCIe, the process list (milliseconds per call) and GPM are read
once per :meth:`NvmlBackend.sample`. Pass ``start_poller=False`` and call
:meth:`NvmlBackend.poll` to drive the polls yourself (tests do).

XID and ECC events arrive on a third thread (:mod:`~gpuwatch.collectors.nvml_events`), which
blocks in ``nvmlEventSetWait_v2``; each sample takes the codes that arrived since the last one
into ``xid_errors`` (``watch_events=False`` turns it off; the field is then None).

NVLink rates come from GPM on Hopper and newer; on older cards (A100, V100) from the cumulative
``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX`` field values (KiB, all links: scope ``UINT_MAX``)
of ``nvmlDeviceGetFieldValues``, as a delta over the field timestamps of two samples.

MIG: a GPU in MIG mode (``nvmlDeviceGetMigMode``) has its MIG devices listed every sample
(:meth:`NvmlBackend.mig_devices`: count, UUIDs, instance ids, memory, SM count; logged when the
layout changes), and each MIG device is a :class:`GpuSample` of its own after the cards'
(:func:`mig_index`: 1000 + 10 x card index + slot), what a job holds: its ``MIG-`` UUID, its
card (``parent_gpu_index``, ``parent_uuid``), GPU/compute instance ids, its share of the card
(``card_fraction_ratio``: GPU-instance slices / the card's MIG slots), memory and compute
processes read on the MIG handle, and GPM activity from ``nvmlGpmMigSampleGet`` (graphics
engine, SM, tensor, DRAM...) where the card has GPM. ``util_gpu_ratio`` is None there:
``nvmlDeviceGetUtilizationRates`` is not supported on MIG devices (nor on a card in MIG mode),
and ``gr_engine_active_ratio`` is the signal that stands in for it. The card in MIG mode is
still sampled (power, temperature, clocks, energy, ECC, XIDs) with its process list left out
(None): its processes are its instances'.

A MIG mode switched on or off is seen without a restart: each card's mode is read again every
:data:`MIG_RECHECK_SAMPLES` samples, and at the next sample after an NVML answer that hints at
a change (listing a MIG device fails; utilization turns NotSupported); then the card's learnt
"not supported" calls and its instances' GPM buffers are forgotten. Instances created or
destroyed in MIG mode are seen at once (the slots are walked every sample); an instance under a
GPU instance id another had before starts its GPM over.

Memory health and the PCIe link are read once per sample, on the card (a MIG instance's sample
leaves them None, as ECC): ``nvmlDeviceGetRemappedRows`` (Ampere and newer; NotSupported on a
card in MIG mode with instances, so there it is asked again every sample rather than
forgotten), ``nvmlDeviceGetRetiredPages`` by cause and ``nvmlDeviceGetRetiredPagesPendingStatus``
(cards that retire pages: before Ampere, ECC on) and ``nvmlDeviceGetPcieReplayCounter``.

Not covered yet: per-process GPM, NVLink error counters, vGPU. See ``docs/gpu.md``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pynvml

from gpuwatch.collectors.gpu_backend import (
    CLOCKS_EVENT_REASONS,
    DeviceLost,
    DevicePoller,
    GpuBackend,
    GpuBackendUnavailable,
    MigDevice,
    PolledDevice,
    clamp_ratio,
    mean_or_none,
    mig_index,
    poll_means,
    reduce_xids,
    sample_identity,
)
from gpuwatch.collectors.nvml_events import DEFAULT_WAIT_MS, XidEventWatcher, start_watcher
from gpuwatch.wire import GpuProcess, GpuSample

log = logging.getLogger(__name__)

_KIB = 1024
_MIB = 1024 * 1024
#: NVML refuses (or returns noise for) GPM metrics from two samples closer than this
GPM_MIN_SPACING_S = 0.1

#: (pynvml metric constant, GpuSample field, scale to the wire unit): percent -> ratio and
#: MiB/s -> bytes/s. dcgm-exporter's DCGM_FI_PROF_* fields are the same counters.
GPM_METRICS: tuple[tuple[str, str, float], ...] = (
    ("NVML_GPM_METRIC_GRAPHICS_UTIL", "gr_engine_active_ratio", 0.01),
    ("NVML_GPM_METRIC_SM_UTIL", "sm_active_ratio", 0.01),
    ("NVML_GPM_METRIC_SM_OCCUPANCY", "sm_occupancy_ratio", 0.01),
    ("NVML_GPM_METRIC_ANY_TENSOR_UTIL", "tensor_active_ratio", 0.01),
    ("NVML_GPM_METRIC_DRAM_BW_UTIL", "dram_active_ratio", 0.01),
    ("NVML_GPM_METRIC_FP32_UTIL", "fp32_active_ratio", 0.01),
    ("NVML_GPM_METRIC_FP16_UTIL", "fp16_active_ratio", 0.01),
    ("NVML_GPM_METRIC_FP64_UTIL", "fp64_active_ratio", 0.01),
    ("NVML_GPM_METRIC_PCIE_TX_PER_SEC", "pcie_tx_bytes_per_s", float(_MIB)),
    ("NVML_GPM_METRIC_PCIE_RX_PER_SEC", "pcie_rx_bytes_per_s", float(_MIB)),
    ("NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", "nvlink_tx_bytes_per_s", float(_MIB)),
    ("NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", "nvlink_rx_bytes_per_s", float(_MIB)),
)
#: per-process utilization, newest API first; both report "no samples" as an error value
_PROCESS_UTIL_CALLS = ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization")
_KNOWN_REASON_BITS = sum(bit for bit, _ in CLOCKS_EVENT_REASONS)
#: cumulative NVLink data counters (KiB, payload only) for cards without GPM, and their fields
NVLINK_FIELDS: tuple[tuple[str, str], ...] = (
    ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", "nvlink_tx_bytes_per_s"),
    ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", "nvlink_rx_bytes_per_s"),
)
#: remapped rows and retired pages fit a SMALLINT column: NVML documents at most 512 remaps and
#: 64 retirements per card, so a larger answer is not a count and is sent as None
_SMALL_COUNT_MAX = 32767
_REMAPPED_ROWS = "nvmlDeviceGetRemappedRows"
#: field-value scope meaning "all links together" for the NVLink throughput fields
ALL_LINKS_SCOPE = 0xFFFFFFFF
_NVLINK_KEY = "nvmlDeviceGetFieldValues(nvlink)"
#: nvmlValue_t member per NVML_VALUE_TYPE_*
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def field_value(fv: Any) -> float | int:
    """The number in an ``nvmlFieldValue_t``, read through the union member its type names."""
    member = _VALUE_MEMBERS[fv.valueType] if 0 <= fv.valueType < len(_VALUE_MEMBERS) else "ullVal"
    return getattr(fv.value, member)


def reasons_from_mask(mask: int) -> list[str]:
    """Names of the set bits of ``nvmlDeviceGetCurrentClocksEventReasons``; unknown bits as hex."""
    names = [name for bit, name in CLOCKS_EVENT_REASONS if mask & bit]
    unknown = mask & ~_KNOWN_REASON_BITS
    return names + [f"0x{1 << i:x}" for i in range(unknown.bit_length()) if unknown >> i & 1]


@dataclass(frozen=True)
class _Poll:
    """One cheap reading, already in wire units."""

    util_gpu: float | None  # nvmlDeviceGetUtilizationRates().gpu / 100 (utilization.gpu)
    util_memory: float | None  # ...().memory / 100 (utilization.memory)
    power_watts: float | None  # nvmlDeviceGetPowerUsage mW / 1000 (power.draw)
    sm_clock_hz: float | None  # nvmlDeviceGetClockInfo(NVML_CLOCK_SM) MHz (clocks.sm)
    memory_clock_hz: float | None  # nvmlDeviceGetClockInfo(NVML_CLOCK_MEM) MHz (clocks.mem)
    temperature_celsius: float | None  # nvmlDeviceGetTemperature(GPU) (temperature.gpu)
    reasons_mask: int | None  # nvmlDeviceGetCurrentClocksEventReasons (clocks_event_reasons.active)


@dataclass
class _Gpm:
    """Two GPM sample buffers; ``buffers[0]`` holds the previous sample, taken at ``taken_at``."""

    buffers: list[Any]
    taken_at: float


@dataclass
class _Device(PolledDevice):
    """One NVIDIA GPU: what every vendor backend keeps, and what NVML's readings need besides
    (``unsupported`` holds the calls that raised NotSupported/FunctionNotFound)."""

    sm_clock_max_hz: float | None = None
    #: the limit the card boots with (power.default_limit): an enforced limit below it is a cap
    power_default_limit_watts: float | None = None
    gpm: _Gpm | None = None
    #: NVLink field name -> (timestamp us, cumulative KiB) of the previous sample
    nvlink_prev: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: nvmlGpmQueryDeviceSupport said yes (GPM MIG samples need it too)
    gpm_supported: bool = False
    #: nvmlDeviceGetMaxMigDeviceCount when MIG mode is on, else None
    mig_slots: int | None = None
    mig_layout: tuple[tuple[int, str | None], ...] = ()
    #: GPU instance id -> its two GPM MIG sample buffers
    mig_gpm: dict[int, _Gpm] = field(default_factory=dict)
    #: GPU instance id -> the MIG UUID its GPM buffers were sampled on
    mig_gpm_uuid: dict[int, str | None] = field(default_factory=dict)
    #: read the MIG mode again at the next sample (an NVML answer hinted that it changed)
    mig_recheck: bool = False


#: every this many samples each card's MIG mode is read again (``nvmlDeviceGetMigMode``,
#: ~140 us on an H200), so a mode switched on or off is seen without an agent restart: 5 min
#: at the default 10 s interval; an NVML answer that hints at a change rechecks sooner
MIG_RECHECK_SAMPLES = 30


class NvmlBackend(GpuBackend, DevicePoller):
    """Every GPU NVML sees on this host.

    ``nvml`` is ``pynvml`` or a module-shaped stand-in (tests pass a fake that returns the
    real ctypes structs and raises the real ``NVMLError_*`` classes). ``clock`` is the
    monotonic clock that spaces GPM samples and measures intervals. ``watch_events`` starts the
    XID event thread (with ``start_poller``; without it, tests call ``events.wait_once()``).
    """

    name = "nvml"
    simulated = False

    def __init__(
        self,
        poll_interval_s: float = 1.0,
        *,
        nvml: Any = None,
        start_poller: bool = True,
        clock: Callable[[], float] = time.monotonic,
        watch_events: bool = True,
        event_wait_ms: int = DEFAULT_WAIT_MS,
        mig_recheck_samples: int = MIG_RECHECK_SAMPLES,
    ) -> None:
        self._nvml = pynvml if nvml is None else nvml
        self.poll_interval_s = poll_interval_s
        self.mig_recheck_samples = max(1, mig_recheck_samples)
        self._samples = 0
        self._clock = clock
        nv = self._nvml
        self._not_supported = (nv.NVMLError_NotSupported, nv.NVMLError_FunctionNotFound)
        self._lost_errors = (nv.NVMLError_GpuIsLost, nv.NVMLError_Unknown)
        self._no_samples = frozenset({0, nv.NVML_ERROR_NOT_FOUND})
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise GpuBackendUnavailable(str(exc)) from exc
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            nv.nvmlShutdown()
            raise GpuBackendUnavailable(f"nvmlDeviceGetCount: {exc}") from exc
        if count == 0:
            nv.nvmlShutdown()
            raise GpuBackendUnavailable("NVML reports no devices")
        self._closed = False
        self._lock = threading.Lock()
        self._mig: list[MigDevice] = []
        self.events: XidEventWatcher | None = None
        if watch_events:
            self.events = start_watcher(nv, start=start_poller, wait_ms=event_wait_ms)
        self._devices = [_Device(index) for index in range(count)]
        for dev in self._devices:
            self._open(dev)
        self._last_sample_at = self._clock()
        self._start_polling(start_poller, "gpuwatch-nvml-poll")
        log.info("NVML: %d GPU(s): %s", count, ", ".join(f"{d.index}={d.name}" for d in self._devices))

    # -- calling NVML -------------------------------------------------------------------

    def _guard(self, dev: _Device, key: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args)`` with NVML's failure modes mapped (module docstring); None = no value."""
        nv = self._nvml
        try:
            return fn(*args, **kwargs)
        except self._not_supported:
            dev.unsupported.add(key)
            log.debug("GPU %d: %s not supported; not asking again", dev.index, key)
            if key == "nvmlDeviceGetUtilizationRates" and dev.mig_slots is None:
                dev.mig_recheck = True  # what a card answers once MIG mode is switched on
            return None
        except self._lost_errors as exc:
            raise DeviceLost(f"{key}: {exc}") from exc
        except nv.NVMLError as exc:
            if exc.value in self._no_samples and key in _PROCESS_UTIL_CALLS:
                return None
            if dev.first_failure(key, str(exc)):
                log.warning("GPU %d: %s failed: %s", dev.index, key, exc)
            return None

    def _call(self, dev: _Device, fn_name: str, *args: Any, key: str | None = None, **kwargs: Any) -> Any:
        """``nvml.<fn_name>(handle, *args)`` unless known unsupported on this device."""
        key = key or (f"{fn_name}{args}" if args else fn_name)
        if key in dev.unsupported:
            return None
        fn = getattr(self._nvml, fn_name, None)
        if fn is None:  # this pynvml predates the call: as good as FunctionNotFound
            dev.unsupported.add(key)
            return None
        return self._guard(dev, key, fn, dev.handle, *args, **kwargs)

    def _call_first(self, dev: _Device, fn_names: Sequence[str], *args: Any) -> Any:
        """The first of ``fn_names`` the device supports (newest API first)."""
        for fn_name in fn_names:
            if fn_name in dev.unsupported:
                continue
            result = self._call(dev, fn_name, *args, key=fn_name)
            if fn_name not in dev.unsupported:
                return result
        return None

    # -- opening devices ----------------------------------------------------------------

    def _open(self, dev: _Device) -> None:
        """Handle, identity and GPM buffers; a GPU lost already is left to the next sample."""
        nv = self._nvml
        try:
            dev.handle = self._guard(
                dev, "nvmlDeviceGetHandleByIndex", nv.nvmlDeviceGetHandleByIndex, dev.index
            )
            if dev.handle is None:
                return
            dev.name = _text(self._call(dev, "nvmlDeviceGetName"))  # nvidia-smi name
            dev.uuid = _text(self._call(dev, "nvmlDeviceGetUUID"))  # uuid
            pci = self._call(dev, "nvmlDeviceGetPciInfo")  # pci.bus_id
            dev.pci_bus_id = None if pci is None else _text(pci.busId)
            max_mhz = self._call(dev, "nvmlDeviceGetMaxClockInfo", nv.NVML_CLOCK_SM)  # clocks.max.sm
            dev.sm_clock_max_hz = None if max_mhz is None else max_mhz * 1e6
            max_mem = self._call(dev, "nvmlDeviceGetMaxClockInfo", nv.NVML_CLOCK_MEM)  # clocks.max.mem
            dev.memory_clock_max_hz = None if max_mem is None else max_mem * 1e6
            default_mw = self._call(dev, "nvmlDeviceGetPowerManagementDefaultLimit")  # power.default_limit
            dev.power_default_limit_watts = None if default_mw is None else default_mw / 1000
            self._open_gpm(dev)
            self._open_mig(dev)
            if self.events is not None and not self.events.watched(dev.index):
                self.events.register(dev.index, dev.handle)
        except DeviceLost as exc:
            dev.handle = None
            dev.lost = True
            log.warning("GPU %d lost while opening: %s", dev.index, exc)

    def _open_gpm(self, dev: _Device) -> None:
        """Hopper+ only (``nvmlGpmQueryDeviceSupport``): allocate two buffers, take the first sample."""
        support = self._call(dev, "nvmlGpmQueryDeviceSupport")
        if support is None or not support.isSupportedDevice:
            return
        dev.gpm_supported = True
        dev.gpm = self._new_gpm(dev, "nvmlGpmSampleGet")

    def _new_gpm(self, dev: _Device, fn_name: str, *args: Any) -> _Gpm | None:
        """Two buffers and a first sample ``nvml.<fn_name>(handle, *args, buffer)``; None where
        that fails (the buffers are freed)."""
        nv = self._nvml
        buffers = [self._guard(dev, "nvmlGpmSampleAlloc", nv.nvmlGpmSampleAlloc) for _ in range(2)]
        if any(buffer is None for buffer in buffers):
            return None
        if self._call(dev, fn_name, *args, buffers[0], key=fn_name) is None:
            for buffer in buffers:
                self._free_quietly(dev, buffer)
            return None
        return _Gpm(buffers, self._clock())

    def _open_mig(self, dev: _Device) -> None:
        """``nvmlDeviceGetMigMode`` [current, pending]; MIG devices are listed only when current is on."""
        mode = self._call(dev, "nvmlDeviceGetMigMode")
        dev.mig_slots = None
        if mode is None or mode[0] != getattr(self._nvml, "NVML_DEVICE_MIG_ENABLE", 1):
            return
        dev.mig_slots = self._call(dev, "nvmlDeviceGetMaxMigDeviceCount") or 0

    def _recheck_mig(self, dev: _Device) -> None:
        """Read the MIG mode again; when it changed, forget what the card said it does not
        support (utilization, processes: a card in MIG mode refuses what it answers whole) and
        the instances' GPM buffers, so the next samples read the card as it is now."""
        dev.mig_recheck = False
        was = dev.mig_slots is not None
        self._open_mig(dev)
        if (dev.mig_slots is not None) == was:
            return
        log.info(
            "GPU %d (%s): MIG mode now %s", dev.index, dev.uuid, "on" if dev.mig_slots is not None else "off"
        )
        dev.unsupported = set()
        dev.mig_layout = ()
        for gi in list(dev.mig_gpm):
            self._drop_mig_gpm(dev, gi)

    def _drop_mig_gpm(self, dev: _Device, gpu_instance_id: int) -> None:
        """Free one GPU instance's GPM buffers (it is gone, or another instance has its id)."""
        gpm = dev.mig_gpm.pop(gpu_instance_id, None)
        dev.mig_gpm_uuid.pop(gpu_instance_id, None)
        for buffer in gpm.buffers if gpm is not None else ():
            self._free_quietly(dev, buffer)

    # -- polling ------------------------------------------------------------------------

    def _answers(self, dev: _Device) -> bool:
        return not dev.lost and dev.handle is not None

    def _read_cheap(self, dev: _Device) -> _Poll:
        nv = self._nvml
        util = self._call(dev, "nvmlDeviceGetUtilizationRates")
        power_mw = self._call(dev, "nvmlDeviceGetPowerUsage")
        sm_mhz = self._call(dev, "nvmlDeviceGetClockInfo", nv.NVML_CLOCK_SM)
        mem_mhz = self._call(dev, "nvmlDeviceGetClockInfo", nv.NVML_CLOCK_MEM)
        temperature = self._call(dev, "nvmlDeviceGetTemperature", nv.NVML_TEMPERATURE_GPU)
        # ClocksEvent is the newer name (driver 535+) of the same bitmask as ClocksThrottle
        mask = self._call_first(
            dev, ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
        )
        return _Poll(
            util_gpu=None if util is None else clamp_ratio(util.gpu / 100),
            util_memory=None if util is None else clamp_ratio(util.memory / 100),
            power_watts=None if power_mw is None else power_mw / 1000,
            sm_clock_hz=None if sm_mhz is None else sm_mhz * 1e6,
            memory_clock_hz=None if mem_mhz is None else mem_mhz * 1e6,
            temperature_celsius=None if temperature is None else float(temperature),
            reasons_mask=mask,
        )

    # -- sampling -----------------------------------------------------------------------

    def sample(self, now: datetime) -> list[GpuSample]:
        at = self._clock()
        interval_s = max(0.0, at - self._last_sample_at)
        self._last_sample_at = at
        self._samples += 1
        if self._samples % self.mig_recheck_samples == 0:
            for dev in self._devices:
                dev.mig_recheck = True
        mig: list[MigDevice] = []
        instances: list[GpuSample] = []
        samples = [self._sample_device(dev, now, interval_s, mig, instances) for dev in self._devices]
        with self._lock:
            self._mig = mig
        return samples + instances

    def mig_devices(self) -> list[MigDevice]:
        with self._lock:
            return list(self._mig)

    def _sample_device(
        self,
        dev: _Device,
        now: datetime,
        interval_s: float,
        mig: list[MigDevice],
        instances: list[GpuSample],
    ) -> GpuSample:
        with self._lock:
            polls = list(dev.polls)
            dev.polls.clear()
        # before reading the GPU: an XID 79 is exactly what arrives just before it is lost
        xids = reduce_xids(self.events.drain(dev.index)) if self.events is not None else None
        try:
            if dev.handle is None:
                self._open(dev)
                if dev.handle is None:
                    raise DeviceLost("no handle")
            if dev.mig_recheck:
                self._recheck_mig(dev)
            if not polls:  # poller off, or the GPU was lost until now: read once here
                polls = [self._read_cheap(dev)]
            fields = self._read_interval(dev, now, interval_s)
            for device, sample in self._mig_devices(dev, now, interval_s):
                mig.append(device)
                instances.append(sample)
        except DeviceLost as exc:
            self._mark_lost(dev, exc)
            # as the simulated backend: XIDs only when one arrived
            return GpuSample(**sample_identity(dev, now, interval_s), state="lost", xid_errors=xids or None)
        if dev.lost:
            log.warning("GPU %d (%s) answers again", dev.index, dev.uuid)
            dev.lost = False
        masks = [p.reasons_mask for p in polls if p.reasons_mask is not None]
        union = 0
        for mask in masks:
            union |= mask
        return GpuSample(
            **sample_identity(dev, now, interval_s),
            **poll_means(polls),
            sm_clock_max_hz=dev.sm_clock_max_hz,
            memory_clock_max_hz=dev.memory_clock_max_hz,
            power_default_limit_watts=dev.power_default_limit_watts,
            # any reason active at any poll of the interval
            throttle_reasons=reasons_from_mask(union) if masks else None,
            xid_errors=xids,
            **fields,
        )

    def _read_interval(self, dev: _Device, now: datetime, interval_s: float) -> dict[str, Any]:
        """The once-per-sample readings, as GpuSample keyword arguments."""
        nv = self._nvml
        fields: dict[str, Any] = self._memory(dev)
        limit_mw = self._call(dev, "nvmlDeviceGetEnforcedPowerLimit")  # enforced.power.limit
        fields["power_limit_watts"] = None if limit_mw is None else limit_mw / 1000
        energy_mj = self._call(dev, "nvmlDeviceGetTotalEnergyConsumption")  # mJ since driver load
        fields["energy_joules"] = None if energy_mj is None else energy_mj / 1000
        # ecc.errors.{corrected,uncorrected}.aggregate.total; NotSupported when ECC is off
        fields["ecc_corrected_errors"] = self._call(
            dev, "nvmlDeviceGetTotalEccErrors", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC
        )
        fields["ecc_uncorrected_errors"] = self._call(
            dev, "nvmlDeviceGetTotalEccErrors", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_AGGREGATE_ECC
        )
        fields.update(self._memory_health(dev))
        fields.update(self._gpm_metrics(dev))
        if dev.gpm is None:  # GPM has the NVLink rates on Hopper+; older cards have counters
            fields.update(self._nvlink_counters(dev))
        for name, counter in (
            ("pcie_tx_bytes_per_s", nv.NVML_PCIE_UTIL_TX_BYTES),
            ("pcie_rx_bytes_per_s", nv.NVML_PCIE_UTIL_RX_BYTES),
        ):
            if fields.get(name) is None:
                # a 20 ms window in KB/s (KiB, as nvidia-smi dmon's rxpci/txpci); GPM spans the interval
                kib = self._call(dev, "nvmlDeviceGetPcieThroughput", counter)
                fields[name] = None if kib is None else float(kib * _KIB)
        # in MIG mode the card's processes are its instances': listed there, not twice
        fields["processes"] = None if dev.mig_slots else self._processes(dev, now, interval_s)
        return fields

    def _memory_health(self, dev: _Device) -> dict[str, Any]:
        """Row remapping, retired pages and the PCIe replay counter, as GpuSample fields.

        nvidia-smi ``--query-remapped-rows=remapped_rows.{correctable,uncorrectable,pending,failure}``
        and ``--query-gpu=retired_pages.{sbe,dbe,pending}``; NotSupported -> None.
        """
        nv = self._nvml
        fields: dict[str, Any] = {}
        rows = self._call(dev, _REMAPPED_ROWS)  # (corrRows, uncRows, isPending, failureOccurred)
        if dev.mig_slots is not None:
            # "not supported on MIG-enabled GPUs with active instances": a passing state of the
            # card, not a lack of it, so asked again at the next sample
            dev.unsupported.discard(_REMAPPED_ROWS)
        if rows is not None:
            correctable, uncorrectable, pending, failed = rows
            fields["remapped_rows_correctable"] = self._small_count(dev, "remapped rows", correctable)
            fields["remapped_rows_uncorrectable"] = self._small_count(dev, "remapped rows", uncorrectable)
            fields["row_remap_pending"] = bool(pending)
            fields["row_remap_failed"] = bool(failed)
        for name, cause in (
            ("retired_pages_sbe", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
            ("retired_pages_dbe", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"),
        ):
            pages = self._call(dev, "nvmlDeviceGetRetiredPages", getattr(nv, cause))  # page addresses
            fields[name] = None if pages is None else self._small_count(dev, "retired pages", len(pages))
        pending_state = self._call(dev, "nvmlDeviceGetRetiredPagesPendingStatus")  # nvmlEnableState_t
        fields["retired_pages_pending"] = (
            None if pending_state is None else pending_state == getattr(nv, "NVML_FEATURE_ENABLED", 1)
        )
        fields["pcie_replay_errors"] = self._call(dev, "nvmlDeviceGetPcieReplayCounter")
        return fields

    @staticmethod
    def _small_count(dev: _Device, what: str, value: int) -> int | None:
        """``value`` when it can be a count of ``what``, else None (logged once)."""
        if 0 <= value <= _SMALL_COUNT_MAX:
            return int(value)
        if dev.first_failure(what, str(value)):
            log.warning("GPU %d: %s reads %d, not a count; sent as None", dev.index, what, value)
        return None

    def _memory(self, dev: _Device) -> dict[str, int | None]:
        """``nvmlDeviceGetMemoryInfo`` v2 (used excludes the driver's reserve), else v1.

        nvidia-smi ``memory.used``, ``memory.total``, ``memory.reserved``.
        """
        version = getattr(self._nvml, "nvmlMemory_v2", None)
        info = None
        if version is not None:
            info = self._call(
                dev, "nvmlDeviceGetMemoryInfo", version=version, key="nvmlDeviceGetMemoryInfo_v2"
            )
        if info is None:
            info = self._call(dev, "nvmlDeviceGetMemoryInfo")
        if info is None:
            return {"memory_used_bytes": None, "memory_total_bytes": None, "memory_reserved_bytes": None}
        return {
            "memory_used_bytes": int(info.used),
            "memory_total_bytes": int(info.total),
            "memory_reserved_bytes": int(info.reserved) if hasattr(info, "reserved") else None,
        }

    def _processes(self, dev: _Device, now: datetime, interval_s: float) -> list[GpuProcess] | None:
        """``nvmlDeviceGetComputeRunningProcesses`` (``--query-compute-apps=pid,used_memory``)
        with each pid's SM and memory utilization over the interval."""
        procs = self._call(dev, "nvmlDeviceGetComputeRunningProcesses")
        if procs is None:
            return None
        # NVML keeps a ring of recent per-process samples stamped in CPU microseconds; ask
        # for those inside this interval only
        since_us = int((now.timestamp() - interval_s) * 1e6)
        samples = self._call_first(dev, _PROCESS_UTIL_CALLS, since_us) or []
        sm_util: dict[int, list[float]] = {}
        memory_util: dict[int, list[float]] = {}
        for s in samples:  # several samples per pid inside one interval: averaged
            sm_util.setdefault(int(s.pid), []).append(clamp_ratio(s.smUtil / 100))
            memory_util.setdefault(int(s.pid), []).append(clamp_ratio(s.memUtil / 100))
        result = []
        for proc in procs:
            pid = int(proc.pid)
            used = proc.usedGpuMemory  # None where the driver cannot tell (WDDM)
            result.append(
                GpuProcess(
                    pid=pid,
                    used_memory_bytes=None if used is None else int(used),
                    sm_util_ratio=mean_or_none(sm_util.get(pid, [])),
                    memory_util_ratio=mean_or_none(memory_util.get(pid, [])),
                )
            )
        return result

    def _nvlink_counters(self, dev: _Device) -> dict[str, float | None]:
        """NVLink tx/rx bytes/s from two readings of the cumulative KiB field values.

        ``nvmlDeviceGetFieldValues`` answers per field: a field whose ``nvmlReturn`` is not
        success is None; when every field is NotSupported (no NVLink) it is not asked again.
        The first reading, a counter that went backwards (driver reload) or a timestamp that
        did not advance give None: no rate from one snapshot.
        """
        nv = self._nvml
        wanted = [(getattr(nv, const), name) for const, name in NVLINK_FIELDS if hasattr(nv, const)]
        if not wanted or _NVLINK_KEY in dev.unsupported:
            return {}
        request = [(field_id, ALL_LINKS_SCOPE) for field_id, _ in wanted]
        values = self._call(dev, "nvmlDeviceGetFieldValues", request, key=_NVLINK_KEY)
        if values is None:
            return {}
        rates: dict[str, float | None] = {}
        not_supported = 0
        fallback_us = int(self._clock() * 1e6)
        for (_, name), fv in zip(wanted, values, strict=True):
            if fv.nvmlReturn != nv.NVML_SUCCESS:
                not_supported += fv.nvmlReturn == nv.NVML_ERROR_NOT_SUPPORTED
                rates[name] = None
                continue
            stamp = int(fv.timestamp) or fallback_us
            kib = int(field_value(fv))
            previous = dev.nvlink_prev.get(name)
            dev.nvlink_prev[name] = (stamp, kib)
            if previous is None or stamp <= previous[0] or kib < previous[1]:
                rates[name] = None
            else:
                rates[name] = (kib - previous[1]) * _KIB / ((stamp - previous[0]) / 1e6)
        if not_supported == len(wanted):
            dev.unsupported.add(_NVLINK_KEY)
            return {}
        return rates

    def _mig_devices(
        self, dev: _Device, now: datetime, interval_s: float
    ) -> list[tuple[MigDevice, GpuSample]]:
        """The MIG devices of a GPU in MIG mode (empty slots raise NotFound and are skipped),
        each with its sample."""
        if not dev.mig_slots:
            return []
        nv = self._nvml
        found: list[tuple[MigDevice, GpuSample]] = []
        for slot in range(dev.mig_slots):
            try:
                handle = nv.nvmlDeviceGetMigDeviceHandleByIndex(dev.handle, slot)
            except nv.NVMLError_NotFound:
                continue
            except self._lost_errors as exc:
                raise DeviceLost(f"nvmlDeviceGetMigDeviceHandleByIndex: {exc}") from exc
            except nv.NVMLError as exc:
                dev.mig_recheck = True  # e.g. InvalidArgument: MIG mode was switched off
                if dev.first_failure("nvmlDeviceGetMigDeviceHandleByIndex", str(exc)):
                    log.warning("GPU %d: nvmlDeviceGetMigDeviceHandleByIndex(%d): %s", dev.index, slot, exc)
                continue
            found.append(self._mig_device(dev, slot, handle, now, interval_s))
        layout = tuple((m.mig_index, m.uuid) for m, _ in found)
        if layout != dev.mig_layout:
            dev.mig_layout = layout
            present = {m.gpu_instance_id for m, _ in found}
            for gi in [gi for gi in dev.mig_gpm if gi not in present]:  # destroyed instances
                self._drop_mig_gpm(dev, gi)
            log.info(
                "GPU %d (%s) in MIG mode: %d MIG device(s): %s",
                dev.index,
                dev.uuid,
                len(found),
                ", ".join(
                    f"{m.uuid} GI {m.gpu_instance_id} CI {m.compute_instance_id} "
                    f"{(m.memory_total_bytes or 0) // _MIB} MiB {m.multiprocessor_count} SMs"
                    for m, _ in found
                ),
            )
        return found

    def _mig_call(self, dev: _Device, fn_name: str, handle: Any, *args: Any) -> Any:
        """``nvml.<fn_name>(mig handle, *args)``, unless known unsupported on MIG devices of ``dev``."""
        key = f"mig:{fn_name}"
        if key in dev.unsupported:
            return None
        fn = getattr(self._nvml, fn_name, None)
        if fn is None:
            dev.unsupported.add(key)
            return None
        return self._guard(dev, key, fn, handle, *args)

    def _mig_device(
        self, dev: _Device, slot: int, handle: Any, now: datetime, interval_s: float
    ) -> tuple[MigDevice, GpuSample]:
        """One MIG device: what ``/metrics`` shows of it, and its sample (what a job holds)."""
        memory = self._mig_call(dev, "nvmlDeviceGetMemoryInfo", handle)
        attributes = self._mig_call(dev, "nvmlDeviceGetAttributes", handle)
        gpu_instance_id = self._mig_call(dev, "nvmlDeviceGetGpuInstanceId", handle)
        device = MigDevice(
            gpu_index=dev.index,
            parent_uuid=dev.uuid,
            mig_index=slot,
            uuid=_text(self._mig_call(dev, "nvmlDeviceGetUUID", handle)),
            gpu_instance_id=gpu_instance_id,
            compute_instance_id=self._mig_call(dev, "nvmlDeviceGetComputeInstanceId", handle),
            memory_used_bytes=None if memory is None else int(memory.used),
            memory_total_bytes=None if memory is None else int(memory.total),
            multiprocessor_count=None if attributes is None else int(attributes.multiprocessorCount),
        )
        if (
            gpu_instance_id is not None
            and dev.mig_gpm_uuid.get(int(gpu_instance_id), device.uuid) != device.uuid
        ):
            self._drop_mig_gpm(dev, int(gpu_instance_id))  # a new instance under an old id: start over
        gpm = {} if gpu_instance_id is None else self._mig_gpm_metrics(dev, int(gpu_instance_id), device.uuid)
        sample = GpuSample(
            ts=now,
            gpu_index=mig_index(dev.index, slot),
            uuid=device.uuid,
            # "NVIDIA H100 80GB HBM3 MIG 1g.10gb": the card's name and the profile
            name=_text(self._mig_call(dev, "nvmlDeviceGetName", handle)) or dev.name,
            pci_bus_id=dev.pci_bus_id,
            interval_s=interval_s,
            parent_gpu_index=dev.index,
            parent_uuid=dev.uuid,
            mig_gpu_instance_id=gpu_instance_id,
            mig_compute_instance_id=device.compute_instance_id,
            card_fraction_ratio=self._card_fraction(dev, attributes, device.memory_total_bytes),
            memory_used_bytes=device.memory_used_bytes,
            memory_total_bytes=device.memory_total_bytes,
            sm_clock_max_hz=dev.sm_clock_max_hz,
            processes=self._mig_processes(dev, handle),
            **gpm,
        )
        return device, sample

    def _card_fraction(self, dev: _Device, attributes: Any, memory_total: int | None) -> float | None:
        """A MIG device's share of its card: GPU-instance slices over the card's MIG slots
        (``nvmlDeviceGetAttributes().gpuInstanceSliceCount`` / ``nvmlDeviceGetMaxMigDeviceCount``:
        1/7 for a 1g profile on an A100/H100/H200), else its memory over the card's."""
        slices = getattr(attributes, "gpuInstanceSliceCount", 0) if attributes is not None else 0
        if slices and dev.mig_slots:
            return clamp_ratio(slices / dev.mig_slots)
        card = self._memory(dev)["memory_total_bytes"]
        if memory_total and card:
            return clamp_ratio(memory_total / card)
        return None

    def _mig_processes(self, dev: _Device, handle: Any) -> list[GpuProcess] | None:
        """``nvmlDeviceGetComputeRunningProcesses`` on the MIG handle: that instance's processes.
        Per-process utilization is not read (not supported on MIG devices)."""
        procs = self._mig_call(dev, "nvmlDeviceGetComputeRunningProcesses", handle)
        if procs is None:
            return None
        return [
            GpuProcess(
                pid=int(p.pid), used_memory_bytes=None if p.usedGpuMemory is None else int(p.usedGpuMemory)
            )
            for p in procs
        ]

    def _mig_gpm_metrics(
        self, dev: _Device, gpu_instance_id: int, uuid: str | None
    ) -> dict[str, float | None]:
        """GPM metrics of one GPU instance (``nvmlGpmMigSampleGet`` on the card with the GPU
        instance id): the first call only takes the starting sample."""
        if not dev.gpm_supported or "nvmlGpmMigSampleGet" in dev.unsupported:
            return {}
        gpm = dev.mig_gpm.get(gpu_instance_id)
        if gpm is None:
            gpm = self._new_gpm(dev, "nvmlGpmMigSampleGet", gpu_instance_id)
            if gpm is not None:
                dev.mig_gpm[gpu_instance_id] = gpm
                dev.mig_gpm_uuid[gpu_instance_id] = uuid
            return {}
        return self._gpm_between(dev, gpm, "nvmlGpmMigSampleGet", gpu_instance_id)

    def _gpm_metrics(self, dev: _Device) -> dict[str, float | None]:
        """GPM metrics between the previous sample and one taken now (``nvmlGpmMetricsGet``).

        Calls closer than :data:`GPM_MIN_SPACING_S` keep the previous sample, so the next call
        covers the longer interval; the fields are then None for this one.
        """
        if dev.gpm is None:
            return {}
        return self._gpm_between(dev, dev.gpm, "nvmlGpmSampleGet")

    def _gpm_between(self, dev: _Device, gpm: _Gpm, fn_name: str, *args: Any) -> dict[str, float | None]:
        """The metrics between ``gpm``'s previous sample and one taken now by
        ``nvml.<fn_name>(handle, *args, buffer)``."""
        nv = self._nvml
        now = self._clock()
        if now - gpm.taken_at < GPM_MIN_SPACING_S:
            return {}
        current = gpm.buffers[1]
        if self._call(dev, fn_name, *args, current, key=fn_name) is None:
            return {}
        wanted = [
            (getattr(nv, const), name, scale) for const, name, scale in GPM_METRICS if hasattr(nv, const)
        ]
        request = nv.c_nvmlGpmMetricsGet_t()
        request.version = nv.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(wanted)
        request.sample1 = gpm.buffers[0]
        request.sample2 = current
        for i, (metric_id, _, _) in enumerate(wanted):
            request.metrics[i].metricId = metric_id
        result = self._guard(dev, "nvmlGpmMetricsGet", nv.nvmlGpmMetricsGet, request)
        gpm.buffers.reverse()  # the sample just taken is the next call's start
        gpm.taken_at = now
        if result is None:
            return {}
        values: dict[str, float | None] = {}
        for i, (_, name, scale) in enumerate(wanted):
            metric = result.metrics[i]
            if metric.nvmlReturn != nv.NVML_SUCCESS:
                values[name] = None
            elif name.endswith("_ratio"):
                values[name] = clamp_ratio(metric.value * scale)
            else:
                values[name] = max(0.0, metric.value * scale)
        return values

    # -- closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the poller, free GPM buffers, ``nvmlShutdown``; safe to call twice."""
        if not self._end_thread():
            return
        if self.events is not None:  # the event set must go before nvmlShutdown
            self.events.close()
        nv = self._nvml
        for dev in self._devices:
            for gpm in (dev.gpm, *dev.mig_gpm.values()):
                for buffer in gpm.buffers if gpm is not None else ():
                    self._free_quietly(dev, buffer)
            dev.gpm = None
            dev.mig_gpm.clear()
        try:
            nv.nvmlShutdown()
        except nv.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)

    def _free_quietly(self, dev: _Device, buffer: Any) -> None:
        try:
            self._guard(dev, "nvmlGpmSampleFree", self._nvml.nvmlGpmSampleFree, buffer)
        except DeviceLost:
            log.debug("GPU %d: GPM buffer not freed, GPU lost", dev.index)


def _text(value: str | bytes | None) -> str | None:
    """NVML strings arrive as str (pynvml decodes) or bytes (raw struct fields)."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value
