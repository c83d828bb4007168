"""Real AMD GPUs (MI200, MI300 and newer) through ``amdsmi``, ROCm's AMD SMI Python library.

This is the only module that imports ``amdsmi`` (``pip install 'gpuwatch[amd]'``; the wheel
loads the ``libamd_smi.so`` of the installed ROCm). It is imported when the backend starts, not
before, so a node without it runs the NVML backend untouched. ``amdsmi_init`` runs once,
processor handles are cached, and "cannot tell" is None, never zero, as on the wire.

How amdsmi fails, and what each failure becomes here:

* ``amdsmi`` not importable, ``libamd_smi.so`` missing, ``amdsmi_init`` refused, or no GPU
  handle: :class:`~gpuwatch.collectors.gpu.GpuBackendUnavailable` with a one-line reason
  (``auto`` then disables the collector);
* ``AmdSmiLibraryException`` with ``AMDSMI_STATUS_NOT_SUPPORTED`` / ``NOT_YET_IMPLEMENTED`` /
  ``FAIL_LOAD_SYMBOL`` (card or library too old, VM guest): the field is None and the call is
  remembered per GPU and not asked again; a binding that lacks the function counts the same;
* a value amdsmi reports as the string ``"N/A"`` (an all-ones field in the C struct, e.g.
  ``current_socket_power`` on an MI250X, ``throttle_status`` on an MI300X): None this time;
  the call is asked again, since the other fields of its dict still count;
* ``AMDSMI_STATUS_NOT_FOUND`` / ``IO`` / ``DRIVER_NOT_LOADED`` / ``AMDGPU_RESTART_ERR`` /
  ``UNKNOWN_ERROR``: that GPU's sample has ``state="lost"``; the others and the agent carry on,
  and the next sample asks the GPU again;
* ``AmdSmiRetryException`` / ``AmdSmiTimeoutException`` / ``AMDSMI_STATUS_BUSY``: None this
  cycle, not logged (the driver asks to be asked again);
* any other ``AmdSmiException`` (e.g. ``AMDSMI_STATUS_NO_PERM``): None this cycle, logged once
  per GPU and call.

The status codes are the C library's ``amdsmi_status_t`` values (``amdsmi.h``); the binding
raises them as ``AmdSmiLibraryException.err_code``.

Poll cost decides where each reading happens, as in the NVML backend: GFX/UMC activity, socket
power, GFX and memory clocks, the hotspot temperature and the throttle state are polled every
``poll_interval_s`` by a background thread and averaged into the sample (so idle fraction and
std-dev come from real 1 s polls); VRAM, power cap, energy, ECC, XGMI counters and the process
list are read once per :meth:`AmdSmiBackend.sample`.

What amdsmi has no equivalent for stays None: GPM's SM activity and occupancy, tensor and
FP32/16/64 pipe activity (amdsmi reports engine busy time, not pipe or occupancy counters),
DRAM bandwidth utilization, the driver's memory reserve, per-process memory utilization, XID
events. PCIe rates come from ``amdsmi_get_gpu_pci_throughput``, which the driver measures by
sleeping one second per call (amdgpu's ``pcie_bw``): off unless ``pcie_throughput=True``.
See ``docs/gpu.md`` ("AMD GPUs").
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuwatch.collectors.gpu_backend import (
    DeviceLost,
    DevicePoller,
    GpuBackend,
    GpuBackendUnavailable,
    PolledDevice,
    clamp_ratio,
    order_reasons,
    poll_means,
    sample_identity,
)
from gpuwatch.wire import GpuProcess, GpuSample

log = logging.getLogger(__name__)

_MIB = 1024 * 1024
#: ``amdsmi_status_t`` values (``amdsmi.h``): the call cannot work on this GPU or library
NOT_SUPPORTED_STATUSES = frozenset({2, 3, 5})  # NOT_SUPPORTED, NOT_YET_IMPLEMENTED, FAIL_LOAD_SYMBOL
#: the GPU is gone or the driver with it: NOT_FOUND, IO, DRIVER_NOT_LOADED, AMDGPU_RESTART_ERR, UNKNOWN
LOST_STATUSES = frozenset({31, 12, 34, 54, 0xFFFFFFFF})
#: ask again next cycle: TIMEOUT, RETRY, BUSY
RETRY_STATUSES = frozenset({8, 9, 30})
#: XGMI data counters are in kilobytes (``xgmi_read_data_acc``, "KB"); read as 1000 bytes
XGMI_KB = 1000

#: ``amdsmi_get_violation_status`` "active" flags (MI300+) and the wire's reason names for them:
#: PPT is package power tracking (the power cap), PROCHOT a hardware slowdown signal, the
#: socket / VR / HBM limits are thermal
VIOLATION_REASONS: tuple[tuple[str, str], ...] = (
    ("active_ppt_pwr", "sw_power_cap"),
    ("active_prochot_thrm", "hw_slowdown"),
    ("active_socket_thrm", "hw_thermal_slowdown"),
    ("active_vr_thrm", "hw_thermal_slowdown"),
    ("active_hbm_thrm", "hw_thermal_slowdown"),
)
#: the reason for ``gpu_metrics.throttle_status`` (a bare "throttled" flag on MI200 and older):
#: the binding gives no cause, so the name says where it came from
THROTTLE_STATUS_REASON = "amd_throttle_status"


def number(value: Any) -> float | None:
    """An amdsmi reading as a float; None for ``"N/A"``, None, or anything not a number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value)
    return None


def first_number(info: dict[str, Any] | None, keys: Iterable[str]) -> float | None:
    """The first of ``keys`` in ``info`` that holds a number (newer fields first)."""
    if info is None:
        return None
    for key in keys:
        value = number(info.get(key))
        if value is not None:
            return value
    return None


def xgmi_total_kb(values: Any) -> float | None:
    """Sum of the per-link XGMI counters (KB) that exist; None when no link reports one."""
    if not isinstance(values, list | tuple):
        return None
    present = [v for v in (number(x) for x in values) if v is not None]
    return sum(present) if present else None


def describe(exc: BaseException) -> str:
    """One line for an amdsmi exception: its ``err_info`` (``str()`` spans two lines)."""
    info = getattr(exc, "err_info", None)
    return str(info) if info else " ".join(str(exc).split()) or type(exc).__name__


def import_amdsmi() -> Any:
    """The ``amdsmi`` module; :class:`GpuBackendUnavailable` when it or its library is missing."""
    try:
        return importlib.import_module("amdsmi")
    except ImportError as exc:
        detail = "" if exc.name == "amdsmi" else f": {exc}"  # else a module amdsmi needs is missing
        raise GpuBackendUnavailable(f"amdsmi is not installed (pip install 'gpuwatch[amd]'){detail}") from exc
    except OSError as exc:  # the binding loads libamd_smi.so at import
        raise GpuBackendUnavailable(f"amdsmi cannot load libamd_smi: {exc}") from exc


@dataclass(frozen=True)
class _Poll:
    """One cheap reading, already in wire units."""

    util_gpu: float | None  # amdsmi_get_gpu_activity gfx_activity % / 100
    util_memory: float | None  # ... umc_activity % / 100 (memory controller busy)
    power_watts: float | None  # amdsmi_get_power_info socket power, W
    sm_clock_hz: float | None  # amdsmi_get_clock_info(GFX) clk, MHz (the GFX clock drives the CUs)
    memory_clock_hz: float | None  # amdsmi_get_clock_info(MEM) clk, MHz
    temperature_celsius: float | None  # amdsmi_get_temp_metric(HOTSPOT, CURRENT), °C
    reasons: tuple[str, ...] | None  # violation status / throttle_status


@dataclass
class _Device(PolledDevice):
    """One AMD GPU: what every vendor backend keeps, and what amdsmi's readings need besides
    (``unsupported`` holds the calls that raised a not-supported status or are missing)."""

    opened: bool = False
    gfx_clock_max_hz: float | None = None
    #: (monotonic time, read KB, write KB) of the previous XGMI reading
    xgmi_prev: tuple[float, float | None, float | None] | None = None
    #: pid -> (monotonic time, cumulative GFX engine ns) of the previous process list
    gfx_ns_prev: dict[int, tuple[float, float]] = field(default_factory=dict)


class AmdSmiBackend(GpuBackend, DevicePoller):
    """Every AMD GPU amdsmi sees on this host.

    ``amdsmi`` is the ``amdsmi`` module or a module-shaped stand-in (tests pass
    ``tests/gpu/fake_amdsmi.py``); None imports the real one. ``clock`` is the monotonic clock
    that measures intervals and counter rates. ``start_poller=False`` leaves the 1 s polls to the
    caller (:meth:`poll`); ``pcie_throughput=True`` reads PCIe rates at one second per GPU.
    """

    name = "amdsmi"
    simulated = False

    def __init__(
        self,
        poll_interval_s: float = 1.0,
        *,
        amdsmi: Any = None,
        start_poller: bool = True,
        clock: Callable[[], float] = time.monotonic,
        pcie_throughput: bool = False,
    ) -> None:
        self._am = import_amdsmi() if amdsmi is None else amdsmi
        self.poll_interval_s = poll_interval_s
        self.pcie_throughput = pcie_throughput
        self._clock = clock
        handles = self._init_library()
        self._closed = False
        self._lock = threading.Lock()
        self._devices = [_Device(index, handle) for index, handle in enumerate(handles)]
        for dev in self._devices:
            self._open(dev)
        self._last_sample_at = self._clock()
        self._start_polling(start_poller, "gpuwatch-amdsmi-poll")
        names = ", ".join(f"{d.index}={d.name}" for d in self._devices)
        log.info("amdsmi: %d GPU(s): %s", len(handles), names)

    def _init_library(self) -> list[Any]:
        """``amdsmi_init(INIT_AMD_GPUS)`` and ``amdsmi_get_processor_handles``; unavailable when none."""
        am = self._am
        try:
            am.amdsmi_init(am.AmdSmiInitFlags.INIT_AMD_GPUS)
        except am.AmdSmiException as exc:
            raise GpuBackendUnavailable(f"amdsmi_init: {describe(exc)}") from exc
        try:
            handles = list(am.amdsmi_get_processor_handles())
        except am.AmdSmiException as exc:
            self._shut_down()
            raise GpuBackendUnavailable(f"amdsmi_get_processor_handles: {describe(exc)}") from exc
        if not handles:
            self._shut_down()
            raise GpuBackendUnavailable("amdsmi finds no GPU")
        return handles

    # -- calling amdsmi -----------------------------------------------------------------

    def _call(self, dev: _Device, fn_name: str, *args: Any, key: str | None = None) -> Any:
        """``amdsmi.<fn_name>(handle, *args)`` with the failure modes of the module docstring."""
        key = key or fn_name
        if key in dev.unsupported:
            return None
        fn = getattr(self._am, fn_name, None)
        if fn is None:  # this binding predates the call: as good as not supported
            dev.unsupported.add(key)
            return None
        try:
            return fn(dev.handle, *args)
        except self._am.AmdSmiException as exc:
            return self._failed(dev, key, exc)

    def _failed(self, dev: _Device, key: str, exc: BaseException) -> None:
        """Sort one amdsmi exception: not supported, lost, retry, or logged once."""
        code = getattr(exc, "err_code", None)
        if code in NOT_SUPPORTED_STATUSES:
            dev.unsupported.add(key)
            log.debug("GPU %d: %s not supported; not asking again", dev.index, key)
            return None
        if code in LOST_STATUSES:
            raise DeviceLost(f"{key}: {describe(exc)}") from exc
        if code in RETRY_STATUSES:
            return None
        message = describe(exc)
        if dev.first_failure(key, message):
            log.warning("GPU %d: %s failed: %s", dev.index, key, message)
        return None

    def _shut_down(self) -> None:
        try:
            self._am.amdsmi_shut_down()
        except self._am.AmdSmiException as exc:
            log.debug("amdsmi_shut_down: %s", describe(exc))

    # -- opening devices ----------------------------------------------------------------

    def _open(self, dev: _Device) -> None:
        """Identity and clock limits; a GPU lost already is left to the next sample."""
        am = self._am
        try:
            asic = self._call(dev, "amdsmi_get_gpu_asic_info")  # amd-smi static --asic
            dev.name = _text(asic.get("market_name")) if asic else None
            dev.uuid = _text(self._call(dev, "amdsmi_get_gpu_device_uuid"))
            dev.pci_bus_id = _text(self._call(dev, "amdsmi_get_gpu_device_bdf"))
            gfx = self._call(dev, "amdsmi_get_clock_info", am.AmdSmiClkType.GFX, key="clock(GFX)")
            dev.gfx_clock_max_hz = _mhz(first_number(gfx, ("max_clk",)))
            mem = self._call(dev, "amdsmi_get_clock_info", am.AmdSmiClkType.MEM, key="clock(MEM)")
            dev.memory_clock_max_hz = _mhz(first_number(mem, ("max_clk",)))
            dev.opened = True
        except DeviceLost as exc:
            dev.lost = True
            log.warning("GPU %d lost while opening: %s", dev.index, exc)

    # -- polling ------------------------------------------------------------------------

    def _read_cheap(self, dev: _Device) -> _Poll:
        """The 1 s readings (amdsmi serves them from the card's gpu_metrics table)."""
        am = self._am
        activity = self._call(dev, "amdsmi_get_gpu_activity")
        gfx_pct = first_number(activity, ("gfx_activity",))
        umc_pct = first_number(activity, ("umc_activity",))
        # MI300 fills current_socket_power, MI200 only average_socket_power (the other is "N/A")
        power = self._call(dev, "amdsmi_get_power_info")
        gfx = self._call(dev, "amdsmi_get_clock_info", am.AmdSmiClkType.GFX, key="clock(GFX)")
        mem = self._call(dev, "amdsmi_get_clock_info", am.AmdSmiClkType.MEM, key="clock(MEM)")
        return _Poll(
            util_gpu=None if gfx_pct is None else clamp_ratio(gfx_pct / 100),
            util_memory=None if umc_pct is None else clamp_ratio(umc_pct / 100),
            power_watts=first_number(power, ("current_socket_power", "socket_power", "average_socket_power")),
            sm_clock_hz=_mhz(first_number(gfx, ("clk",))),
            memory_clock_hz=_mhz(first_number(mem, ("clk",))),
            temperature_celsius=self._hotspot_celsius(dev),
            reasons=self._throttle_reasons(dev),
        )

    def _hotspot_celsius(self, dev: _Device) -> float | None:
        """``amdsmi_get_temp_metric(HOTSPOT, CURRENT)``, °C: the junction sensor, the one every
        MI card has (an MI300X has no edge sensor); it reads hotter than the edge."""
        am = self._am
        value = self._call(
            dev,
            "amdsmi_get_temp_metric",
            am.AmdSmiTemperatureType.HOTSPOT,
            am.AmdSmiTemperatureMetric.CURRENT,
            key="temp(HOTSPOT)",
        )
        return number(value)

    def _throttle_reasons(self, dev: _Device) -> tuple[str, ...] | None:
        """Active limits: ``amdsmi_get_violation_status`` on MI300+, else ``throttle_status``.

        None when neither says; ``()`` when one says "not throttled".
        """
        status = self._call(dev, "amdsmi_get_violation_status")
        if status is not None:
            known = [(status.get(flag), reason) for flag, reason in VIOLATION_REASONS]
            known = [(value, reason) for value, reason in known if isinstance(value, bool)]
            return tuple(order_reasons(reason for value, reason in known if value)) if known else None
        if "amdsmi_get_violation_status" not in dev.unsupported:
            return None  # failed this cycle: no fallback to a flag the card may not mean
        metrics = self._call(dev, "amdsmi_get_gpu_metrics_info")
        throttled = None if metrics is None else metrics.get("throttle_status")
        if not isinstance(throttled, int):  # bool (int in older bindings) or "N/A"
            return None
        return (THROTTLE_STATUS_REASON,) if throttled else ()

    # -- sampling -----------------------------------------------------------------------

    def sample(self, now: datetime) -> list[GpuSample]:
        at = self._clock()
        interval_s = max(0.0, at - self._last_sample_at)
        self._last_sample_at = at
        return [self._sample_device(dev, now, interval_s, at) for dev in self._devices]

    def _sample_device(self, dev: _Device, now: datetime, interval_s: float, at: float) -> GpuSample:
        with self._lock:
            polls = list(dev.polls)
            dev.polls.clear()
        try:
            if not dev.opened:
                self._open(dev)
                if not dev.opened:
                    raise DeviceLost("still not answering")
            if not polls:  # poller off, or the GPU was lost until now: read once here
                polls = [self._read_cheap(dev)]
            fields = self._read_interval(dev, at)
        except DeviceLost as exc:
            self._mark_lost(dev, exc)
            return GpuSample(**sample_identity(dev, now, interval_s), state="lost")
        if dev.lost:
            log.warning("GPU %d (%s) answers again", dev.index, dev.uuid)
            dev.lost = False
        reason_polls = [p.reasons for p in polls if p.reasons is not None]
        return GpuSample(
            **sample_identity(dev, now, interval_s),
            **poll_means(polls),
            sm_clock_max_hz=dev.gfx_clock_max_hz,
            memory_clock_max_hz=dev.memory_clock_max_hz,
            # any limit active at any poll of the interval
            throttle_reasons=order_reasons(r for rs in reason_polls for r in rs) if reason_polls else None,
            **fields,
        )

    def _read_interval(self, dev: _Device, at: float) -> dict[str, Any]:
        """The once-per-sample readings, as GpuSample keyword arguments."""
        fields: dict[str, Any] = self._memory(dev)
        fields.update(self._power_caps(dev))
        fields["energy_joules"] = self._energy_joules(dev)
        fields.update(self._ecc(dev))
        fields["pcie_replay_errors"] = self._pcie_replays(dev)
        fields.update(self._xgmi(dev, at))
        if self.pcie_throughput:
            fields.update(self._pcie(dev))
        fields["processes"] = self._processes(dev, at)
        return fields

    def _memory(self, dev: _Device) -> dict[str, int | None]:
        """``amdsmi_get_gpu_vram_usage``: ``vram_used`` / ``vram_total`` in MiB (the library
        divides bytes by 1024²); amdsmi reports no driver reserve."""
        info = self._call(dev, "amdsmi_get_gpu_vram_usage")
        used = first_number(info, ("vram_used",))
        total = first_number(info, ("vram_total",))
        return {
            "memory_used_bytes": None if used is None else int(used * _MIB),
            "memory_total_bytes": None if total is None else int(total * _MIB),
        }

    def _power_caps(self, dev: _Device) -> dict[str, float | None]:
        """``amdsmi_get_power_cap_info``, µW: ``power_cap`` is the cap the firmware enforces now,
        ``default_power_cap`` the one the card boots with."""
        info = self._call(dev, "amdsmi_get_power_cap_info")

        def watts(key: str) -> float | None:
            micro = first_number(info, (key,))
            return None if micro is None or micro <= 0 else micro / 1e6

        return {
            "power_limit_watts": watts("power_cap"),
            "power_default_limit_watts": watts("default_power_cap"),
        }

    def _energy_joules(self, dev: _Device) -> float | None:
        """``amdsmi_get_energy_count``: ``energy_accumulator`` * ``counter_resolution`` is µJ since
        the driver loaded (``power`` is the older name of the same counter)."""
        info = self._call(dev, "amdsmi_get_energy_count")
        count = first_number(info, ("energy_accumulator", "power"))
        resolution = first_number(info, ("counter_resolution",))
        if count is None or resolution is None:
            return None
        return count * resolution / 1e6

    def _ecc(self, dev: _Device) -> dict[str, int | None]:
        """``amdsmi_get_gpu_total_ecc_count``: correctable / uncorrectable over all RAS blocks."""
        info = self._call(dev, "amdsmi_get_gpu_total_ecc_count")
        corrected = first_number(info, ("correctable_count",))
        uncorrected = first_number(info, ("uncorrectable_count",))
        return {
            "ecc_corrected_errors": None if corrected is None else int(corrected),
            "ecc_uncorrected_errors": None if uncorrected is None else int(uncorrected),
        }

    def _pcie_replays(self, dev: _Device) -> int | None:
        """``amdsmi_get_gpu_pci_replay_counter``: the PCIe link's replay counter (a uint64), what
        NVML's ``nvmlDeviceGetPcieReplayCounter`` is; amdsmi has no equivalent of NVML's row
        remapping or retired-page counts by cause, so those stay None."""
        count = self._call(dev, "amdsmi_get_gpu_pci_replay_counter")
        if isinstance(count, int) and not isinstance(count, bool) and 0 <= count < 2**63:
            return count
        return None

    def _xgmi(self, dev: _Device, at: float) -> dict[str, float | None]:
        """XGMI tx/rx bytes/s from two readings of ``amdsmi_get_gpu_metrics_info``'s cumulative
        ``xgmi_write_data_acc`` (sent) and ``xgmi_read_data_acc`` (received), KB per link.

        The first reading, a counter that went back (driver reload) and a clock that did not
        advance give None; a GPU whose every link reads ``"N/A"`` (no XGMI, or gpu_metrics
        older than 1.4) is not asked again.
        """
        if "xgmi" in dev.unsupported:
            return {}
        metrics = self._call(dev, "amdsmi_get_gpu_metrics_info")
        if metrics is None:
            return {}
        read_kb = xgmi_total_kb(metrics.get("xgmi_read_data_acc"))
        write_kb = xgmi_total_kb(metrics.get("xgmi_write_data_acc"))
        if read_kb is None and write_kb is None:
            dev.unsupported.add("xgmi")
            return {}
        previous, dev.xgmi_prev = dev.xgmi_prev, (at, read_kb, write_kb)
        if previous is None or at <= previous[0]:
            return {"nvlink_tx_bytes_per_s": None, "nvlink_rx_bytes_per_s": None}
        seconds = at - previous[0]
        return {
            "nvlink_tx_bytes_per_s": _rate(previous[2], write_kb, seconds),
            "nvlink_rx_bytes_per_s": _rate(previous[1], read_kb, seconds),
        }

    def _pcie(self, dev: _Device) -> dict[str, float | None]:
        """``amdsmi_get_gpu_pci_throughput``: ``sent`` / ``received`` bytes over the one second
        the driver measures while the call blocks."""
        info = self._call(dev, "amdsmi_get_gpu_pci_throughput")
        return {
            "pcie_tx_bytes_per_s": first_number(info, ("sent",)),
            "pcie_rx_bytes_per_s": first_number(info, ("received",)),
        }

    def _processes(self, dev: _Device, at: float) -> list[GpuProcess] | None:
        """``amdsmi_get_gpu_process_list``: pid, VRAM held (``memory_usage.vram_mem``, bytes) and
        the share of the interval the GFX engine ran its work (delta of ``engine_usage.gfx``,
        cumulative ns, over the interval; None the first time a pid is seen)."""
        procs = self._call(dev, "amdsmi_get_gpu_process_list")
        if procs is None:
            return None
        seen: dict[int, tuple[float, float]] = {}
        result = []
        for proc in procs:
            pid = number(proc.get("pid"))
            if pid is None:
                continue
            memory = proc.get("memory_usage") or {}
            vram = first_number(memory, ("vram_mem",))
            if vram is None:
                vram = first_number(proc, ("mem",))
            gfx_ns = first_number(proc.get("engine_usage") or {}, ("gfx",))
            share = None
            if gfx_ns is not None:
                seen[int(pid)] = (at, gfx_ns)
                share = _busy_share(dev.gfx_ns_prev.get(int(pid)), at, gfx_ns)
            result.append(
                GpuProcess(
                    pid=int(pid),
                    used_memory_bytes=None if vram is None else int(vram),
                    sm_util_ratio=share,
                )
            )
        dev.gfx_ns_prev = seen
        return result

    # -- closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the poller, ``amdsmi_shut_down``; safe to call twice."""
        if self._end_thread():
            self._shut_down()


def _mhz(value: float | None) -> float | None:
    return None if value is None else value * 1e6


def _rate(before: float | None, after: float | None, seconds: float) -> float | None:
    """Bytes/s between two cumulative KB readings; None when one is missing or it went back."""
    if before is None or after is None or after < before:
        return None
    return (after - before) * XGMI_KB / seconds


def _busy_share(previous: tuple[float, float] | None, at: float, busy_ns: float) -> float | None:
    """Share of wall time between two readings of a cumulative busy-ns counter."""
    if previous is None or at <= previous[0] or busy_ns < previous[1]:
        return None
    return clamp_ratio((busy_ns - previous[1]) / ((at - previous[0]) * 1e9))


def _text(value: Any) -> str | None:
    """amdsmi strings: str, or "N/A"/empty when the driver does not say."""
    if not isinstance(value, str) or not value.strip() or value == "N/A":
        return None
    return value.strip()
