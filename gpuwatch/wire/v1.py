"""Wire format v1: what an agent sends to the daemon.

One module, shared by both sides, so the agent cannot send what the daemon does not
understand. A batch is one HTTP request body: the node, the agent's version, the schema
version, a batch id (the unit of idempotency: a re-sent batch is stored once) and samples.

Every sample has ``kind`` (the discriminator), ``ts`` (an aware UTC datetime, RFC 3339 on
the wire) and fields whose names end in their unit (``_bytes``, ``_ratio``, ``_watts``,
``_per_s``...). A field that the source cannot give (NVML ``NotSupported``, a counter that
needs a second snapshot) is ``null``, never zero: "no data" is kept apart from "idle".

Rates (``*_per_s``) and ratios over the interval are computed on the agent from two
snapshots of a monotonic counter, because only the agent sees both; the first cycle after
start has no rate and sends ``null``.

``docs/wire-format.md`` documents this module; ``gpuwatch wire-schema`` prints the JSON
Schema generated from it.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field

from gpuwatch.clock import utcnow

SCHEMA_VERSION = 1

Ratio = Annotated[float, Field(ge=0.0, le=1.0)]
NonNeg = Annotated[float, Field(ge=0.0)]
#: fits a BIGINT column: a valid batch must never be one the database refuses
Count = Annotated[int, Field(ge=0, le=2**63 - 1)]
#: GPU indices and port numbers are SMALLINT columns
SmallIndex = Annotated[int, Field(ge=0, le=32767)]
#: a count NVML bounds far below 32767 (remapped rows: at most 512 per card; retired pages: at
#: most 64): a SMALLINT column
SmallCount = Annotated[int, Field(ge=0, le=32767)]
NodeName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
JobId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[0-9A-Za-z_.+-]+$")]


def rfc3339_only(value: Any) -> Any:
    """Refuse what pydantic would read as a Unix time: a number, or text of digits alone."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError("a time is RFC 3339 text with a zone (2026-12-01T10:00:00Z), not a number")
    if isinstance(value, str) and value[:1].isdigit() and (len(value) < 10 or value[4:5] != "-"):
        raise ValueError(f"{value[:32]!r} is not RFC 3339 text with a zone (2026-12-01T10:00:00Z)")
    return value


#: an instant: RFC 3339 text with a zone (or a Python ``datetime``); never a Unix time
Stamp = Annotated[AwareDatetime, BeforeValidator(rfc3339_only)]


class _Sample(BaseModel):
    """Fields every sample kind has."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    # Any zone is accepted and kept (the agent sends UTC, "Z"); storage is by instant, and the
    # one place that needs a calendar day converts (``daemon.store.batch_store.days_of``). A Python
    # validator converting every sample to UTC was a quarter of a batch's parse time.
    ts: Stamp = Field(description="When the reading was taken (RFC 3339 with a zone; the agent sends UTC).")


class GpuProcess(BaseModel):
    """One compute process on a GPU (``nvmlDeviceGetComputeRunningProcesses``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    pid: Count
    used_memory_bytes: Count | None = None
    sm_util_ratio: Ratio | None = Field(
        None, description="nvmlDeviceGetProcessesUtilizationInfo smUtil / 100."
    )
    memory_util_ratio: Ratio | None = None
    job_id: JobId | None = Field(None, description="Slurm job of the pid, from its cgroup/environ.")


class GpuSample(_Sample):
    """One GPU over one sample interval.

    Instantaneous NVML readings are averaged over the 1 s polls inside the interval;
    ``*_ratio`` utilizations are 0..1 (NVML's percent / 100). GPM fields (``sm_active_ratio``
    and below) exist on Hopper and newer only.
    """

    kind: Literal["gpu"] = "gpu"
    gpu_index: SmallIndex = Field(description="NVML device index (not the /dev/nvidiaN minor).")
    uuid: str | None = Field(None, max_length=96)
    name: str | None = Field(None, max_length=96)
    pci_bus_id: str | None = Field(None, max_length=32)
    state: Literal["ok", "lost", "error"] = "ok"
    parent_gpu_index: SmallIndex | None = Field(
        None,
        description="A MIG instance's card (its NVML index); None for a whole GPU. An instance's "
        "own gpu_index is 1000 + 10 x card index + MIG slot.",
    )
    parent_uuid: str | None = Field(None, max_length=96, description="A MIG instance's card UUID.")
    mig_gpu_instance_id: SmallIndex | None = Field(None, description="nvmlDeviceGetGpuInstanceId.")
    mig_compute_instance_id: SmallIndex | None = Field(None, description="nvmlDeviceGetComputeInstanceId.")
    card_fraction_ratio: Ratio | None = Field(
        None,
        description="Share of the card a MIG instance is (GPU-instance slices / the card's MIG "
        "slots: 1/7 for a 1g slice); None for a whole GPU (1).",
    )
    interval_s: NonNeg | None = Field(None, description="Length of the interval averaged over.")
    util_gpu_ratio: Ratio | None = Field(None, description="nvmlDeviceGetUtilizationRates.gpu")
    util_memory_ratio: Ratio | None = Field(None, description="nvmlDeviceGetUtilizationRates.memory")
    util_gpu_idle_fraction_ratio: Ratio | None = Field(
        None, description="Fraction of the 1 s polls in the interval with util_gpu == 0."
    )
    util_gpu_stddev_ratio: NonNeg | None = Field(None, description="Std-dev of util_gpu over polls.")
    memory_used_bytes: Count | None = None
    memory_total_bytes: Count | None = None
    memory_reserved_bytes: Count | None = None
    power_watts: NonNeg | None = None
    power_limit_watts: NonNeg | None = None
    power_default_limit_watts: NonNeg | None = None
    energy_joules: NonNeg | None = Field(None, description="Total energy counter since driver load.")
    sm_clock_hz: NonNeg | None = None
    sm_clock_max_hz: NonNeg | None = None
    memory_clock_hz: NonNeg | None = None
    memory_clock_max_hz: NonNeg | None = None
    temperature_celsius: float | None = None
    throttle_reasons: list[str] | None = Field(
        None, description="Active clocks-event reasons, e.g. ['sw_power_cap', 'hw_slowdown']."
    )
    pcie_tx_bytes_per_s: NonNeg | None = None
    pcie_rx_bytes_per_s: NonNeg | None = None
    nvlink_tx_bytes_per_s: NonNeg | None = None
    nvlink_rx_bytes_per_s: NonNeg | None = None
    ecc_corrected_errors: Count | None = None
    ecc_uncorrected_errors: Count | None = None
    remapped_rows_correctable: SmallCount | None = Field(
        None,
        description="Rows remapped for correctable errors (nvmlDeviceGetRemappedRows corrRows; "
        "Ampere+). On a MIG instance None: the card's sample has it.",
    )
    remapped_rows_uncorrectable: SmallCount | None = Field(
        None, description="Rows remapped for uncorrectable errors (nvmlDeviceGetRemappedRows uncRows)."
    )
    row_remap_pending: bool | None = Field(
        None,
        description="A row remap waits for a GPU reset (nvmlDeviceGetRemappedRows isPending): drain "
        "and reset the GPU.",
    )
    row_remap_failed: bool | None = Field(
        None,
        description="A row remap has failed on this card, ever (nvmlDeviceGetRemappedRows "
        "failureOccurred): the GPU needs service.",
    )
    retired_pages_sbe: SmallCount | None = Field(
        None,
        description="Pages retired for multiple single-bit ECC errors (nvmlDeviceGetRetiredPages; "
        "before Ampere, ECC on).",
    )
    retired_pages_dbe: SmallCount | None = Field(
        None, description="Pages retired for a double-bit ECC error (nvmlDeviceGetRetiredPages)."
    )
    retired_pages_pending: bool | None = Field(
        None,
        description="A retired page waits for a driver reload or reset to take effect "
        "(nvmlDeviceGetRetiredPagesPendingStatus).",
    )
    pcie_replay_errors: Count | None = Field(
        None,
        description="PCIe replay (link-level retransmission) counter (nvmlDeviceGetPcieReplayCounter).",
    )
    xid_errors: list[int] | None = Field(None, description="XID codes seen during the interval.")
    frameworks: list[Annotated[str, Field(max_length=16)]] | None = Field(
        None,
        max_length=8,
        description="Deep-learning frameworks mapped into the GPU's compute processes (from "
        "/proc/<pid>/maps): [] none of them runs one; None not inspected.",
    )
    gr_engine_active_ratio: Ratio | None = Field(
        None,
        description="GPM NVML_GPM_METRIC_GRAPHICS_UTIL / 100: share of time the graphics/compute "
        "engine was active; for a MIG instance from nvmlGpmMigSampleGet, where util_gpu_ratio is "
        "not supported.",
    )
    sm_active_ratio: Ratio | None = Field(None, description="GPM NVML_GPM_METRIC_SM_UTIL / 100.")
    sm_occupancy_ratio: Ratio | None = Field(None, description="GPM SM_OCCUPANCY / 100.")
    tensor_active_ratio: Ratio | None = Field(None, description="GPM ANY_TENSOR_UTIL / 100.")
    dram_active_ratio: Ratio | None = Field(None, description="GPM DRAM_BW_UTIL / 100.")
    fp32_active_ratio: Ratio | None = Field(None, description="GPM FP32_UTIL / 100.")
    fp16_active_ratio: Ratio | None = Field(None, description="GPM FP16_UTIL / 100.")
    fp64_active_ratio: Ratio | None = Field(None, description="GPM FP64_UTIL / 100.")
    processes: list[GpuProcess] | None = None
    simulated: bool = Field(False, description="True when produced by the simulated backend.")


class CpuSample(_Sample):
    """Host CPU over the interval, from two snapshots of ``/proc/stat``."""

    kind: Literal["cpu"] = "cpu"
    cores: Annotated[int, Field(ge=0, le=2**31 - 1)] = Field(
        description="Logical CPUs counted in /proc/stat."
    )
    busy_ratio: Ratio = Field(description="1 - (idle + iowait) / total, all CPUs.")
    user_ratio: Ratio
    system_ratio: Ratio
    iowait_ratio: Ratio
    steal_ratio: Ratio = 0.0
    per_core_busy_ratio: list[Ratio] | None = None
    load1: NonNeg | None = Field(None, description="/proc/loadavg first field.")
    threads_per_core: Annotated[int, Field(ge=1, le=16)] | None = Field(
        None,
        description="Logical CPUs per physical core (SMT siblings), the most of any core in "
        "/sys/devices/system/cpu/cpu*/topology/thread_siblings_list; None where unknown.",
    )


class MemorySample(_Sample):
    """Host memory from ``/proc/meminfo`` and swap activity from ``/proc/vmstat``."""

    kind: Literal["memory"] = "memory"
    total_bytes: Count
    available_bytes: Count
    used_bytes: Count = Field(description="total - available.")
    swap_total_bytes: Count = 0
    swap_used_bytes: Count = 0
    swap_in_bytes_per_s: NonNeg | None = Field(None, description="pswpin * page size / s.")
    swap_out_bytes_per_s: NonNeg | None = None


class NicSample(_Sample):
    """One network interface, from ``/proc/net/dev`` (loopback excluded)."""

    kind: Literal["nic"] = "nic"
    device: str = Field(min_length=1, max_length=64)
    rx_bytes_per_s: NonNeg
    tx_bytes_per_s: NonNeg
    rx_packets_per_s: NonNeg
    tx_packets_per_s: NonNeg
    rx_errors: Count = 0
    tx_errors: Count = 0


class InfinibandSample(_Sample):
    """One IB port from ``/sys/class/infiniband/<hca>/ports/<n>/counters``.

    ``port_rcv_data``/``port_xmit_data`` count 4-byte words (IBTA spec); converted to bytes here.
    """

    kind: Literal["infiniband"] = "infiniband"
    device: str = Field(min_length=1, max_length=64)
    port: SmallIndex
    rx_bytes_per_s: NonNeg
    tx_bytes_per_s: NonNeg
    rx_packets_per_s: NonNeg | None = None
    tx_packets_per_s: NonNeg | None = None
    link_rate_bytes_per_s: NonNeg | None = Field(None, description="From ports/<n>/rate.")


class DiskSample(_Sample):
    """One block device from ``/proc/diskstats`` (partitions and loop/ram devices excluded)."""

    kind: Literal["disk"] = "disk"
    device: str = Field(min_length=1, max_length=64)
    read_bytes_per_s: NonNeg
    write_bytes_per_s: NonNeg
    reads_per_s: NonNeg
    writes_per_s: NonNeg
    busy_ratio: Ratio = Field(description="io_ticks delta / interval.")


class JobSample(_Sample):
    """One Slurm job's cgroup on this node (v2 ``cpu.stat``/``memory.current``, v1 cpuacct)."""

    kind: Literal["job"] = "job"
    job_id: JobId
    cpu_used_cores: NonNeg | None = Field(None, description="CPU seconds used per second.")
    cpu_allocated_cores: NonNeg | None = Field(None, description="From cpuset.cpus.effective.")
    memory_used_bytes: Count | None = None
    memory_limit_bytes: Count | None = None
    memory_swap_bytes: Count | None = None
    memory_cache_bytes: Count | None = Field(
        None, description="Page cache inside memory_used_bytes (memory.stat file / cache)."
    )
    memory_pressure_ratio: Ratio | None = Field(
        None, description="cgroup v2 memory.pressure 'some' avg10 / 100."
    )
    cgroup_version: Literal[1, 2] | None = None


class AttributionSample(_Sample):
    """Which Slurm job holds a GPU right now, and how the agent knows."""

    kind: Literal["attribution"] = "attribution"
    gpu_index: SmallIndex
    gpu_uuid: str | None = Field(None, max_length=96)
    job_id: JobId
    user: str | None = Field(None, max_length=64)
    uid: Count | None = None
    source: Literal["prolog", "process", "environ"]
    pids: list[Count] | None = None


class AgentSample(_Sample):
    """The agent's own health, so a silent node and a broken collector look different."""

    kind: Literal["agent"] = "agent"
    spool_batches: Count = 0
    spool_bytes: Count = 0
    dropped_batches_total: Count = Field(0, description="Batches the full spool dropped, ever.")
    collector_errors: dict[str, str] | None = Field(
        None, description="Collector name -> last error, for collectors that failed this cycle."
    )
    collector_seconds: dict[str, NonNeg] | None = None


Sample = Annotated[
    GpuSample
    | CpuSample
    | MemorySample
    | NicSample
    | InfinibandSample
    | DiskSample
    | JobSample
    | AttributionSample
    | AgentSample,
    Field(discriminator="kind"),
]

SAMPLE_KINDS: dict[str, type[_Sample]] = {
    cls.model_fields["kind"].default: cls
    for cls in (
        GpuSample,
        CpuSample,
        MemorySample,
        NicSample,
        InfinibandSample,
        DiskSample,
        JobSample,
        AttributionSample,
        AgentSample,
    )
}

MAX_SAMPLES_PER_BATCH = 100_000


class Batch(BaseModel):
    """One push from one agent."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    schema_version: Literal[1] = SCHEMA_VERSION
    batch_id: uuid.UUID = Field(default_factory=uuid.uuid4)
    node: NodeName
    agent_version: str = Field(min_length=1, max_length=64)
    seq: Count = Field(0, description="Agent-local sequence number; informational, for gaps.")
    created_at: Stamp = Field(default_factory=utcnow)
    samples: list[Sample] = Field(max_length=MAX_SAMPLES_PER_BATCH)


def json_schema() -> dict:
    """JSON Schema of a batch, generated from the models above."""
    schema = Batch.model_json_schema()
    schema["$id"] = f"urn:gpuwatch:wire:batch:v{SCHEMA_VERSION}"
    return schema


def fields_markdown() -> str:
    """Field reference of every sample kind as Markdown (``docs/wire-fields.md``)."""
    lines = [
        "# Wire format v1: field reference",
        "",
        "Generated from `gpuwatch/wire/v1.py` by `gpuwatch wire-schema --markdown`; a test keeps it current.",
        "",
    ]
    for model in (Batch, *SAMPLE_KINDS.values(), GpuProcess):
        lines += [f"## {model.__name__}", "", (model.__doc__ or "").strip().splitlines()[0], ""]
        lines += ["| field | type | required | description |", "|---|---|---|---|"]
        for name, info in model.model_fields.items():
            annotation = getattr(info.annotation, "__name__", None) or str(info.annotation)
            annotation = annotation.replace("typing.", "").replace("|", "\\|")
            desc = (info.description or "").replace("|", "\\|")
            lines.append(f"| `{name}` | `{annotation}` | {'yes' if info.is_required() else 'no'} | {desc} |")
        lines.append("")
    return "\n".join(lines)
