"""A module-shaped fake of ``amdsmi`` for testing the amdsmi backend without an AMD GPU.

Built from the library's documented Python API (``py-interface/README.md`` and
``amdsmi_interface.py`` of ROCm/amdsmi, ROCm 6.3): the same function names and arguments
(``amdsmi_get_clock_info(handle, AmdSmiClkType.GFX)``), the same return dicts with the same
keys and units, ``"N/A"`` where the C struct holds all ones, and the same exception classes
(``AmdSmiLibraryException(err_code)`` with ``err_code``/``err_info``, ``AmdSmiRetryException``),
raised with the C library's ``amdsmi_status_t`` codes. Like the binding, it checks that enum
arguments are the enum types (``AmdSmiParameterException`` otherwise).

What each card can do is a capability table (:data:`CARDS`): an MI300X-like card (violation
status, XGMI data counters, current socket power, no edge sensor, no ``throttle_status``) and
an MI250X-like one (gpu_metrics 1.3: average socket power only, ``throttle_status`` but no
violation status, no XGMI data counters, PCIe throughput). Readings are plain attributes of
:class:`FakeGpu` in amdsmi's units; :meth:`FakeAmdSmi.advance` moves the fake clock and
integrates the energy, XGMI and per-process GFX-time counters.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import IntEnum
from types import SimpleNamespace
from typing import Any

NA = "N/A"

#: amdsmi_status_t (amdsmi.h), as the binding's ``amdsmi_wrapper`` names them
STATUS = SimpleNamespace(
    AMDSMI_STATUS_SUCCESS=0,
    AMDSMI_STATUS_INVAL=1,
    AMDSMI_STATUS_NOT_SUPPORTED=2,
    AMDSMI_STATUS_NOT_YET_IMPLEMENTED=3,
    AMDSMI_STATUS_FAIL_LOAD_MODULE=4,
    AMDSMI_STATUS_TIMEOUT=8,
    AMDSMI_STATUS_RETRY=9,
    AMDSMI_STATUS_NO_PERM=10,
    AMDSMI_STATUS_IO=12,
    AMDSMI_STATUS_INIT_ERROR=18,
    AMDSMI_STATUS_BUSY=30,
    AMDSMI_STATUS_NOT_FOUND=31,
    AMDSMI_STATUS_NOT_INIT=32,
    AMDSMI_STATUS_DRIVER_NOT_LOADED=34,
    AMDSMI_STATUS_UNKNOWN_ERROR=0xFFFFFFFF,
)
_INFO = {
    1: "AMDSMI_STATUS_INVAL - Invalid parameters",
    2: "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported",
    3: "AMDSMI_STATUS_NOT_YET_IMPLEMENTED - Feature not yet implemented",
    8: "AMDSMI_STATUS_TIMEOUT - Timeout in API call",
    9: "AMDSMI_STATUS_RETRY - Retry operation",
    10: "AMDSMI_STATUS_NO_PERM - Permission Denied",
    12: "AMDSMI_STATUS_IO - I/O Error",
    18: "AMDSMI_STATUS_INIT_ERROR - Initialization error",
    31: "AMDSMI_STATUS_NOT_FOUND - Device Not found",
    32: "AMDSMI_STATUS_NOT_INIT - Device not initialized",
    34: "AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded",
}


class AmdSmiException(Exception):
    """Base of every amdsmi exception."""


class AmdSmiLibraryException(AmdSmiException):
    """A non-success ``amdsmi_status_t``; ``str()`` spans two lines, as the binding's does."""

    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.err_info = _INFO.get(err_code, "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred")

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_code(self) -> int:
        return self.err_code

    def get_error_info(self) -> str:
        return self.err_info


class AmdSmiRetryException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(STATUS.AMDSMI_STATUS_RETRY)


class AmdSmiTimeoutException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(STATUS.AMDSMI_STATUS_TIMEOUT)


class AmdSmiParameterException(AmdSmiException):
    def __init__(self, received: Any, expected: type) -> None:
        super().__init__(f"Invalid parameter: {type(received)}, expected {expected}")
        self.err_code = None


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4
    PCIE = 5


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1


#: violation-status flags (amdsmi_get_violation_status, MI300+)
VIOLATIONS = ("prochot_thrm", "ppt_pwr", "socket_thrm", "vr_thrm", "hbm_thrm")
XGMI_SLOTS = 8  # AMDSMI_MAX_NUM_XGMI_LINKS


@dataclass(frozen=True)
class CardModel:
    """One card model: static properties and what it does not support."""

    market_name: str
    vram_total_mb: int
    power_cap_uw: int
    gfx_max_mhz: int
    mem_max_mhz: int
    #: XGMI links with data counters (gpu_metrics 1.4+); 0: every slot reads "N/A"
    xgmi_links: int
    #: function name (or "temp(EDGE)") -> amdsmi_status_t it raises
    fails: dict[str, int] = field(default_factory=dict)
    #: dict keys the card reports as "N/A" (all ones in the C struct)
    na: frozenset[str] = frozenset()


_NOT_SUPPORTED = STATUS.AMDSMI_STATUS_NOT_SUPPORTED
CARDS: dict[str, CardModel] = {
    # gpu_metrics 1.5: current socket power only, no edge sensor, throttle_status no longer filled
    "MI300X": CardModel(
        "AMD Instinct MI300X",
        196_592,
        750_000_000,
        2100,
        1300,
        xgmi_links=7,
        fails={"temp(EDGE)": _NOT_SUPPORTED, "amdsmi_get_gpu_pci_throughput": _NOT_SUPPORTED},
        na=frozenset({"average_socket_power", "throttle_status", "temperature_edge"}),
    ),
    # one MI250X GCD, gpu_metrics 1.3: average socket power only, no violation status, no XGMI
    # data counters, a bare throttle_status flag
    "MI250X": CardModel(
        "AMD Instinct MI250X",
        65_520,
        560_000_000,
        1700,
        1600,
        xgmi_links=0,
        fails={"amdsmi_get_violation_status": _NOT_SUPPORTED},
        na=frozenset({"current_socket_power", "pcie_bandwidth_acc", "pcie_bandwidth_inst"}),
    ),
}


@dataclass
class FakeProcess:
    """One KFD process on a fake GPU; ``gfx_ns`` integrates ``gfx_busy`` in advance()."""

    pid: int
    vram_bytes: int
    gfx_busy: float = 0.0  # share of wall time its work ran on the GFX engine
    gfx_ns: float = 0.0
    name: str = "python3"


@dataclass
class FakeGpu:
    """One fake device; tests set its readings directly (amdsmi's units)."""

    card: CardModel
    index: int
    gfx_activity: int = 0  # %
    umc_activity: int = 0  # %
    socket_power_w: int = 90
    energy_uj: float = 3.0e12
    counter_resolution: float = 15.259  # µJ per count
    gfx_clk_mhz: int = 132
    mem_clk_mhz: int = 900
    hotspot_c: int = 38
    edge_c: int = 31
    vram_used_mb: int = 283
    ecc_correctable: int = 0
    ecc_uncorrectable: int = 0
    #: amdsmi_get_gpu_pci_replay_counter
    pcie_replays: int = 0
    #: XGMI payload rate per active link (KB/s) that advance() integrates
    xgmi_read_kb_per_s: float = 0.0
    xgmi_write_kb_per_s: float = 0.0
    xgmi_read_kb: float = 1.0e6
    xgmi_write_kb: float = 2.0e6
    pcie_sent: int = 0  # bytes in the last second
    #: a cap an admin set (µW): power_cap follows it, default_power_cap stays
    power_cap_uw: int | None = None
    pcie_received: int = 0
    #: violation name (VIOLATIONS) -> active
    violations: dict[str, bool] = field(default_factory=dict)
    throttle_status: bool = False
    processes: list[FakeProcess] = field(default_factory=list)
    #: when set, every call on this device raises AmdSmiLibraryException(failure)
    failure: int | None = None

    @property
    def uuid(self) -> str:
        return f"{0x74A0 + self.index:04x}74a1-0000-1000-8032-{self.index:012x}"

    @property
    def bdf(self) -> str:
        return f"0000:{0x0C + 0x16 * self.index:02x}:00.0"


class FakeAmdSmi:
    """Stands in for the ``amdsmi`` module: ``AmdSmiBackend(amdsmi=...)`` or ``sys.modules``."""

    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiRetryException = AmdSmiRetryException
    AmdSmiTimeoutException = AmdSmiTimeoutException
    AmdSmiParameterException = AmdSmiParameterException
    AmdSmiInitFlags = AmdSmiInitFlags
    AmdSmiClkType = AmdSmiClkType
    AmdSmiTemperatureType = AmdSmiTemperatureType
    AmdSmiTemperatureMetric = AmdSmiTemperatureMetric
    amdsmi_wrapper = STATUS

    def __init__(self, cards: list[str], *, init_error: int | None = None) -> None:
        self.gpus = [FakeGpu(CARDS[card], index) for index, card in enumerate(cards)]
        self.init_error = init_error
        self.now = 1000.0
        self.calls: Counter[str] = Counter()
        self.initialized = False
        self.shutdowns = 0

    # -- test controls ------------------------------------------------------------------

    def clock(self) -> float:
        """The fake monotonic clock; pass as ``AmdSmiBackend(clock=fake.clock)``."""
        return self.now

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass: energy, XGMI and per-process GFX counters integrate."""
        self.now += seconds
        for gpu in self.gpus:
            gpu.energy_uj += gpu.socket_power_w * 1e6 * seconds
            gpu.xgmi_read_kb += gpu.xgmi_read_kb_per_s * seconds
            gpu.xgmi_write_kb += gpu.xgmi_write_kb_per_s * seconds
            for proc in gpu.processes:
                proc.gfx_ns += proc.gfx_busy * seconds * 1e9

    def _enter(self, name: str, gpu: Any = None) -> None:
        self.calls[name] += 1
        if not self.initialized:
            raise AmdSmiLibraryException(STATUS.AMDSMI_STATUS_NOT_INIT)
        if gpu is None:
            return
        if not isinstance(gpu, FakeGpu):
            raise AmdSmiParameterException(gpu, FakeGpu)
        if gpu.failure is not None:
            raise AmdSmiLibraryException(gpu.failure)
        if name in gpu.card.fails:
            raise AmdSmiLibraryException(gpu.card.fails[name])

    def _na(self, gpu: FakeGpu, values: dict[str, Any]) -> dict[str, Any]:
        """The card's "N/A" keys replaced, as the binding does for all-ones fields."""
        return {key: NA if key in gpu.card.na else value for key, value in values.items()}

    # -- library ------------------------------------------------------------------------

    def amdsmi_init(self, flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        self.calls["amdsmi_init"] += 1
        if not isinstance(flag, AmdSmiInitFlags):
            raise AmdSmiParameterException(flag, AmdSmiInitFlags)
        if self.init_error is not None:
            raise AmdSmiLibraryException(self.init_error)
        self.initialized = True

    def amdsmi_shut_down(self) -> None:
        self._enter("amdsmi_shut_down")
        self.initialized = False
        self.shutdowns += 1

    def amdsmi_get_processor_handles(self) -> list[FakeGpu]:
        self._enter("amdsmi_get_processor_handles")
        return list(self.gpus)

    # -- identity -----------------------------------------------------------------------

    def amdsmi_get_gpu_asic_info(self, gpu: FakeGpu) -> dict[str, Any]:
        self._enter("amdsmi_get_gpu_asic_info", gpu)
        return {
            "market_name": gpu.card.market_name,
            "vendor_id": "0x1002",
            "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
            "device_id": "0x74a1",
            "rev_id": "0x00",
            "asic_serial": f"0x{0xD1D8 + gpu.index:016X}",
            "oam_id": gpu.index,
            "num_of_compute_units": 304,
            "target_graphics_version": "gfx942",
        }

    def amdsmi_get_gpu_device_uuid(self, gpu: FakeGpu) -> str:
        self._enter("amdsmi_get_gpu_device_uuid", gpu)
        return gpu.uuid

    def amdsmi_get_gpu_device_bdf(self, gpu: FakeGpu) -> str:
        self._enter("amdsmi_get_gpu_device_bdf", gpu)
        return gpu.bdf

    # -- cheap readings -----------------------------------------------------------------

    def amdsmi_get_gpu_activity(self, gpu: FakeGpu) -> dict[str, Any]:
        self._enter("amdsmi_get_gpu_activity", gpu)
        return self._na(
            gpu, {"gfx_activity": gpu.gfx_activity, "umc_activity": gpu.umc_activity, "mm_activity": NA}
        )

    def amdsmi_get_power_info(self, gpu: FakeGpu) -> dict[str, Any]:
        """Socket power in W (from gpu_metrics); ``power_limit`` is hwmon's power1_cap (µW)."""
        self._enter("amdsmi_get_power_info", gpu)
        return self._na(
            gpu,
            {
                "current_socket_power": gpu.socket_power_w,
                "average_socket_power": gpu.socket_power_w,
                "gfx_voltage": NA,
                "soc_voltage": NA,
                "mem_voltage": NA,
                "power_limit": gpu.card.power_cap_uw,
            },
        )

    def amdsmi_get_clock_info(self, gpu: FakeGpu, clock_type: AmdSmiClkType) -> dict[str, Any]:
        self._enter("amdsmi_get_clock_info", gpu)
        if not isinstance(clock_type, AmdSmiClkType):
            raise AmdSmiParameterException(clock_type, AmdSmiClkType)
        if clock_type == AmdSmiClkType.GFX:
            current, top = gpu.gfx_clk_mhz, gpu.card.gfx_max_mhz
        elif clock_type == AmdSmiClkType.MEM:
            current, top = gpu.mem_clk_mhz, gpu.card.mem_max_mhz
        else:
            raise AmdSmiLibraryException(_NOT_SUPPORTED)
        return {"clk": current, "min_clk": 500, "max_clk": top, "clk_locked": False, "clk_deep_sleep": False}

    def amdsmi_get_temp_metric(
        self, gpu: FakeGpu, sensor: AmdSmiTemperatureType, metric: AmdSmiTemperatureMetric
    ) -> int:
        """°C: the library divides the sensor's millidegrees by 1000."""
        self._enter("amdsmi_get_temp_metric", gpu)
        if not isinstance(sensor, AmdSmiTemperatureType):
            raise AmdSmiParameterException(sensor, AmdSmiTemperatureType)
        if not isinstance(metric, AmdSmiTemperatureMetric):
            raise AmdSmiParameterException(metric, AmdSmiTemperatureMetric)
        key = f"temp({sensor.name})"
        if key in gpu.card.fails:
            raise AmdSmiLibraryException(gpu.card.fails[key])
        if sensor == AmdSmiTemperatureType.HOTSPOT:
            return gpu.hotspot_c
        if sensor == AmdSmiTemperatureType.EDGE:
            return gpu.edge_c
        raise AmdSmiLibraryException(_NOT_SUPPORTED)

    def amdsmi_get_violation_status(self, gpu: FakeGpu) -> dict[str, Any]:
        self._enter("amdsmi_get_violation_status", gpu)
        status: dict[str, Any] = {"reference_timestamp": int(self.now * 1e6), "acc_counter": 1000}
        for name in VIOLATIONS:
            active = gpu.violations.get(name, False)
            status[f"acc_{name}"] = 1000 if active else 0
            status[f"per_{name}"] = 100 if active else 0
            status[f"active_{name}"] = active
        return status

    # -- per-sample readings ------------------------------------------------------------

    def amdsmi_get_gpu_vram_usage(self, gpu: FakeGpu) -> dict[str, int]:
        """MiB ("MB"): the library divides bytes by 1024 * 1024."""
        self._enter("amdsmi_get_gpu_vram_usage", gpu)
        return {"vram_total": gpu.card.vram_total_mb, "vram_used": gpu.vram_used_mb}

    def amdsmi_get_power_cap_info(self, gpu: FakeGpu) -> dict[str, int]:
        """µW, except ``dpm_cap`` (MHz)."""
        self._enter("amdsmi_get_power_cap_info", gpu)
        default = gpu.card.power_cap_uw
        return {
            "power_cap": default if gpu.power_cap_uw is None else gpu.power_cap_uw,
            "default_power_cap": default,
            "dpm_cap": 3,
            "min_power_cap": 0,
            "max_power_cap": default,
        }

    def amdsmi_get_energy_count(self, gpu: FakeGpu) -> dict[str, Any]:
        """``energy_accumulator`` * ``counter_resolution`` = µJ; ``power`` is the old name."""
        self._enter("amdsmi_get_energy_count", gpu)
        count = int(gpu.energy_uj / gpu.counter_resolution)
        return {
            "power": count,
            "energy_accumulator": count,
            "counter_resolution": gpu.counter_resolution,
            "timestamp": int(self.now * 1e9),
        }

    def amdsmi_get_gpu_total_ecc_count(self, gpu: FakeGpu) -> dict[str, int]:
        self._enter("amdsmi_get_gpu_total_ecc_count", gpu)
        return {
            "correctable_count": gpu.ecc_correctable,
            "uncorrectable_count": gpu.ecc_uncorrectable,
            "deferred_count": 0,
        }

    def amdsmi_get_gpu_pci_replay_counter(self, gpu: FakeGpu) -> int:
        """The binding returns the C function's uint64 as an int."""
        self._enter("amdsmi_get_gpu_pci_replay_counter", gpu)
        return gpu.pcie_replays

    def amdsmi_get_gpu_metrics_info(self, gpu: FakeGpu) -> dict[str, Any]:
        """A representative part of the (70-key) dict; XGMI counters per link slot, KB."""
        self._enter("amdsmi_get_gpu_metrics_info", gpu)
        links = gpu.card.xgmi_links
        read = [gpu.xgmi_read_kb / links if i < links else NA for i in range(XGMI_SLOTS)] if links else None
        write = [gpu.xgmi_write_kb / links if i < links else NA for i in range(XGMI_SLOTS)] if links else None
        return self._na(
            gpu,
            {
                "temperature_edge": gpu.edge_c,
                "temperature_hotspot": gpu.hotspot_c,
                "temperature_mem": gpu.hotspot_c - 5,
                "average_gfx_activity": gpu.gfx_activity,
                "average_umc_activity": gpu.umc_activity,
                "average_mm_activity": NA,
                "average_socket_power": gpu.socket_power_w,
                "current_socket_power": gpu.socket_power_w,
                "energy_accumulator": int(gpu.energy_uj / gpu.counter_resolution),
                "system_clock_counter": int(self.now * 1e9),
                "current_gfxclk": gpu.gfx_clk_mhz,
                "current_uclk": gpu.mem_clk_mhz,
                "throttle_status": gpu.throttle_status,
                "indep_throttle_status": gpu.throttle_status,
                "pcie_link_width": 16,
                "pcie_link_speed": 320,
                "pcie_bandwidth_acc": 0,
                "pcie_bandwidth_inst": 0,
                "xgmi_link_width": 16 if links else NA,
                "xgmi_link_speed": 32 if links else NA,
                "xgmi_read_data_acc": read or [NA] * XGMI_SLOTS,
                "xgmi_write_data_acc": write or [NA] * XGMI_SLOTS,
                "firmware_timestamp": int(self.now * 1e8),
            },
        )

    def amdsmi_get_gpu_pci_throughput(self, gpu: FakeGpu) -> dict[str, int]:
        """Bytes sent / received over the one second the driver measures."""
        self._enter("amdsmi_get_gpu_pci_throughput", gpu)
        return {"sent": gpu.pcie_sent, "received": gpu.pcie_received, "max_pkt_sz": 256}

    def amdsmi_get_gpu_process_list(self, gpu: FakeGpu) -> list[dict[str, Any]]:
        """Per KFD process: ``mem`` and ``memory_usage`` in bytes, ``engine_usage`` in ns."""
        self._enter("amdsmi_get_gpu_process_list", gpu)
        return [
            {
                "name": proc.name,
                "pid": proc.pid,
                "mem": proc.vram_bytes,
                "engine_usage": {"gfx": int(proc.gfx_ns), "enc": 0},
                "memory_usage": {"gtt_mem": 2 * 1024 * 1024, "cpu_mem": 0, "vram_mem": proc.vram_bytes},
            }
            for proc in gpu.processes
        ]
