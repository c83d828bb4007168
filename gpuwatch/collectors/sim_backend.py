"""Simulated GPUs: a seeded, deterministic device model for machines without one.

Why: the classifier, alerts and demo must be testable on a laptop, and a test must get the
same numbers every run. Every reading is a pure function of (seed, GPU index, scenario,
virtual time): virtual time is ``now - start`` in seconds, and noise comes from a hash of
(seed, GPU, poll number, channel), never from a shared random state. Two backends built with
the same arguments and called with the same timestamps return identical samples, whatever
else ran in between.

The model applies NVML's semantics, so code written against it works on real cards:

* polls fall on a grid every ``poll_interval_s`` of virtual time, as the NVML backend's 1 Hz
  poller does; a poll reports what happened in the period before it (NVML utilization is a
  trailing-window average), in NVML's units: integer percent, milliwatts, MHz, whole °C;
* a sample averages the polls inside its interval and computes idle fraction and std-dev with
  the same :func:`~gpuwatch.collectors.gpu_backend.util_stats` as the real backend;
* the total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``) is monotonic and is the
  integral of the polled power over the grid, starting from an uptime's worth of idle energy;
* memory used never exceeds total minus the driver's reserve (``nvmlDeviceGetMemoryInfo_v2``);
* GPM fields (SM activity, occupancy, tensor, DRAM, FP32/FP16/FP64) exist only on models
  that have GPM (Hopper and newer), else they are None as on a real A100; NVLink rates exist
  on every model with NVLink (GPM on Hopper, the NVLink throughput field values before it);
* XID codes go through :func:`~gpuwatch.collectors.gpu_backend.reduce_xids` as the NVML event
  thread's do: ``[]`` when none arrived;
* a lost GPU is ``state="lost"`` with every reading None.

Scenarios live in :data:`SCENARIOS` (name -> :class:`Scenario`), so a new one is one entry.
A scenario spec string names a default and per-GPU overrides: ``"training,gpu7=idle"``.

MIG (off unless ``mig`` names cards; config ``gpu.sim_mig``, spec
``"gpu1=1g:training+1g:idle+2g"``): a card in MIG mode is sampled as the NVML backend
samples one — its own sample keeps power, clocks, temperature and energy (driven by its
instances' activity, each weighted by its share) and has no utilization, GPM field or process
list — and each instance is a sample of its own under :func:`mig_index` (1000 + 10 x card +
slot) with a ``MIG-`` UUID, its card, GPU/compute instance ids (slot + 1, 0),
``card_fraction_ratio`` = slices / 7, its share of the card's memory, its processes, and GPM
activity with ``gr_engine_active_ratio`` standing in for utilization (None on a card without
GPM, as on an A100). An instance runs its own scenario, by default its card's.
"""

from __future__ import annotations

import hashlib
import math
import struct
import uuid
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta

from gpuwatch.collectors.gpu_backend import (
    GpuBackend,
    MigDevice,
    clamp_ratio,
    mean_or_none,
    mig_devices_of,
    mig_index,
    order_reasons,
    reduce_xids,
    util_stats,
)
from gpuwatch.wire import GpuProcess, GpuSample

_MIB = 1024 * 1024


@dataclass(frozen=True)
class DeviceModel:
    """Static properties of one card model, as NVML reports them for the real card."""

    name: str  # nvmlDeviceGetName
    memory_total_bytes: int  # nvmlDeviceGetMemoryInfo total (nvidia-smi memory.total)
    memory_reserved_bytes: int  # v2 reserved: driver/firmware share, approximate
    #: nvmlDeviceGetPowerManagementDefaultLimit (power.default_limit), enforced unless capped
    power_limit_watts: float
    power_idle_watts: float  # typical power.draw of an idle, allocated card
    sm_clock_max_mhz: int  # nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM) (clocks.max.sm)
    memory_clock_mhz: int  # nvmlDeviceGetClockInfo(NVML_CLOCK_MEM) (clocks.mem)
    pcie_bytes_per_s: float  # per direction, the link's nominal rate
    nvlink_bytes_per_s: float  # per direction, all links together
    has_gpm: bool  # nvmlGpmQueryDeviceSupport: Hopper and newer
    #: nvmlDeviceGetRemappedRows (Ampere and newer); before, pages are retired instead
    row_remapping: bool = True


#: Memory totals are what nvidia-smi shows on the real cards (143771 MiB on an H200 SXM,
#: 81559 MiB on an H100 SXM, 81920 MiB on an A100 80GB, 32768 MiB on a V100 32GB).
MODELS: dict[str, DeviceModel] = {
    model.name: model
    for model in (
        DeviceModel("NVIDIA H200", 143_771 * _MIB, 600 * _MIB, 700.0, 75.0, 1980, 3201, 64e9, 450e9, True),
        DeviceModel(
            "NVIDIA H100 80GB HBM3", 81_559 * _MIB, 600 * _MIB, 700.0, 70.0, 1980, 2619, 64e9, 450e9, True
        ),
        # no NVLink bridge: GPU-to-GPU traffic crosses PCIe (Gen5 x16)
        DeviceModel("NVIDIA H100 PCIe", 81_559 * _MIB, 600 * _MIB, 350.0, 50.0, 1755, 1593, 64e9, 0.0, True),
        DeviceModel(
            "NVIDIA A100-SXM4-80GB", 81_920 * _MIB, 500 * _MIB, 400.0, 55.0, 1410, 1593, 32e9, 300e9, False
        ),
        DeviceModel(
            "Tesla V100-SXM2-32GB",
            32_768 * _MIB,
            300 * _MIB,
            300.0,
            40.0,
            1530,
            877,
            16e9,
            150e9,
            False,
            row_remapping=False,
        ),
    )
}


def find_model(name: str) -> DeviceModel:
    """The model named exactly, or by a unique case-insensitive part of its name ("h200")."""
    if name in MODELS:
        return MODELS[name]
    matches = [model for key, model in MODELS.items() if name.lower() in key.lower()]
    if len(matches) != 1:
        raise ValueError(f"unknown or ambiguous GPU model {name!r}; known: {sorted(MODELS)}")
    return matches[0]


@dataclass(frozen=True)
class Activity:
    """What a GPU is doing at one instant, before noise.

    Utilizations and GPM activities are 0..1; ``memory_used`` is a share of the usable memory
    (total minus reserved); ``power`` is 0 at idle power and 1 at the enforced limit;
    ``sm_clock`` a share of the max SM clock; ``pcie`` and ``nvlink`` shares of the model's
    per-direction bandwidth. ``temperature_celsius`` None follows power.
    """

    util_gpu: float = 0.0
    util_memory: float = 0.0
    sm_active: float = 0.0
    sm_occupancy: float = 0.0
    tensor_active: float = 0.0
    dram_active: float = 0.0
    fp32_active: float = 0.0
    fp16_active: float = 0.0
    fp64_active: float = 0.0
    memory_used: float = 0.0
    power: float = 0.0
    sm_clock: float = 0.95
    temperature_celsius: float | None = None
    pcie: float = 0.0
    nvlink: float = 0.0
    throttle_reasons: tuple[str, ...] = ()
    processes: int = 1


class Scenario(ABC):
    """Activity as a function of virtual time (seconds since the scenario's start)."""

    @abstractmethod
    def at(self, t: float) -> Activity | None:
        """The activity at ``t``; None once the GPU is lost."""

    def xids_between(self, t0: float, t1: float) -> list[int]:
        """XID codes raised in (t0, t1]; none for most scenarios."""
        return []

    def repair_pending(self, t: float) -> bool:
        """Whether the card has a memory repair waiting for a GPU reset at ``t``; no for most."""
        return False


@dataclass(frozen=True)
class Steady(Scenario):
    """The same activity all the time (noise aside)."""

    activity: Activity

    def at(self, t: float) -> Activity:
        return self.activity


@dataclass(frozen=True)
class DutyCycle(Scenario):
    """``on`` for the first ``on_s`` of every ``period_s``, ``off`` for the rest.

    All GPUs share the phase, as data-parallel ranks wait for the same loader or collective.
    """

    on: Activity
    off: Activity
    period_s: float
    on_s: float

    def at(self, t: float) -> Activity:
        return self.on if (t % self.period_s) < self.on_s else self.off


@dataclass(frozen=True)
class Switch(Scenario):
    """``before`` until ``at_s``, then ``after``."""

    before: Scenario
    after: Scenario
    at_s: float

    def at(self, t: float) -> Activity | None:
        return self.before.at(t) if t < self.at_s else self.after.at(t)


@dataclass(frozen=True)
class XidThenLost(Scenario):
    """``before`` until an XID at ``at_s``; the GPU drops off ``lost_after_s`` later."""

    before: Scenario
    xid: int
    at_s: float
    lost_after_s: float

    def at(self, t: float) -> Activity | None:
        return self.before.at(t) if t < self.at_s + self.lost_after_s else None

    def xids_between(self, t0: float, t1: float) -> list[int]:
        return [self.xid] if t0 < self.at_s <= t1 else []


@dataclass(frozen=True)
class RepairPending(Scenario):
    """``before`` all along; at ``at_s`` an uncorrectable memory error is repaired by a row remap
    (a page retirement before Ampere) that waits for a GPU reset: XID 63 then, and the card's
    memory health says so from then on. The job goes on: the repair is the admins' to finish."""

    before: Scenario
    at_s: float

    def at(self, t: float) -> Activity | None:
        return self.before.at(t)

    def xids_between(self, t0: float, t1: float) -> list[int]:
        return [63] if t0 < self.at_s <= t1 else []

    def repair_pending(self, t: float) -> bool:
        return t >= self.at_s


class Lost(Scenario):
    """A GPU that no longer answers (NVML_ERROR_GPU_IS_LOST on every call)."""

    def at(self, t: float) -> None:
        return None


TRAINING = Activity(
    util_gpu=0.95,
    util_memory=0.45,
    sm_active=0.80,
    sm_occupancy=0.45,
    tensor_active=0.50,
    dram_active=0.55,
    fp32_active=0.10,
    fp16_active=0.20,
    memory_used=0.70,
    power=0.88,
    pcie=0.05,
    nvlink=0.10,
)
#: allocated, nothing running: the driver parks the SM clock and says gpu_idle
IDLE = Activity(sm_clock=0.17, throttle_reasons=("gpu_idle",), processes=0)
#: waiting for the data loader: process alive, memory held, nothing launched
LOADER_WAIT = Activity(memory_used=0.50, power=0.12, pcie=0.10, sm_clock=0.9)
#: NCCL all-reduce: kernels resident (NVML util high) but SMs mostly waiting on NVLink
ALL_REDUCE = Activity(
    util_gpu=0.90,
    util_memory=0.20,
    sm_active=0.08,
    sm_occupancy=0.05,
    dram_active=0.30,
    fp32_active=0.02,
    memory_used=0.60,
    power=0.35,
    pcie=0.30,
    nvlink=0.70,
)

SCENARIOS: dict[str, Scenario] = {
    "idle": Steady(IDLE),
    "training": Steady(TRAINING),
    # 2 s busy, 3 s waiting: idle fraction 0.6, mean util ~0.38
    "input-bound": DutyCycle(on=TRAINING, off=LOADER_WAIT, period_s=5.0, on_s=2.0),
    "small-batch": Steady(
        Activity(
            util_gpu=0.60,
            util_memory=0.10,
            sm_active=0.25,
            sm_occupancy=0.10,
            tensor_active=0.10,
            dram_active=0.10,
            fp32_active=0.10,
            fp16_active=0.05,
            memory_used=0.08,
            power=0.20,
        )
    ),
    "no-amp": Steady(
        Activity(
            util_gpu=0.97,
            util_memory=0.50,
            sm_active=0.85,
            sm_occupancy=0.50,
            tensor_active=0.01,
            dram_active=0.40,
            fp32_active=0.65,
            memory_used=0.75,
            power=0.80,
        )
    ),
    "memory-pressure": Steady(
        Activity(
            util_gpu=0.12,
            util_memory=0.05,
            sm_active=0.08,
            sm_occupancy=0.05,
            tensor_active=0.02,
            dram_active=0.10,
            fp32_active=0.03,
            memory_used=0.99,
            power=0.12,
        )
    ),
    # 1 s compute, 3 s all-reduce: mean SM activity ~0.25, NVLink ~half its bandwidth
    "comm-bound": DutyCycle(
        on=Activity(
            util_gpu=0.97,
            util_memory=0.45,
            sm_active=0.75,
            sm_occupancy=0.40,
            tensor_active=0.45,
            dram_active=0.50,
            fp32_active=0.10,
            fp16_active=0.15,
            memory_used=0.60,
            power=0.80,
            pcie=0.05,
            nvlink=0.05,
        ),
        off=ALL_REDUCE,
        period_s=4.0,
        on_s=1.0,
    ),
    "throttled": Steady(
        Activity(
            util_gpu=0.95,
            util_memory=0.40,
            sm_active=0.78,
            sm_occupancy=0.45,
            tensor_active=0.45,
            dram_active=0.50,
            fp32_active=0.10,
            fp16_active=0.20,
            memory_used=0.70,
            power=0.60,
            sm_clock=0.55,
            temperature_celsius=92.0,
            throttle_reasons=("hw_thermal_slowdown",),
        )
    ),
    "power-capped": Steady(
        Activity(
            util_gpu=0.97,
            util_memory=0.45,
            sm_active=0.82,
            sm_occupancy=0.45,
            tensor_active=0.55,
            dram_active=0.55,
            fp32_active=0.10,
            fp16_active=0.20,
            memory_used=0.70,
            power=1.0,
            sm_clock=0.72,
            throttle_reasons=("sw_power_cap",),
        )
    ),
    # XID 79: "GPU has fallen off the bus", two minutes in
    "xid": XidThenLost(Steady(TRAINING), xid=79, at_s=120.0, lost_after_s=5.0),
    # XID 63: a row remap waiting for a GPU reset, three minutes in; the training goes on
    "remap": RepairPending(Steady(TRAINING), at_s=180.0),
    "lost": Lost(),
    "idle-after-start": Switch(Steady(TRAINING), Steady(IDLE), at_s=600.0),
}


def parse_scenario_spec(spec: str) -> tuple[str, dict[int, str]]:
    """``"training,gpu7=idle"`` -> ``("training", {7: "idle"})``: a default and overrides."""
    default: str | None = None
    overrides: dict[int, str] = {}
    for part in (piece.strip() for piece in spec.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep:
            if default is not None:
                raise ValueError(f"scenario spec {spec!r}: two default scenarios")
            default = part
        elif key.strip().startswith("gpu") and key.strip()[3:].isdigit():
            overrides[int(key.strip()[3:])] = value.strip()
        else:
            raise ValueError(f"scenario spec {spec!r}: {part!r} is not gpuN=<scenario>")
    if default is None:
        raise ValueError(f"scenario spec {spec!r} names no default scenario")
    return default, overrides


#: MIG slots of a card (A100, H100, H200): a 1g instance is 1/7 of it
MIG_SLOTS = 7


@dataclass(frozen=True)
class SimMig:
    """One simulated MIG instance: its slice count (1 for 1g, ... 7 for 7g) and scenario
    (None: its card's)."""

    slices: int
    scenario: str | Scenario | None = None


def parse_mig_spec(spec: str) -> dict[int, list[SimMig]]:
    """``"gpu1=1g:training+1g:idle+2g,gpu3=7g"`` -> card -> its instances, in slot order.

    Each instance is ``<slices>g`` with an optional ``:<scenario>``; an empty spec is no MIG.
    """
    out: dict[int, list[SimMig]] = {}
    for part in (piece.strip() for piece in spec.split(",")):
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not key.startswith("gpu") or not key[3:].isdigit():
            raise ValueError(f"MIG spec {spec!r}: {part!r} is not gpuN=<slices>g[:scenario]+...")
        instances = []
        for item in value.split("+"):
            size, _, scenario = item.strip().partition(":")
            if not size.endswith("g") or not size[:-1].isdigit():
                raise ValueError(f"MIG spec {spec!r}: {item!r} is not <slices>g[:scenario]")
            instances.append(SimMig(int(size[:-1]), scenario.strip() or None))
        out[int(key[3:])] = instances
    return out


class _SplitCard(Scenario):
    """A card in MIG mode: what its instances do, each weighted by its share of the card (so
    its power and temperature follow them); never lost while its instances run."""

    def __init__(self, parts: Sequence[tuple[Scenario, float]]) -> None:
        self.parts = tuple(parts)

    def at(self, t: float) -> Activity:
        found = [(activity, weight) for scenario, weight in self.parts if (activity := scenario.at(t))]
        mixed: dict[str, object] = {}
        for f in fields(Activity):
            values = [(getattr(a, f.name), w) for a, w in found]
            if f.name == "throttle_reasons":
                mixed[f.name] = tuple(sorted({r for reasons, _ in values for r in reasons}))
            elif f.name == "processes":
                mixed[f.name] = sum(int(v) for v, _ in values)
            elif f.name == "sm_clock":
                mixed[f.name] = max((float(v) for v, _ in values), default=IDLE.sm_clock)
            elif f.name != "temperature_celsius":
                mixed[f.name] = math.fsum(float(v) * w for v, w in values)
        return Activity(**mixed)  # type: ignore[arg-type]

    def xids_between(self, t0: float, t1: float) -> list[int]:
        return [code for scenario, _ in self.parts for code in scenario.xids_between(t0, t1)]

    def repair_pending(self, t: float) -> bool:
        return any(scenario.repair_pending(t) for scenario, _ in self.parts)


def _lookup(scenario: str | Scenario) -> Scenario:
    if isinstance(scenario, Scenario):
        return scenario
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown GPU scenario {scenario!r}; known: {sorted(SCENARIOS)}")
    return SCENARIOS[scenario]


# noise channels: one per independently jittered reading
_CH_UTIL, _CH_UTIL_MEM, _CH_POWER, _CH_CLOCK, _CH_TEMP, _CH_MEM = range(6)
_CH_PCIE_TX, _CH_PCIE_RX, _CH_NVLINK_TX, _CH_NVLINK_RX = range(6, 10)
_CH_GPM = 20  # 20.. one per GPM field
_CH_UPTIME, _CH_PID, _CH_UUID = 100, 101, 102
_GPM_FIELDS = (
    ("sm_active", "sm_active_ratio"),
    ("sm_occupancy", "sm_occupancy_ratio"),
    ("tensor_active", "tensor_active_ratio"),
    ("dram_active", "dram_active_ratio"),
    ("fp32_active", "fp32_active_ratio"),
    ("fp16_active", "fp16_active_ratio"),
    ("fp64_active", "fp64_active_ratio"),
)
#: bus ids of the eight SXM slots of an HGX board; further boards get the next PCI domain
_HGX_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)


@dataclass(frozen=True)
class _Poll:
    """One simulated 1 s poll, in NVML's units."""

    util_gpu_pct: int
    util_memory_pct: int
    power_mw: int
    sm_clock_mhz: int
    temperature_c: int
    reasons: tuple[str, ...]
    pcie_tx: float
    pcie_rx: float
    nvlink_tx: float | None
    nvlink_rx: float | None
    gpm: dict[str, float] | None


class SimulatedBackend(GpuBackend):
    """``gpus`` simulated cards of one ``model`` running ``scenario``.

    ``scenario`` is a name, a spec string with overrides (``"training,gpu7=idle"``) or a
    :class:`Scenario`; ``overrides`` maps GPU index to a scenario name or object and wins over
    the spec. ``power_cap_watts`` is a cap an admin set (``nvidia-smi -pl``): the enforced
    limit, below the model's default. ``start`` is virtual time zero; by default the first
    :meth:`sample` call's time minus ``interval_s``, so the first sample covers
    ``[0, interval_s]``. Later samples cover the time since the previous call.
    """

    name = "sim"
    simulated = True

    def __init__(
        self,
        scenario: str | Scenario = "training",
        *,
        gpus: int = 4,
        seed: int = 0,
        model: str = "NVIDIA H200",
        overrides: Mapping[int, str | Scenario] | None = None,
        poll_interval_s: float = 1.0,
        interval_s: float = 10.0,
        start: datetime | None = None,
        power_cap_watts: float | None = None,
        mig: str | Mapping[int, Sequence[SimMig]] | None = None,
    ) -> None:
        if poll_interval_s <= 0 or interval_s <= 0:
            raise ValueError("poll_interval_s and interval_s must be positive")
        self.model = find_model(model)
        if power_cap_watts is not None and not self.model.power_idle_watts < power_cap_watts:
            raise ValueError(f"power cap {power_cap_watts} W is not above the card's idle power")
        self.power_limit_watts = power_cap_watts or self.model.power_limit_watts
        self.seed = seed
        self.poll_interval_s = poll_interval_s
        self.interval_s = interval_s
        self.start = start
        if isinstance(scenario, str):
            default, spec_overrides = parse_scenario_spec(scenario)
            per_gpu: dict[int, str | Scenario] = {**spec_overrides, **(overrides or {})}
            base = _lookup(default)
        else:
            per_gpu = dict(overrides or {})
            base = scenario
        bad = sorted(index for index in per_gpu if not 0 <= index < gpus)
        if bad:
            raise ValueError(f"scenario override for GPU(s) {bad}, but only {gpus} simulated GPUs")
        self.scenarios = [_lookup(per_gpu[index]) if index in per_gpu else base for index in range(gpus)]
        layout = parse_mig_spec(mig) if isinstance(mig, str) else dict(mig or {})
        bad = sorted(card for card in layout if not 0 <= card < gpus)
        if bad:
            raise ValueError(f"MIG layout for GPU(s) {bad}, but only {gpus} simulated GPUs")
        #: card -> its instances' (slot, slices, scenario)
        self.mig: dict[int, list[tuple[int, int, Scenario]]] = {}
        for card, instances in sorted(layout.items()):
            if sum(i.slices for i in instances) > MIG_SLOTS or any(i.slices < 1 for i in instances):
                raise ValueError(f"MIG layout of GPU {card}: slices must be 1..{MIG_SLOTS} in all")
            own = self.scenarios[card]
            self.mig[card] = [
                (slot, i.slices, own if i.scenario is None else _lookup(i.scenario))
                for slot, i in enumerate(instances)
            ]
            self.scenarios[card] = _SplitCard([(sc, n / MIG_SLOTS) for _, n, sc in self.mig[card]])
        self._mig_seen: list[MigDevice] = []
        self._last_t: float | None = None
        # signed energy integral over the poll grid, per GPU: _energy_pos[g][k] = S(k), k >= 0
        self._energy_pos: list[list[float]] = [[0.0] for _ in range(gpus)]
        self._energy_neg: list[list[float]] = [[0.0] for _ in range(gpus)]

    # -- noise and identity ---------------------------------------------------------------

    def _unit(self, gpu: int, k: int, channel: int) -> float:
        """Uniform in [0, 1) from (seed, gpu, poll, channel): the model's only randomness."""
        key = struct.pack("<QqqI", self.seed & 0xFFFF_FFFF_FFFF_FFFF, gpu, k, channel)
        return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") / 2.0**64

    def _jitter(self, gpu: int, k: int, channel: int) -> float:
        """Symmetric in [-1, 1)."""
        return 2.0 * self._unit(gpu, k, channel) - 1.0

    def _uuid(self, gpu: int) -> str:
        digest = hashlib.blake2b(struct.pack("<QqI", self.seed & (2**64 - 1), gpu, _CH_UUID)).digest()
        return f"GPU-{uuid.UUID(bytes=digest[:16])}"

    @staticmethod
    def _pci_bus_id(gpu: int) -> str:
        return f"{gpu // len(_HGX_BUSES):08X}:{_HGX_BUSES[gpu % len(_HGX_BUSES)]:02X}:00.0"

    # -- the device model -----------------------------------------------------------------

    def _virtual(self, now: datetime) -> float:
        if self.start is None:
            self.start = now - timedelta(seconds=self.interval_s)
        return (now - self.start).total_seconds()

    def _grid(self, t: float) -> int:
        """Index of the last poll at or before ``t`` (tolerant of float rounding)."""
        return math.floor(t / self.poll_interval_s + 1e-9)

    def _power_mw(self, gpu: int, k: int, activity: Activity) -> int:
        model = self.model
        span = self.power_limit_watts - model.power_idle_watts
        watts = model.power_idle_watts + span * (activity.power + 0.02 * self._jitter(gpu, k, _CH_POWER))
        return round(1000 * min(self.power_limit_watts, max(0.9 * model.power_idle_watts, watts)))

    def _poll(self, gpu: int, k: int, scenario: Scenario | None = None) -> _Poll | None:
        """The reading NVML would give at poll ``k``; None when the GPU is lost then.

        ``scenario`` is a MIG instance's (``gpu`` then its wire index, which keys its noise).
        """
        activity = (scenario or self.scenarios[gpu]).at(k * self.poll_interval_s)
        if activity is None:
            return None
        model = self.model

        def pct(level: float, channel: int) -> int:
            # integer percent like NVML; an idle engine reads exactly 0, never noise
            if level <= 0.0:
                return 0
            return min(100, max(1, round(100 * level + 2.0 * self._jitter(gpu, k, channel))))

        def rate(level: float, bandwidth: float, channel: int) -> float:
            return max(0.0, bandwidth * level * (1.0 + 0.05 * self._jitter(gpu, k, channel)))

        power_mw = self._power_mw(gpu, k, activity)
        base_temp = activity.temperature_celsius
        if base_temp is None:
            base_temp = 30.0 + 45.0 * (power_mw / 1000 - model.power_idle_watts) / (
                self.power_limit_watts - model.power_idle_watts
            )
        sm_mhz = activity.sm_clock * model.sm_clock_max_mhz + 15.0 * self._jitter(gpu, k, _CH_CLOCK)
        nvlink = model.nvlink_bytes_per_s > 0
        gpm = None
        if model.has_gpm:
            gpm = {
                attr: clamp_ratio(getattr(activity, attr) * (1.0 + 0.05 * self._jitter(gpu, k, _CH_GPM + i)))
                for i, (attr, _) in enumerate(_GPM_FIELDS)
            }
        return _Poll(
            util_gpu_pct=pct(activity.util_gpu, _CH_UTIL),
            util_memory_pct=pct(activity.util_memory, _CH_UTIL_MEM),
            power_mw=power_mw,
            sm_clock_mhz=round(min(model.sm_clock_max_mhz, max(210.0, sm_mhz))),
            temperature_c=round(base_temp + self._jitter(gpu, k, _CH_TEMP)),
            reasons=activity.throttle_reasons,
            pcie_tx=rate(activity.pcie, model.pcie_bytes_per_s, _CH_PCIE_TX),
            pcie_rx=rate(activity.pcie, model.pcie_bytes_per_s, _CH_PCIE_RX),
            nvlink_tx=rate(activity.nvlink, model.nvlink_bytes_per_s, _CH_NVLINK_TX) if nvlink else None,
            nvlink_rx=rate(activity.nvlink, model.nvlink_bytes_per_s, _CH_NVLINK_RX) if nvlink else None,
            gpm=gpm,
        )

    def _cell_joules(self, gpu: int, k: int) -> float:
        """Energy of the poll period ending at poll ``k`` (a lost GPU draws nothing we see)."""
        activity = self.scenarios[gpu].at(k * self.poll_interval_s)
        if activity is None:
            return 0.0
        return self._power_mw(gpu, k, activity) / 1000 * self.poll_interval_s

    def _integral(self, gpu: int, m: int) -> float:
        """Signed energy from virtual zero to poll ``m``, summed in one fixed order and cached."""
        if m >= 0:
            table = self._energy_pos[gpu]
            while len(table) <= m:
                k = len(table)
                table.append(table[-1] + self._cell_joules(gpu, k))
            return table[m]
        table = self._energy_neg[gpu]
        while len(table) <= -m:
            k = -len(table) + 1  # the period ending at poll k, walking back from zero
            table.append(table[-1] - self._cell_joules(gpu, k))
        return table[-m]

    def energy_joules(self, gpu: int, t: float) -> float:
        """Total-energy counter at virtual time ``t``: an uptime's idle energy plus the integral.

        Power is held piecewise constant over each poll period (the value the poll at its end
        reports), so over grid-aligned intervals energy delta = mean polled power x time.
        """
        uptime_s = 86_400.0 * (1.0 + 6.0 * self._unit(gpu, 0, _CH_UPTIME))
        m = self._grid(t)
        partial = t - m * self.poll_interval_s
        activity = self.scenarios[gpu].at((m + 1) * self.poll_interval_s)
        partial_watts = 0.0 if activity is None else self._power_mw(gpu, m + 1, activity) / 1000
        return self.model.power_idle_watts * uptime_s + self._integral(gpu, m) + partial * partial_watts

    # -- samples --------------------------------------------------------------------------

    def sample(self, now: datetime) -> list[GpuSample]:
        t1 = self._virtual(now)
        t0 = t1 - self.interval_s if self._last_t is None else self._last_t
        self._last_t = t1
        out = [self._sample_gpu(gpu, now, t0, t1) for gpu in range(len(self.scenarios))]
        for card, instances in self.mig.items():
            out.extend(
                self._sample_mig(card, slot, n, scenario, now, t0, t1) for slot, n, scenario in instances
            )
        self._mig_seen = mig_devices_of(out)
        return out

    def mig_devices(self) -> list[MigDevice]:
        return list(self._mig_seen)

    def _sample_mig(
        self, card: int, slot: int, slices: int, scenario: Scenario, now: datetime, t0: float, t1: float
    ) -> GpuSample:
        """One MIG instance of ``card``, as the NVML backend reports one (module doc)."""
        index = mig_index(card, slot)
        model = self.model
        gib = round(model.memory_total_bytes * slices / MIG_SLOTS / 2**30)
        identity = {
            "ts": now,
            "gpu_index": index,
            "uuid": "MIG-" + self._uuid(index)[4:],
            "name": f"{model.name} MIG {slices}g.{gib}gb",
            "interval_s": max(0.0, t1 - t0),
            "simulated": True,
            "parent_gpu_index": card,
            "parent_uuid": self._uuid(card),
            "mig_gpu_instance_id": slot + 1,
            "mig_compute_instance_id": 0,
            "card_fraction_ratio": slices / MIG_SLOTS,
        }
        end = scenario.at(t1)
        if end is None:
            return GpuSample(**identity, state="lost")
        polls, last = self._interval_polls(index, t0, t1, scenario)
        total = (model.memory_total_bytes - model.memory_reserved_bytes) * slices // MIG_SLOTS
        used = self._memory_used(index, last, total, end.memory_used)
        gpm = self._gpm_means(polls)
        # GPM GRAPHICS_UTIL: the engine-busy share NVML utilization would have given
        engine = mean_or_none(p.util_gpu_pct / 100 for p in polls) if model.has_gpm else None
        return GpuSample(
            **identity,
            memory_used_bytes=used,
            memory_total_bytes=total,
            gr_engine_active_ratio=engine,
            processes=self._processes(index, end, used, engine, polls),
            **gpm,
        )

    def _sample_gpu(self, gpu: int, now: datetime, t0: float, t1: float) -> GpuSample:
        scenario = self.scenarios[gpu]
        identity = {
            "ts": now,
            "gpu_index": gpu,
            "uuid": self._uuid(gpu),
            "name": self.model.name,
            "pci_bus_id": self._pci_bus_id(gpu),
            "interval_s": max(0.0, t1 - t0),
            "simulated": True,
        }
        # the simulated event thread sees every XID: [] when none, reduced like NVML's
        xids = reduce_xids(scenario.xids_between(t0, t1))
        end = scenario.at(t1)
        if end is None:
            return GpuSample(**identity, state="lost", xid_errors=xids or None)
        polls, last = self._interval_polls(gpu, t0, t1)
        stats = util_stats([poll.util_gpu_pct / 100 for poll in polls])
        model = self.model
        used = self._memory_used(
            gpu, last, model.memory_total_bytes - model.memory_reserved_bytes, end.memory_used
        )
        gpm = self._gpm_means(polls)
        split = gpu in self.mig
        if split:  # in MIG mode: utilization not supported, activity and processes are the instances'
            gpm = dict.fromkeys(gpm)
            stats = replace(stats, mean=None, idle_fraction=None, stddev=None)
        return GpuSample(
            **identity,
            util_gpu_ratio=stats.mean,
            util_memory_ratio=None if split else mean_or_none(p.util_memory_pct / 100 for p in polls),
            util_gpu_idle_fraction_ratio=stats.idle_fraction,
            util_gpu_stddev_ratio=stats.stddev,
            memory_used_bytes=used,
            memory_total_bytes=model.memory_total_bytes,
            memory_reserved_bytes=model.memory_reserved_bytes,
            power_watts=mean_or_none(p.power_mw / 1000 for p in polls),
            power_limit_watts=self.power_limit_watts,
            power_default_limit_watts=model.power_limit_watts,
            energy_joules=self.energy_joules(gpu, t1),
            sm_clock_hz=mean_or_none(p.sm_clock_mhz * 1e6 for p in polls),
            sm_clock_max_hz=model.sm_clock_max_mhz * 1e6,
            memory_clock_hz=model.memory_clock_mhz * 1e6,
            memory_clock_max_hz=model.memory_clock_mhz * 1e6,  # HBM runs at its max clock
            temperature_celsius=mean_or_none(p.temperature_c for p in polls),
            throttle_reasons=order_reasons(reason for p in polls for reason in p.reasons),
            pcie_tx_bytes_per_s=mean_or_none(p.pcie_tx for p in polls),
            pcie_rx_bytes_per_s=mean_or_none(p.pcie_rx for p in polls),
            nvlink_tx_bytes_per_s=mean_or_none(p.nvlink_tx for p in polls),
            nvlink_rx_bytes_per_s=mean_or_none(p.nvlink_rx for p in polls),
            ecc_corrected_errors=0,
            ecc_uncorrected_errors=0,
            **self._memory_health(split, scenario.repair_pending(t1)),
            xid_errors=xids,
            processes=None if split else self._processes(gpu, end, used, stats.mean, polls),
            **gpm,
        )

    def _memory_health(self, split: bool, pending: bool = False) -> dict[str, int | bool | None]:
        """A healthy card: no remapped rows or retired pages, nothing pending, no PCIe replay;
        with a repair ``pending``, one uncorrectable row remapped (a double-bit page retired)
        waiting for a reset. Row remapping on Ampere and newer (not answered in MIG mode with
        instances, as NVML), page retirement before."""
        remaps = self.model.row_remapping
        rows = remaps and not split
        return {
            "remapped_rows_correctable": 0 if rows else None,
            "remapped_rows_uncorrectable": int(pending) if rows else None,
            "row_remap_pending": pending if rows else None,
            "row_remap_failed": False if rows else None,
            "retired_pages_sbe": None if remaps else 0,
            "retired_pages_dbe": None if remaps else int(pending),
            "retired_pages_pending": None if remaps else pending,
            "pcie_replay_errors": 0,
        }

    def _interval_polls(
        self, gpu: int, t0: float, t1: float, scenario: Scenario | None = None
    ) -> tuple[list[_Poll], int]:
        """The 1 s polls of ``gpu`` in ``(t0, t1]`` and the grid step of the last; an interval
        shorter than a poll gets the latest reading, as NVML would give."""
        first, last = self._grid(t0) + 1, self._grid(t1)
        polls = [poll for k in range(first, last + 1) if (poll := self._poll(gpu, k, scenario)) is not None]
        if not polls:
            polls = [poll] if (poll := self._poll(gpu, last, scenario)) is not None else []
        return polls, last

    def _memory_used(self, gpu: int, k: int, usable: int, level: float) -> int:
        """Bytes in use at ``level`` (a share of ``usable``) at grid step ``k``, with a 0.2 % jitter;
        none at level 0, so an idle allocation reads exactly 0."""
        if level > 0:
            noisy = usable * level * (1.0 + 0.002 * self._jitter(gpu, k, _CH_MEM))
            return min(usable, max(0, round(noisy)))
        return 0

    def _gpm_means(self, polls: list[_Poll]) -> dict[str, float | None]:
        """Each GPM metric as the mean of the polls' (None on a card without GPM)."""
        has_gpm = self.model.has_gpm
        return {
            field: mean_or_none(p.gpm[attr] for p in polls if p.gpm) if has_gpm else None
            for attr, field in _GPM_FIELDS
        }

    def _processes(
        self, gpu: int, end: Activity, used: int, util: float | None, polls: list[_Poll]
    ) -> list[GpuProcess]:
        """``end.processes`` compute processes sharing the memory and the utilization evenly."""
        count = end.processes
        if count == 0:
            return []
        base_pid = 2000 + int(self._unit(gpu, 0, _CH_PID) * 3_000_000)
        memory_util = mean_or_none(p.util_memory_pct / 100 for p in polls)
        return [
            GpuProcess(
                pid=base_pid + 7 * j,
                used_memory_bytes=used // count + (used % count if j == 0 else 0),
                sm_util_ratio=None if util is None else util / count,
                memory_util_ratio=None if memory_util is None else memory_util / count,
            )
            for j in range(count)
        ]
