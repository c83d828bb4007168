"""The metric catalog: every wire field and every ``/metrics`` series, in one table.

One row per (wire field, Prometheus metric): its unit, type, what it means, where the number
comes from (the NVML call or ``/proc`` file), which cards have it, and the dcgm-exporter field
with the same meaning, if any. ``docs/metrics.md`` is generated from it (:func:`markdown`), and
tests hold the code to it both ways: every field of every wire sample kind (``ts`` and
``kind`` aside) and of :class:`~gpuwatch.collectors.gpu_backend.MigDevice` is here, and the exporter
(:mod:`gpuwatch.agent.metrics`) emits exactly the Prometheus names here, with the help text
and type given here.

Naming (why not dcgm-exporter's names): DCGM field names carry DCGM's units - percent
(``DCGM_FI_DEV_GPU_UTIL``), MiB (``DCGM_FI_DEV_FB_USED``), MHz, millijoules - while the wire
and Prometheus's own conventions use base units and ``0..1`` ratios with the unit in the name.
Exporting DCGM names with gpuwatch's units would break every dashboard silently; exporting them
with DCGM's units would make two unit systems in one exporter. So series are ``gpuwatch_*`` in
base units with snake_case labels (``gpu``, ``uuid``, ``pci_bus_id``, ``model_name``,
``hostname``: what Prometheus's conventions and ``promtool check metrics`` ask for), and each row
names its DCGM field and the factor between them. :func:`dcgm_recording_rules` turns that into a
Prometheus rules file that recreates the DCGM series with dcgm-exporter's label names too
(``DCGM_FI_DEV_GPU_UTIL`` = ``gpuwatch_gpu_utilization_ratio * 100`` with ``UUID``,
``modelName``, ``Hostname`` copied from the snake_case labels) for drop-in dashboards.
"""

from __future__ import annotations

from dataclasses import dataclass

#: labels on every per-GPU series (snake_case, as Prometheus's conventions ask)
GPU_LABELS: tuple[str, ...] = ("gpu", "uuid", "pci_bus_id", "model_name", "hostname")
NODE_LABELS: tuple[str, ...] = ("hostname",)
#: dcgm-exporter's names for the labels that differ, which the compatibility rules add
DCGM_LABELS: dict[str, str] = {"uuid": "UUID", "model_name": "modelName", "hostname": "Hostname"}
#: sample fields every kind has; documented once, not per kind
COMMON_FIELDS = frozenset({"ts", "kind"})

ALL = "all"
VOLTA = "Volta+ (others: absent)"
GPM = "Hopper+ (GPM; others: absent)"
ECC_ON = "cards with ECC enabled"
NVLINK = "NVLink cards: GPM on Hopper+, field values before"
MAXWELL = "Maxwell+"
MIG = "MIG instances (A100, H100, H200 in MIG mode)"
REMAP = "Ampere+ (A100, H100, H200); the card, not its MIG instances"
RETIRE = "before Ampere with ECC on (Kepler to Turing: V100...)"
KEPLER = "Kepler+ (the card, not its MIG instances); AMD: amdsmi_get_gpu_pci_replay_counter"


@dataclass(frozen=True)
class Entry:
    """One catalogued metric. ``prometheus`` None: on the wire only (or only a label)."""

    kind: str  # wire sample kind, "gpu.process", "mig", or "agent.runtime"
    field: str | None  # wire / MigDevice field; None for exporter-only series
    unit: str
    type: str  # gauge | counter | info | label | wire (not exported)
    description: str
    source: str
    cards: str = "-"
    prometheus: str | None = None
    labels: tuple[str, ...] = ()
    dcgm: str | None = None
    #: DCGM value = gpuwatch value * dcgm_scale
    dcgm_scale: float | None = None


def _gpu(
    field: str | None,
    prometheus: str | None,
    unit: str,
    type_: str,
    description: str,
    source: str,
    cards: str = ALL,
    dcgm: str | None = None,
    scale: float | None = None,
    extra_labels: tuple[str, ...] = (),
) -> Entry:
    labels = (*GPU_LABELS, *extra_labels) if prometheus else ()
    return Entry("gpu", field, unit, type_, description, source, cards, prometheus, labels, dcgm, scale)


def _mig_label(field: str, description: str, source: str) -> Entry:
    """A label of the MIG devices gauge (not on the wire)."""
    return Entry("mig", field, "-", "label", description, source, "MIG mode")


def _host(
    kind: str,
    field: str | None,
    prometheus: str | None,
    unit: str,
    type_: str,
    description: str,
    source: str,
    labels: tuple[str, ...] = (),
) -> Entry:
    return Entry(kind, field, unit, type_, description, source, "-", prometheus, (*NODE_LABELS, *labels))


_MIB = 1.0 / (1024 * 1024)
_GPU_UTIL = "nvmlDeviceGetUtilizationRates, polled 1 Hz"
_MEMINFO = "nvmlDeviceGetMemoryInfo (v2 where available)"

CATALOG: tuple[Entry, ...] = (
    # ---------------------------------------------------------------- GPU identity and state
    _gpu("gpu_index", None, "-", "label", "NVML device index, label `gpu`.", "nvmlDeviceGetHandleByIndex"),
    _gpu("uuid", None, "-", "label", "GPU UUID, label `uuid`.", "nvmlDeviceGetUUID"),
    _gpu("name", None, "-", "label", "Product name, label `model_name`.", "nvmlDeviceGetName"),
    _gpu("pci_bus_id", None, "-", "label", "PCI bus id, label `pci_bus_id`.", "nvmlDeviceGetPciInfo"),
    _gpu(
        "state",
        "gpuwatch_gpu_up",
        "1",
        "gauge",
        "1 when the GPU answered this interval, 0 when lost (GpuIsLost/Unknown) or in error.",
        "every NVML call's return",
    ),
    _gpu(
        "interval_s",
        "gpuwatch_gpu_sample_interval_seconds",
        "seconds",
        "gauge",
        "Length of the interval the averages cover.",
        "agent monotonic clock",
    ),
    _gpu(
        "parent_gpu_index",
        None,
        "-",
        "wire",
        "A MIG instance's card (NVML index); the instance's own index is 1000 + 10 x card + slot.",
        "nvmlDeviceGetDeviceHandleFromMigDeviceHandle",
        MIG,
    ),
    _gpu("parent_uuid", None, "-", "wire", "A MIG instance's card UUID.", "nvmlDeviceGetUUID (card)", MIG),
    _gpu(
        "mig_gpu_instance_id",
        None,
        "-",
        "wire",
        "MIG GPU instance id (GPU_I_ID).",
        "nvmlDeviceGetGpuInstanceId",
        MIG,
    ),
    _gpu(
        "mig_compute_instance_id",
        None,
        "-",
        "wire",
        "MIG compute instance id (GPU_CI_ID).",
        "nvmlDeviceGetComputeInstanceId",
        MIG,
    ),
    _gpu(
        "card_fraction_ratio",
        None,
        "ratio",
        "wire",
        "Share of the card a MIG instance is (1/7 for a 1g slice); its GPU-hours count this much.",
        "nvmlDeviceGetAttributes gpuInstanceSliceCount / nvmlDeviceGetMaxMigDeviceCount",
        MIG,
    ),
    _gpu(
        "simulated",
        "gpuwatch_gpu_simulated",
        "1",
        "gauge",
        "1 when the readings come from the simulated backend (or a replay of it).",
        "backend",
    ),
    # ---------------------------------------------------------------- utilization
    _gpu(
        "util_gpu_ratio",
        "gpuwatch_gpu_utilization_ratio",
        "ratio",
        "gauge",
        "Share of time a kernel ran (NVML utilization.gpu / 100), mean of the 1 s polls.",
        _GPU_UTIL,
        dcgm="DCGM_FI_DEV_GPU_UTIL",
        scale=100,
    ),
    _gpu(
        "util_memory_ratio",
        "gpuwatch_gpu_memory_utilization_ratio",
        "ratio",
        "gauge",
        "Share of time device memory was read or written (utilization.memory / 100).",
        _GPU_UTIL,
        dcgm="DCGM_FI_DEV_MEM_COPY_UTIL",
        scale=100,
    ),
    _gpu(
        "util_gpu_idle_fraction_ratio",
        "gpuwatch_gpu_utilization_idle_fraction_ratio",
        "ratio",
        "gauge",
        "Share of the interval's polls reading exactly 0 % utilization.",
        _GPU_UTIL,
    ),
    _gpu(
        "util_gpu_stddev_ratio",
        "gpuwatch_gpu_utilization_stddev_ratio",
        "ratio",
        "gauge",
        "Population std-dev of the polled utilization (duty cycling); absent below two polls.",
        _GPU_UTIL,
    ),
    # ---------------------------------------------------------------- memory
    _gpu(
        "memory_used_bytes",
        "gpuwatch_gpu_memory_used_bytes",
        "bytes",
        "gauge",
        "Device memory in use (v2: without the driver's reserve).",
        _MEMINFO,
        dcgm="DCGM_FI_DEV_FB_USED",
        scale=_MIB,
    ),
    _gpu(
        "memory_total_bytes",
        "gpuwatch_gpu_memory_total_bytes",
        "bytes",
        "gauge",
        "Device memory size.",
        _MEMINFO,
        dcgm="DCGM_FI_DEV_FB_TOTAL",
        scale=_MIB,
    ),
    _gpu(
        "memory_reserved_bytes",
        "gpuwatch_gpu_memory_reserved_bytes",
        "bytes",
        "gauge",
        "Memory the driver and firmware reserve.",
        "nvmlDeviceGetMemoryInfo_v2",
        "driver 510+ (memory info v2)",
        dcgm="DCGM_FI_DEV_FB_RESERVED",
        scale=_MIB,
    ),
    # ---------------------------------------------------------------- power, clocks, temperature
    _gpu(
        "power_watts",
        "gpuwatch_gpu_power_watts",
        "watts",
        "gauge",
        "Board power draw, mean of the 1 s polls.",
        "nvmlDeviceGetPowerUsage, polled 1 Hz",
        dcgm="DCGM_FI_DEV_POWER_USAGE",
        scale=1,
    ),
    _gpu(
        "power_limit_watts",
        "gpuwatch_gpu_power_limit_watts",
        "watts",
        "gauge",
        "Enforced power limit.",
        "nvmlDeviceGetEnforcedPowerLimit",
        dcgm="DCGM_FI_DEV_ENFORCED_POWER_LIMIT",
        scale=1,
    ),
    _gpu(
        "power_default_limit_watts",
        "gpuwatch_gpu_power_default_limit_watts",
        "watts",
        "gauge",
        "Power limit the card boots with; an enforced limit below it is a power cap.",
        "nvmlDeviceGetPowerManagementDefaultLimit, read once per GPU",
        dcgm="DCGM_FI_DEV_POWER_MGMT_LIMIT_DEF",
        scale=1,
    ),
    _gpu(
        "energy_joules",
        "gpuwatch_gpu_energy_joules_total",
        "joules",
        "counter",
        "Energy used since the driver loaded.",
        "nvmlDeviceGetTotalEnergyConsumption (mJ)",
        VOLTA,
        dcgm="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        scale=1000,
    ),
    _gpu(
        "sm_clock_hz",
        "gpuwatch_gpu_sm_clock_hertz",
        "hertz",
        "gauge",
        "SM clock, mean of the 1 s polls.",
        "nvmlDeviceGetClockInfo(NVML_CLOCK_SM), polled 1 Hz",
        dcgm="DCGM_FI_DEV_SM_CLOCK",
        scale=1e-6,
    ),
    _gpu(
        "sm_clock_max_hz",
        "gpuwatch_gpu_sm_clock_max_hertz",
        "hertz",
        "gauge",
        "Highest SM clock the card supports.",
        "nvmlDeviceGetMaxClockInfo(NVML_CLOCK_SM)",
        dcgm="DCGM_FI_DEV_MAX_SM_CLOCK",
        scale=1e-6,
    ),
    _gpu(
        "memory_clock_hz",
        "gpuwatch_gpu_memory_clock_hertz",
        "hertz",
        "gauge",
        "Memory clock, mean of the 1 s polls.",
        "nvmlDeviceGetClockInfo(NVML_CLOCK_MEM), polled 1 Hz",
        dcgm="DCGM_FI_DEV_MEM_CLOCK",
        scale=1e-6,
    ),
    _gpu(
        "memory_clock_max_hz",
        "gpuwatch_gpu_memory_clock_max_hertz",
        "hertz",
        "gauge",
        "Highest memory clock the card supports.",
        "nvmlDeviceGetMaxClockInfo(NVML_CLOCK_MEM)",
        dcgm="DCGM_FI_DEV_MAX_MEM_CLOCK",
        scale=1e-6,
    ),
    _gpu(
        "temperature_celsius",
        "gpuwatch_gpu_temperature_celsius",
        "celsius",
        "gauge",
        "GPU core temperature, mean of the 1 s polls.",
        "nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU), polled 1 Hz",
        dcgm="DCGM_FI_DEV_GPU_TEMP",
        scale=1,
    ),
    _gpu(
        "throttle_reasons",
        "gpuwatch_gpu_clocks_event_active",
        "1",
        "gauge",
        "1 for each clocks-event (throttle) reason active at any poll of the interval, 0 for the "
        "others; DCGM has the bitmask DCGM_FI_DEV_CLOCKS_EVENT_REASONS instead.",
        "nvmlDeviceGetCurrentClocksEventReasons (ClocksThrottleReasons before 535), polled 1 Hz",
        extra_labels=("reason",),
    ),
    # ---------------------------------------------------------------- interconnect
    _gpu(
        "pcie_tx_bytes_per_s",
        "gpuwatch_gpu_pcie_tx_bytes_per_second",
        "bytes/s",
        "gauge",
        "PCIe transmit rate: GPM over the interval on Hopper+, else a 20 ms NVML window.",
        "GPM NVML_GPM_METRIC_PCIE_TX_PER_SEC, else nvmlDeviceGetPcieThroughput",
        MAXWELL,
        dcgm="DCGM_FI_PROF_PCIE_TX_BYTES",
        scale=1,
    ),
    _gpu(
        "pcie_rx_bytes_per_s",
        "gpuwatch_gpu_pcie_rx_bytes_per_second",
        "bytes/s",
        "gauge",
        "PCIe receive rate (as pcie_tx).",
        "GPM NVML_GPM_METRIC_PCIE_RX_PER_SEC, else nvmlDeviceGetPcieThroughput",
        MAXWELL,
        dcgm="DCGM_FI_PROF_PCIE_RX_BYTES",
        scale=1,
    ),
    _gpu(
        "nvlink_tx_bytes_per_s",
        "gpuwatch_gpu_nvlink_tx_bytes_per_second",
        "bytes/s",
        "gauge",
        "NVLink transmit rate, all links, over the interval.",
        "GPM NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC, else delta of "
        "nvmlDeviceGetFieldValues NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
        NVLINK,
        dcgm="DCGM_FI_PROF_NVLINK_TX_BYTES",
        scale=1,
    ),
    _gpu(
        "nvlink_rx_bytes_per_s",
        "gpuwatch_gpu_nvlink_rx_bytes_per_second",
        "bytes/s",
        "gauge",
        "NVLink receive rate, all links, over the interval.",
        "GPM NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC, else delta of "
        "nvmlDeviceGetFieldValues NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX",
        NVLINK,
        dcgm="DCGM_FI_PROF_NVLINK_RX_BYTES",
        scale=1,
    ),
    # ---------------------------------------------------------------- errors
    _gpu(
        "ecc_corrected_errors",
        "gpuwatch_gpu_ecc_corrected_errors_total",
        "errors",
        "counter",
        "Corrected ECC errors, lifetime (aggregate).",
        "nvmlDeviceGetTotalEccErrors(CORRECTED, AGGREGATE)",
        ECC_ON,
        dcgm="DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        scale=1,
    ),
    _gpu(
        "ecc_uncorrected_errors",
        "gpuwatch_gpu_ecc_uncorrected_errors_total",
        "errors",
        "counter",
        "Uncorrected ECC errors, lifetime (aggregate).",
        "nvmlDeviceGetTotalEccErrors(UNCORRECTED, AGGREGATE)",
        ECC_ON,
        dcgm="DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        scale=1,
    ),
    # memory health: a remap or retirement pending wants a reset, a failure wants service
    _gpu(
        "remapped_rows_correctable",
        "gpuwatch_gpu_remapped_rows_correctable",
        "rows",
        "gauge",
        "Memory rows remapped to spares for correctable errors (can fall: an uncorrectable remap "
        "may take a correctable one's spare).",
        "nvmlDeviceGetRemappedRows corrRows",
        REMAP,
        dcgm="DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        scale=1,
    ),
    _gpu(
        "remapped_rows_uncorrectable",
        "gpuwatch_gpu_remapped_rows_uncorrectable",
        "rows",
        "gauge",
        "Memory rows remapped to spares for uncorrectable errors.",
        "nvmlDeviceGetRemappedRows uncRows",
        REMAP,
        dcgm="DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        scale=1,
    ),
    _gpu(
        "row_remap_pending",
        "gpuwatch_gpu_row_remap_pending",
        "1",
        "gauge",
        "1 while a row remap waits for a GPU reset to take effect: drain and reset the GPU.",
        "nvmlDeviceGetRemappedRows isPending",
        REMAP,
        dcgm="DCGM_FI_DEV_ROW_REMAP_PENDING",
        scale=1,
    ),
    _gpu(
        "row_remap_failed",
        "gpuwatch_gpu_row_remap_failure",
        "1",
        "gauge",
        "1 once a row remap has failed on the card (no spare row left): the GPU needs service.",
        "nvmlDeviceGetRemappedRows failureOccurred",
        REMAP,
        dcgm="DCGM_FI_DEV_ROW_REMAP_FAILURE",
        scale=1,
    ),
    _gpu(
        "retired_pages_sbe",
        "gpuwatch_gpu_retired_pages_sbe",
        "pages",
        "gauge",
        "Memory pages retired for multiple single-bit ECC errors.",
        "nvmlDeviceGetRetiredPages(MULTIPLE_SINGLE_BIT_ECC_ERRORS), the list's length",
        RETIRE,
        dcgm="DCGM_FI_DEV_RETIRED_SBE",
        scale=1,
    ),
    _gpu(
        "retired_pages_dbe",
        "gpuwatch_gpu_retired_pages_dbe",
        "pages",
        "gauge",
        "Memory pages retired for a double-bit (uncorrectable) ECC error.",
        "nvmlDeviceGetRetiredPages(DOUBLE_BIT_ECC_ERROR), the list's length",
        RETIRE,
        dcgm="DCGM_FI_DEV_RETIRED_DBE",
        scale=1,
    ),
    _gpu(
        "retired_pages_pending",
        "gpuwatch_gpu_retired_pages_pending",
        "1",
        "gauge",
        "1 while a retired page waits for a driver reload or GPU reset to take effect.",
        "nvmlDeviceGetRetiredPagesPendingStatus",
        RETIRE,
        dcgm="DCGM_FI_DEV_RETIRED_PENDING",
        scale=1,
    ),
    _gpu(
        "pcie_replay_errors",
        "gpuwatch_gpu_pcie_replays_total",
        "replays",
        "counter",
        "PCIe replays (link-level retransmissions), a cumulative counter; a rising count is a "
        "PCIe link going bad.",
        "nvmlDeviceGetPcieReplayCounter",
        KEPLER,
        dcgm="DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        scale=1,
    ),
    _gpu(
        "xid_errors",
        "gpuwatch_gpu_xid_errors_total",
        "events",
        "counter",
        "XID events per code since the agent started (one per interval a code was seen).",
        "nvmlEventSetWait_v2 on nvmlEventTypeXidCriticalError (+DoubleBitEccError as XID 48)",
        "all with event support",
        extra_labels=("xid",),
    ),
    _gpu(
        "xid_errors",
        "gpuwatch_gpu_xid_last_code",
        "code",
        "gauge",
        "The last XID code seen since the agent started (0: none).",
        "nvmlEventSetWait_v2 (event thread)",
        "all with event support",
        dcgm="DCGM_FI_DEV_XID_ERRORS",
        scale=1,
    ),
    # ---------------------------------------------------------------- GPM
    _gpu(
        "gr_engine_active_ratio",
        "gpuwatch_gpu_gr_engine_active_ratio",
        "ratio",
        "gauge",
        "Share of time the graphics/compute engine was active; a MIG instance's utilization "
        "(NVML utilization is not supported there).",
        "nvmlGpmMetricsGet NVML_GPM_METRIC_GRAPHICS_UTIL / 100 (nvmlGpmMigSampleGet per MIG instance)",
        GPM,
        dcgm="DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        scale=1,
    ),
    _gpu(
        "sm_active_ratio",
        "gpuwatch_gpu_sm_active_ratio",
        "ratio",
        "gauge",
        "Share of cycles an SM had at least one warp resident.",
        "nvmlGpmMetricsGet NVML_GPM_METRIC_SM_UTIL / 100",
        GPM,
        dcgm="DCGM_FI_PROF_SM_ACTIVE",
        scale=1,
    ),
    _gpu(
        "sm_occupancy_ratio",
        "gpuwatch_gpu_sm_occupancy_ratio",
        "ratio",
        "gauge",
        "Resident warps per SM as a share of the maximum.",
        "nvmlGpmMetricsGet NVML_GPM_METRIC_SM_OCCUPANCY / 100",
        GPM,
        dcgm="DCGM_FI_PROF_SM_OCCUPANCY",
        scale=1,
    ),
    _gpu(
        "tensor_active_ratio",
        "gpuwatch_gpu_tensor_active_ratio",
        "ratio",
        "gauge",
        "Share of cycles any tensor pipe was active.",
        "nvmlGpmMetricsGet NVML_GPM_METRIC_ANY_TENSOR_UTIL / 100",
        GPM,
        dcgm="DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        scale=1,
    ),
    _gpu(
        "dram_active_ratio",
        "gpuwatch_gpu_dram_active_ratio",
        "ratio",
        "gauge",
        "Share of cycles the memory interface was busy.",
        "nvmlGpmMetricsGet NVML_GPM_METRIC_DRAM_BW_UTIL / 100",
        GPM,
        dcgm="DCGM_FI_PROF_DRAM_ACTIVE",
        scale=1,
    ),
    _gpu(
        "fp32_active_ratio",
        "gpuwatch_gpu_fp32_active_ratio",
        "ratio",
        "gauge",
        "Share of cycles the FP32 pipe was active.",
        "nvmlGpmMetricsGet NVML_GPM_METRIC_FP32_UTIL / 100",
        GPM,
        dcgm="DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        scale=1,
    ),
    _gpu(
        "fp16_active_ratio",
        "gpuwatch_gpu_fp16_active_ratio",
        "ratio",
        "gauge",
        "Share of cycles the FP16 pipe was active.",
        "nvmlGpmMetricsGet NVML_GPM_METRIC_FP16_UTIL / 100",
        GPM,
        dcgm="DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        scale=1,
    ),
    _gpu(
        "fp64_active_ratio",
        "gpuwatch_gpu_fp64_active_ratio",
        "ratio",
        "gauge",
        "Share of cycles the FP64 pipe was active.",
        "nvmlGpmMetricsGet NVML_GPM_METRIC_FP64_UTIL / 100",
        GPM,
        dcgm="DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        scale=1,
    ),
    # ---------------------------------------------------------------- processes and jobs
    _gpu(
        "processes",
        "gpuwatch_gpu_processes",
        "processes",
        "gauge",
        "Compute processes on the GPU (per-process detail stays on the wire: pids churn).",
        "nvmlDeviceGetComputeRunningProcesses",
    ),
    Entry(
        "gpu",
        "frameworks",
        "-",
        "wire",
        "Deep-learning frameworks the GPU's compute processes have mapped (pytorch, jax, tensorflow, "
        "paddle, mxnet); [] none, absent when not inspected.",
        "/proc/<pid>/maps of each compute process, read once per process",
        ALL,
    ),
    Entry("gpu.process", "pid", "-", "wire", "Process id.", "nvmlDeviceGetComputeRunningProcesses", ALL),
    Entry(
        "gpu.process",
        "used_memory_bytes",
        "bytes",
        "wire",
        "Device memory the process holds (None under WDDM).",
        "nvmlDeviceGetComputeRunningProcesses usedGpuMemory",
        ALL,
    ),
    Entry(
        "gpu.process",
        "sm_util_ratio",
        "ratio",
        "wire",
        "The process's SM utilization over the interval.",
        "nvmlDeviceGetProcessesUtilizationInfo smUtil / 100",
        MAXWELL,
    ),
    Entry(
        "gpu.process",
        "memory_util_ratio",
        "ratio",
        "wire",
        "The process's memory utilization over the interval.",
        "nvmlDeviceGetProcessesUtilizationInfo memUtil / 100",
        MAXWELL,
    ),
    Entry(
        "gpu.process",
        "job_id",
        "-",
        "info",
        "Slurm job of the pid; also a gpuwatch_gpu_job_info series (see attribution.job_id).",
        "/proc/<pid>/cgroup, /proc/<pid>/environ",
        ALL,
        "gpuwatch_gpu_job_info",
        ("gpu", "uuid", "job_id", "user", "hostname"),
    ),
    Entry(
        "attribution",
        "job_id",
        "-",
        "info",
        "Constant 1 per GPU -> Slurm job pair: join on gpu/uuid/hostname instead of a job label "
        "on every GPU series (`* on (hostname, gpu) group_left(job_id) gpuwatch_gpu_job_info`).",
        "prolog file /run/gpuwatch/gpu/<index>, process cgroup, environ",
        ALL,
        "gpuwatch_gpu_job_info",
        ("gpu", "uuid", "job_id", "user", "hostname"),
    ),
    Entry("attribution", "gpu_index", "-", "label", "Label `gpu` of the job info.", "attribution", ALL),
    Entry("attribution", "gpu_uuid", "-", "label", "Label `uuid` of the job info.", "attribution", ALL),
    Entry("attribution", "user", "-", "label", "Label `user` of the job info.", "prolog file / uid", ALL),
    Entry("attribution", "uid", "-", "wire", "Numeric uid of the job's user.", "prolog file", ALL),
    Entry("attribution", "source", "-", "wire", "prolog, process or environ.", "attribution", ALL),
    Entry("attribution", "pids", "-", "wire", "The job's pids on the GPU.", "attribution", ALL),
    # ---------------------------------------------------------------- MIG (not on the wire)
    Entry(
        "mig",
        None,
        "devices",
        "gauge",
        "MIG devices on a GPU in MIG mode.",
        "nvmlDeviceGetMigMode, nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex",
        "A100/H100/H200 in MIG mode",
        "gpuwatch_gpu_mig_devices",
        GPU_LABELS,
    ),
    _mig_label("gpu_index", "Parent GPU index, label `gpu`.", "nvmlDeviceGetMigDeviceHandleByIndex"),
    _mig_label("parent_uuid", "Parent GPU UUID, label `uuid`.", "nvmlDeviceGetUUID(parent)"),
    _mig_label("mig_index", "MIG slot, label `mig_index`.", "nvmlDeviceGetMigDeviceHandleByIndex"),
    _mig_label("uuid", "MIG device UUID, label `mig_uuid`.", "nvmlDeviceGetUUID(MIG handle)"),
    _mig_label(
        "gpu_instance_id",
        "GPU instance, label `gpu_i_id` (dcgm-exporter: `GPU_I_ID`).",
        "nvmlDeviceGetGpuInstanceId",
    ),
    _mig_label(
        "compute_instance_id",
        "Compute instance, label `gpu_ci_id` (dcgm-exporter: `GPU_CI_ID`).",
        "nvmlDeviceGetComputeInstanceId",
    ),
    *(
        Entry(
            "mig",
            name,
            unit,
            "gauge",
            text,
            src,
            "MIG mode",
            prom,
            ("gpu", "uuid", "hostname", "mig_index", "mig_uuid", "gpu_i_id", "gpu_ci_id"),
        )
        for name, prom, unit, text, src in (
            (
                "memory_used_bytes",
                "gpuwatch_gpu_mig_memory_used_bytes",
                "bytes",
                "Memory in use on the MIG device.",
                "nvmlDeviceGetMemoryInfo(MIG handle)",
            ),
            (
                "memory_total_bytes",
                "gpuwatch_gpu_mig_memory_total_bytes",
                "bytes",
                "Memory of the MIG device.",
                "nvmlDeviceGetMemoryInfo(MIG handle)",
            ),
            (
                "multiprocessor_count",
                "gpuwatch_gpu_mig_multiprocessors",
                "SMs",
                "SMs of the MIG device.",
                "nvmlDeviceGetAttributes(MIG handle)",
            ),
        )
    ),
    # ---------------------------------------------------------------- host CPU and memory
    _host("cpu", "cores", "gpuwatch_node_cpu_cores", "cpus", "gauge", "Logical CPUs.", "/proc/stat"),
    _host(
        "cpu",
        "busy_ratio",
        "gpuwatch_node_cpu_busy_ratio",
        "ratio",
        "gauge",
        "1 - (idle + iowait) / total, all CPUs.",
        "/proc/stat",
    ),
    _host(
        "cpu",
        "user_ratio",
        "gpuwatch_node_cpu_user_ratio",
        "ratio",
        "gauge",
        "User time share.",
        "/proc/stat",
    ),
    _host(
        "cpu",
        "system_ratio",
        "gpuwatch_node_cpu_system_ratio",
        "ratio",
        "gauge",
        "System time share.",
        "/proc/stat",
    ),
    _host(
        "cpu",
        "iowait_ratio",
        "gpuwatch_node_cpu_iowait_ratio",
        "ratio",
        "gauge",
        "I/O wait share.",
        "/proc/stat",
    ),
    _host(
        "cpu", "steal_ratio", "gpuwatch_node_cpu_steal_ratio", "ratio", "gauge", "Steal share.", "/proc/stat"
    ),
    _host(
        "cpu",
        "per_core_busy_ratio",
        None,
        "ratio",
        "wire",
        "Busy share per logical CPU (wire only: node_exporter has per-CPU series).",
        "/proc/stat",
    ),
    _host("cpu", "load1", "gpuwatch_node_load1", "1", "gauge", "One-minute load average.", "/proc/loadavg"),
    _host(
        "cpu",
        "threads_per_core",
        "gpuwatch_node_cpu_threads_per_core",
        "cpus",
        "gauge",
        "Logical CPUs per physical core (2 with SMT / Hyper-Threading on).",
        "/sys/devices/system/cpu/cpu*/topology/thread_siblings_list",
    ),
    _host(
        "memory",
        "total_bytes",
        "gpuwatch_node_memory_total_bytes",
        "bytes",
        "gauge",
        "MemTotal.",
        "/proc/meminfo",
    ),
    _host(
        "memory",
        "available_bytes",
        "gpuwatch_node_memory_available_bytes",
        "bytes",
        "gauge",
        "MemAvailable.",
        "/proc/meminfo",
    ),
    _host(
        "memory",
        "used_bytes",
        "gpuwatch_node_memory_used_bytes",
        "bytes",
        "gauge",
        "total - available.",
        "/proc/meminfo",
    ),
    _host(
        "memory",
        "swap_total_bytes",
        "gpuwatch_node_swap_total_bytes",
        "bytes",
        "gauge",
        "SwapTotal.",
        "/proc/meminfo",
    ),
    _host(
        "memory",
        "swap_used_bytes",
        "gpuwatch_node_swap_used_bytes",
        "bytes",
        "gauge",
        "SwapTotal - SwapFree.",
        "/proc/meminfo",
    ),
    _host(
        "memory",
        "swap_in_bytes_per_s",
        "gpuwatch_node_swap_in_bytes_per_second",
        "bytes/s",
        "gauge",
        "pswpin * page size per second.",
        "/proc/vmstat",
    ),
    _host(
        "memory",
        "swap_out_bytes_per_s",
        "gpuwatch_node_swap_out_bytes_per_second",
        "bytes/s",
        "gauge",
        "pswpout * page size per second.",
        "/proc/vmstat",
    ),
    # ---------------------------------------------------------------- network, disk
    *(
        _host("nic", field, prom, unit, "gauge", text, "/proc/net/dev", ("device",))
        for field, prom, unit, text in (
            (
                "rx_bytes_per_s",
                "gpuwatch_node_nic_rx_bytes_per_second",
                "bytes/s",
                "Received bytes per second.",
            ),
            ("tx_bytes_per_s", "gpuwatch_node_nic_tx_bytes_per_second", "bytes/s", "Sent bytes per second."),
            (
                "rx_packets_per_s",
                "gpuwatch_node_nic_rx_packets_per_second",
                "packets/s",
                "Received packets/s.",
            ),
            ("tx_packets_per_s", "gpuwatch_node_nic_tx_packets_per_second", "packets/s", "Sent packets/s."),
            ("rx_errors", "gpuwatch_node_nic_rx_errors", "errors", "Receive errors during the interval."),
            ("tx_errors", "gpuwatch_node_nic_tx_errors", "errors", "Transmit errors during the interval."),
        )
    ),
    _host("nic", "device", None, "-", "label", "Interface name, label `device`.", "/proc/net/dev"),
    *(
        _host("infiniband", field, prom, unit, "gauge", text, src, ("device", "port"))
        for field, prom, unit, text, src in (
            (
                "rx_bytes_per_s",
                "gpuwatch_node_ib_rx_bytes_per_second",
                "bytes/s",
                "Received bytes/s.",
                "counters/port_rcv_data x 4",
            ),
            (
                "tx_bytes_per_s",
                "gpuwatch_node_ib_tx_bytes_per_second",
                "bytes/s",
                "Sent bytes/s.",
                "counters/port_xmit_data x 4",
            ),
            (
                "rx_packets_per_s",
                "gpuwatch_node_ib_rx_packets_per_second",
                "packets/s",
                "Received packets/s.",
                "counters/port_rcv_packets",
            ),
            (
                "tx_packets_per_s",
                "gpuwatch_node_ib_tx_packets_per_second",
                "packets/s",
                "Sent packets/s.",
                "counters/port_xmit_packets",
            ),
            (
                "link_rate_bytes_per_s",
                "gpuwatch_node_ib_link_rate_bytes_per_second",
                "bytes/s",
                "Link rate.",
                "ports/<n>/rate",
            ),
        )
    ),
    _host("infiniband", "device", None, "-", "label", "HCA name, label `device`.", "/sys/class/infiniband"),
    _host("infiniband", "port", None, "-", "label", "Port number, label `port`.", "/sys/class/infiniband"),
    *(
        _host("disk", field, prom, unit, "gauge", text, "/proc/diskstats", ("device",))
        for field, prom, unit, text in (
            ("read_bytes_per_s", "gpuwatch_node_disk_read_bytes_per_second", "bytes/s", "Bytes read/s."),
            ("write_bytes_per_s", "gpuwatch_node_disk_write_bytes_per_second", "bytes/s", "Bytes written/s."),
            ("reads_per_s", "gpuwatch_node_disk_reads_per_second", "ops/s", "Reads completed/s."),
            ("writes_per_s", "gpuwatch_node_disk_writes_per_second", "ops/s", "Writes completed/s."),
            ("busy_ratio", "gpuwatch_node_disk_busy_ratio", "ratio", "io_ticks delta / interval."),
        )
    ),
    _host("disk", "device", None, "-", "label", "Block device, label `device`.", "/proc/diskstats"),
    # ---------------------------------------------------------------- Slurm jobs on the node
    *(
        _host("job", field, prom, unit, "gauge", text, src, ("job_id",))
        for field, prom, unit, text, src in (
            (
                "cpu_used_cores",
                "gpuwatch_job_cpu_used_cores",
                "cores",
                "CPU seconds used per second.",
                "cgroup cpu.stat usage_usec (v1 cpuacct.usage)",
            ),
            (
                "cpu_allocated_cores",
                "gpuwatch_job_cpu_allocated_cores",
                "cores",
                "CPUs in the job's cpuset.",
                "cgroup cpuset.cpus.effective",
            ),
            (
                "memory_used_bytes",
                "gpuwatch_job_memory_used_bytes",
                "bytes",
                "Memory charged to the job.",
                "cgroup memory.current (v1 memory.usage_in_bytes)",
            ),
            (
                "memory_limit_bytes",
                "gpuwatch_job_memory_limit_bytes",
                "bytes",
                "The job's memory limit.",
                "cgroup memory.max (v1 memory.limit_in_bytes)",
            ),
            (
                "memory_swap_bytes",
                "gpuwatch_job_memory_swap_bytes",
                "bytes",
                "Swap used by the job.",
                "cgroup memory.swap.current",
            ),
            (
                "memory_cache_bytes",
                "gpuwatch_job_memory_cache_bytes",
                "bytes",
                "Page cache in used memory.",
                "cgroup memory.stat file / cache",
            ),
            (
                "memory_pressure_ratio",
                "gpuwatch_job_memory_pressure_ratio",
                "ratio",
                "memory.pressure some avg10 / 100.",
                "cgroup v2 memory.pressure",
            ),
        )
    ),
    _host(
        "job",
        "job_id",
        None,
        "-",
        "label",
        "Slurm job id, label `job_id` (the job's own series).",
        "cgroup path job_<id>",
    ),
    _host("job", "cgroup_version", None, "-", "wire", "1 or 2.", "/sys/fs/cgroup"),
    # ---------------------------------------------------------------- the agent itself
    _host(
        "agent",
        "spool_batches",
        "gpuwatch_agent_spool_batches",
        "batches",
        "gauge",
        "Batches waiting in the on-disk spool.",
        "agent spool",
    ),
    _host(
        "agent",
        "spool_bytes",
        "gpuwatch_agent_spool_bytes",
        "bytes",
        "gauge",
        "Spool size on disk.",
        "agent spool",
    ),
    _host(
        "agent",
        "dropped_batches_total",
        "gpuwatch_agent_dropped_batches_total",
        "batches",
        "counter",
        "Batches the full spool dropped, ever.",
        "agent spool",
    ),
    _host(
        "agent",
        "collector_seconds",
        "gpuwatch_agent_collector_duration_seconds",
        "seconds",
        "gauge",
        "Wall time of each collector's last run.",
        "agent run_collector",
        ("collector",),
    ),
    _host(
        "agent",
        "collector_errors",
        "gpuwatch_agent_collector_success",
        "1",
        "gauge",
        "1 when the collector's last run succeeded, 0 when it raised (node_exporter's "
        "node_scrape_collector_success).",
        "agent run_collector",
        ("collector",),
    ),
    _host(
        "agent.runtime",
        None,
        "gpuwatch_agent_last_batch_timestamp_seconds",
        "seconds",
        "gauge",
        "Unix time of the batch these series come from: a stale value is a stuck agent.",
        "agent",
    ),
    _host(
        "agent.runtime",
        None,
        "gpuwatch_agent_batch_samples",
        "samples",
        "gauge",
        "Samples in the latest batch.",
        "agent",
    ),
    *(
        _host("agent.runtime", None, prom, unit, "counter", text, "Agent counters (agent/runner.py)")
        for prom, unit, text in (
            ("gpuwatch_agent_cycles_total", "cycles", "Sample cycles run."),
            ("gpuwatch_agent_cycle_errors_total", "cycles", "Sample cycles that failed."),
            ("gpuwatch_agent_skipped_ticks_total", "ticks", "Ticks skipped because a cycle overran."),
            ("gpuwatch_agent_sent_batches_total", "batches", "Batches the daemon stored."),
            ("gpuwatch_agent_rejected_batches_total", "batches", "Batches the daemon rejected."),
            ("gpuwatch_agent_retried_sends_total", "sends", "Sends that will be retried."),
            ("gpuwatch_agent_bundles_sent_total", "requests", "Bundles of batches the daemon answered."),
            (
                "gpuwatch_agent_merged_sends_total",
                "requests",
                "Batches merged from a spool backlog that the daemon stored (agent.merge_backlog).",
            ),
        )
    ),
)


def by_prometheus_name() -> dict[str, Entry]:
    """Exported name -> its (first) entry; the exporter takes help text and type from here."""
    entries: dict[str, Entry] = {}
    for entry in CATALOG:
        if entry.prometheus and entry.prometheus not in entries:
            entries[entry.prometheus] = entry
    return entries


def prometheus_names() -> set[str]:
    return {entry.prometheus for entry in CATALOG if entry.prometheus}


def help_text(name: str) -> str:
    entry = by_prometheus_name()[name]
    return f"{entry.description} Source: {entry.source}."


#: dcgm-exporter series computed from several of gpuwatch's: (DCGM field, PromQL in DCGM's
#: unit). FB_FREE is NVML's free memory (total - reserved - used) in MiB; where the driver gives
#: no reserve (before memory info v2) it counts as 0. DCGM_FI_PROF_GR_ENGINE_ACTIVE has no
#: equivalent: it is GPM's graphics-engine activity, which the agent does not read.
DERIVED_DCGM: tuple[tuple[str, str], ...] = (
    (
        "DCGM_FI_DEV_FB_FREE",
        "(gpuwatch_gpu_memory_total_bytes - gpuwatch_gpu_memory_used_bytes"
        " - (gpuwatch_gpu_memory_reserved_bytes or gpuwatch_gpu_memory_total_bytes * 0)) / 1048576",
    ),
)


def dcgm_recording_rules() -> str:
    """A Prometheus rules file recreating dcgm-exporter's series from gpuwatch's.

    Load it with ``rule_files:`` in prometheus.yml. Each series gets dcgm-exporter's label names
    (``UUID``, ``modelName``, ``Hostname``) copied from gpuwatch's, so a DCGM dashboard that
    filters on ``gpu``/``UUID``/``modelName``/``Hostname`` works unchanged.
    """
    lines = ["groups:", "  - name: gpuwatch_dcgm_compat", "    rules:"]
    for entry in CATALOG:
        if not (entry.dcgm and entry.prometheus and entry.dcgm_scale is not None):
            continue
        expr = entry.prometheus if entry.dcgm_scale == 1 else f"{entry.prometheus} * {entry.dcgm_scale:.10g}"
        for ours, theirs in DCGM_LABELS.items():
            expr = f'label_replace({expr}, "{theirs}", "$1", "{ours}", "(.*)")'
        lines += [f"      - record: {entry.dcgm}", f"        expr: '{expr}'"]
    for record, expr in DERIVED_DCGM:
        for ours, theirs in DCGM_LABELS.items():
            expr = f'label_replace({expr}, "{theirs}", "$1", "{ours}", "(.*)")'
        lines += [f"      - record: {record}", f"        expr: '{expr}'"]
    return "\n".join(lines) + "\n"


def _cell(text: str | None) -> str:
    return "" if not text else text.replace("|", "\\|")


def markdown() -> str:
    """``docs/metrics.md``; a test keeps the committed file equal to this."""
    out = [
        "# Metric catalog",
        "",
        "Generated from `gpuwatch/catalog.py` (`python -c 'import gpuwatch.catalog as c; "
        'print(c.markdown(), end="")\' > docs/metrics.md`); a test keeps it current and holds the '
        "exporter and the wire to it.",
        "",
        "Every series on the agent's `/metrics` carries `hostname`; per-GPU series also `gpu`, `uuid`, "
        "`pci_bus_id`, `model_name` (snake_case, as `promtool check metrics` asks; the compatibility rules "
        "below add dcgm-exporter's `Hostname`, `UUID`, `modelName`). Series are `gpuwatch_*` in base units "
        "(ratios 0..1, bytes, watts, hertz, joules); the **DCGM** column names the dcgm-exporter field with "
        "the same meaning and the factor from gpuwatch's value to DCGM's. A value NVML cannot give is an "
        "absent series, never 0. Slurm jobs are not a label on GPU series: `gpuwatch_gpu_job_info` is one "
        "series per GPU -> job, to join with `group_left`. Wire fields `ts` and `kind` exist on every "
        "sample kind and are not repeated.",
        "",
        "| kind | field | prometheus | type | unit | labels | description | source | cards | DCGM |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for e in CATALOG:
        extra = [label for label in e.labels if label not in GPU_LABELS and label not in NODE_LABELS]
        if e.labels and set(GPU_LABELS) <= set(e.labels):
            labels = "GPU" + (" + " + ", ".join(extra) if extra else "")
        elif e.labels:
            labels = ", ".join(e.labels)
        else:
            labels = ""
        dcgm = f"`{e.dcgm}` (x{e.dcgm_scale:.6g})" if e.dcgm and e.dcgm_scale is not None else _cell(e.dcgm)
        out.append(
            "| "
            + " | ".join(
                [
                    e.kind,
                    f"`{e.field}`" if e.field else "",
                    f"`{e.prometheus}`" if e.prometheus else "",
                    e.type,
                    _cell(e.unit),
                    _cell(labels),
                    _cell(e.description),
                    _cell(e.source),
                    _cell(e.cards),
                    dcgm,
                ]
            )
            + " |"
        )
    out += [
        "",
        "## dcgm-exporter compatibility rules",
        "",
        "For dashboards written against dcgm-exporter, load these recording rules (generated by "
        "`gpuwatch.catalog.dcgm_recording_rules()`; a test loads them into a real Prometheus). "
        "`DCGM_FI_DEV_FB_FREE` is computed (total - reserved - used). dcgm-exporter series without a "
        "rule here (encoder/decoder utilization, NVLink error counters, vGPU license, "
        "`DCGM_FI_PROF_GR_ENGINE_ACTIVE`: GPM's graphics-engine activity, not read) have no gpuwatch "
        "equivalent.",
        "",
        "```yaml",
        dcgm_recording_rules().rstrip("\n"),
        "```",
        "",
    ]
    return "\n".join(out)
