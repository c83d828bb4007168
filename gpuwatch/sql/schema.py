"""The tables, one source of truth for SQLAlchemy and the Alembic migrations.

Layout:

* ``nodes`` — one row per agent node, with the SHA-256 of its token (never the token).
* ``ingested_batches`` — every batch id ever stored, per node: the idempotency record that
  makes a re-sent batch store nothing twice. Written in the same transaction as its samples.
* ``gpus`` — per (node, GPU index) identity (UUID, model, PCI bus) so sample rows don't
  repeat strings.
* ``gpu_sample_packs``, ``host_sample_packs`` — every sample kind packed: a row per node, batch
  and UTC hour, an array per field named like the wire field (units in the names); the GPU
  samples in the first, the eight host kinds (cpu, memory, nic, infiniband, disk, job,
  attribution, agent) together in the second, each kind's arrays prefixed by its name
  (``cpu_busy_ratio``); ``gpu_process_packs`` the GPU processes, per day.
  A few dozen bytes per GPU-sample where a row each took hundreds; the primary key (node,
  first stamp) is the duplicate rule, and ``sql/readings.py`` gives readers the old rows back.

Every raw table is partitioned by ``ts`` in daily ranges on PostgreSQL (``sql/partitions.py``
creates them ahead). Sample kinds are listed in :data:`SAMPLE_KINDS`, keyed by wire ``kind``,
the pack tables in :data:`PACK_TABLES` (:attr:`SampleKind.table` and ``prefix`` say where a
kind's columns are); a test holds each kind's keys and fields to its wire
model's fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from gpuwatch.sql.folding import hourly_columns
from gpuwatch.sql.types import Double, Json, UtcDateTime, UtcDateTimeList, array_of

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

PARTITION_BY = "RANGE (ts)"

nodes = sa.Table(
    "nodes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(253), nullable=False, unique=True),
    sa.Column("token_sha256", sa.String(64), nullable=True, unique=True),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("token_created_at", UtcDateTime, nullable=True),
    sa.Column("last_seen_at", UtcDateTime, nullable=True),
    sa.Column("agent_version", sa.String(64), nullable=True),
    sa.Column("last_seq", sa.BigInteger, nullable=True),
)

ingested_batches = sa.Table(
    "ingested_batches",
    metadata,
    sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("batch_id", sa.String(36), primary_key=True),
    sa.Column("seq", sa.BigInteger, nullable=False),
    sa.Column("received_at", UtcDateTime, nullable=False, index=True),
    sa.Column("samples", sa.Integer, nullable=False),
    # the batch's time span: the rollup job re-rolls minutes a late batch (a replayed spool) touched
    sa.Column("min_ts", UtcDateTime, nullable=True),
    sa.Column("max_ts", UtcDateTime, nullable=True),
)

gpus = sa.Table(
    "gpus",
    metadata,
    sa.Column("node_id", sa.Integer, sa.ForeignKey("nodes.id", ondelete="CASCADE"), primary_key=True),
    sa.Column("gpu_index", sa.Integer, primary_key=True),
    sa.Column("uuid", sa.String(96), nullable=True),
    sa.Column("name", sa.String(96), nullable=True),
    sa.Column("pci_bus_id", sa.String(32), nullable=True),
    # a MIG instance: its card (index, UUID), GPU/compute instance ids and share of the card
    # (NULL for a whole GPU, which counts 1)
    sa.Column("parent_gpu_index", sa.SmallInteger, nullable=True),
    sa.Column("parent_uuid", sa.String(96), nullable=True),
    sa.Column("mig_gpu_instance_id", sa.SmallInteger, nullable=True),
    sa.Column("mig_compute_instance_id", sa.SmallInteger, nullable=True),
    sa.Column("card_fraction_ratio", Double, nullable=True),
    sa.Column("first_seen_at", UtcDateTime, nullable=False),
    sa.Column("last_seen_at", UtcDateTime, nullable=False),
)


def _d(name: str) -> sa.Column:
    return sa.Column(name, Double, nullable=True)


def _i(name: str) -> sa.Column:
    return sa.Column(name, sa.BigInteger, nullable=True)


@dataclass(frozen=True)
class PackedField:
    """One field of a sample as its pack table holds it: an array column, element ``i`` of every
    array one reading (in ``gpu_sample_packs``, one GPU at one stamp). A field with a ``scale``
    is stored as the integer ``round(value * scale)`` (saturated to the column's range) and read back as
    ``stored / scale``: decimal values with up to ``log10(scale)`` places (NVML's whole percents,
    milliwatts, MHz) come back exactly, in 4 bytes instead of 8."""

    name: str  #: the wire field, and the reading's column
    column: str  #: the pack's column (its unit in the name)
    element: Any  #: the pack's element type
    read_as: Any  #: the reading's type
    scale: float | None = None


def _ratio(name: str) -> PackedField:
    """A 0..1 ratio, kept in parts per million."""
    return PackedField(name, name.removesuffix("_ratio") + "_ppm", sa.Integer, Double, 1e6)


def _milli(name: str, unit: str, milli_unit: str) -> PackedField:
    """A reading kept in thousandths of its unit."""
    return PackedField(name, name.removesuffix(unit) + milli_unit, sa.Integer, Double, 1e3)


def _khz(name: str) -> PackedField:
    """A clock (NVML gives MHz), kept in kHz."""
    return PackedField(name, name.removesuffix("_hz") + "_khz", sa.Integer, Double, 1e-3)


def _as_is(name: str, element: Any, read_as: Any = None) -> PackedField:
    return PackedField(name, name, element, element if read_as is None else read_as)


#: a GPU sample's fields after its key (node, GPU, stamp), in the reading's column order
GPU_SAMPLE_FIELDS: tuple[PackedField, ...] = (
    _as_is("state", sa.String(8)),
    _milli("interval_s", "_s", "_ms"),
    _ratio("util_gpu_ratio"),
    _ratio("util_memory_ratio"),
    _ratio("util_gpu_idle_fraction_ratio"),
    _ratio("util_gpu_stddev_ratio"),
    _as_is("memory_used_bytes", sa.BigInteger),
    _as_is("memory_total_bytes", sa.BigInteger),
    _as_is("memory_reserved_bytes", sa.BigInteger),
    _milli("power_watts", "_watts", "_milliwatts"),
    _milli("power_limit_watts", "_watts", "_milliwatts"),
    _milli("power_default_limit_watts", "_watts", "_milliwatts"),
    # a counter of joules since the driver loaded: its rise per sample is what counts
    _as_is("energy_joules", Double),
    _khz("sm_clock_hz"),
    _khz("sm_clock_max_hz"),
    _khz("memory_clock_hz"),
    _khz("memory_clock_max_hz"),
    _milli("temperature_celsius", "_celsius", "_millicelsius"),
    _as_is("throttle_reasons", Json),
    # byte rates reach 10^11 (NVLink): float4, summed and averaged only
    _as_is("pcie_tx_bytes_per_s", sa.REAL, Double),
    _as_is("pcie_rx_bytes_per_s", sa.REAL, Double),
    _as_is("nvlink_tx_bytes_per_s", sa.REAL, Double),
    _as_is("nvlink_rx_bytes_per_s", sa.REAL, Double),
    _as_is("ecc_corrected_errors", sa.BigInteger),
    _as_is("ecc_uncorrected_errors", sa.BigInteger),
    _as_is("xid_errors", Json),
    # deep-learning frameworks the GPU's processes have mapped ([] none; NULL not inspected)
    _as_is("frameworks", Json),
    # GPM graphics-engine activity: a MIG instance's utilization (NVML's is not supported there)
    _ratio("gr_engine_active_ratio"),
    _ratio("sm_active_ratio"),
    _ratio("sm_occupancy_ratio"),
    _ratio("tensor_active_ratio"),
    _ratio("dram_active_ratio"),
    _ratio("fp32_active_ratio"),
    _ratio("fp16_active_ratio"),
    _ratio("fp64_active_ratio"),
    _as_is("simulated", sa.Boolean),
    # memory health and the PCIe link (migration 0027): a few rows and pages at most, flags
    _as_is("remapped_rows_correctable", sa.SmallInteger),
    _as_is("remapped_rows_uncorrectable", sa.SmallInteger),
    _as_is("row_remap_pending", sa.Boolean),
    _as_is("row_remap_failed", sa.Boolean),
    _as_is("retired_pages_sbe", sa.SmallInteger),
    _as_is("retired_pages_dbe", sa.SmallInteger),
    _as_is("retired_pages_pending", sa.Boolean),
    # nvmlDeviceGetPcieReplayCounter is an unsigned int: past int4
    _as_is("pcie_replay_errors", sa.BigInteger),
)


def _pack_table(name: str, *elements: sa.Column) -> sa.Table:
    """A packed raw table: ONE row per node and stored batch (on PostgreSQL, per group of batches
    stored together) within a period, an array per field; element ``i`` of every array of one
    kind is one reading. Its key (node, first stamp) is the duplicate rule: a pack starting at
    the same stamp on the same node is the same readings sent again."""
    table = sa.Table(
        name,
        metadata,
        sa.Column("node_id", sa.Integer, primary_key=True),
        sa.Column("ts", UtcDateTime, primary_key=True),  # the first stamp: the partition key too
        sa.Column("ts_last", UtcDateTime, nullable=False),
        *elements,
        postgresql_partition_by=PARTITION_BY,
    )
    sa.Index(f"ix_{name}_ts", table.c.ts, postgresql_using="brin")
    return table


def _arrays(prefix: str, keys: tuple[PackedField, ...], fields: tuple[PackedField, ...]) -> list[sa.Column]:
    """One kind's array columns, named ``prefix`` + its column: the stamps (``sample_ts``), what
    tells a reading from the others at its stamp (``keys``: a GPU index, a device), the fields."""
    return [
        sa.Column(f"{prefix}sample_ts", UtcDateTimeList, nullable=False),
        *(sa.Column(prefix + f.column, array_of(f.element), nullable=False) for f in (*keys, *fields)),
    ]


@dataclass(frozen=True)
class SampleKind:
    """One wire sample kind as it is stored: its pack table, the prefix of its columns there, the
    fields that key a reading at its stamp (``keys``) and the rest (``fields``), in the order of
    the reading's columns (``node_id``, ``keys``, ``ts``, ``fields``: the row tables' columns
    before samples were packed)."""

    kind: str  #: the wire kind
    table: sa.Table
    keys: tuple[PackedField, ...]
    fields: tuple[PackedField, ...]
    prefix: str = ""  #: of its columns in ``table`` (``cpu_``: a table shared by several kinds)

    @property
    def readings(self) -> str:
        """The name of the readings (``cpu_samples``): what readers and ``count_rows`` call them."""
        return f"{self.kind}_samples"

    @property
    def columns(self) -> list[str]:
        """Its array columns in ``table``: the stamps, the keys', the fields'."""
        return [f"{self.prefix}sample_ts", *(self.prefix + f.column for f in (*self.keys, *self.fields))]

    def column(self, field: PackedField) -> str:
        """The array column of one of its keys or fields."""
        return self.prefix + field.column


def _doubles(*names: str) -> tuple[PackedField, ...]:
    return tuple(_as_is(name, Double) for name in names)


def _bigints(*names: str) -> tuple[PackedField, ...]:
    return tuple(_as_is(name, sa.BigInteger) for name in names)


_DEVICE = _as_is("device", sa.String(64))
_GPU_INDEX = _as_is("gpu_index", sa.SmallInteger)
_JOB_ID = _as_is("job_id", sa.String(64))

#: GPU samples, packed per node, push and UTC hour, an array per field (:data:`GPU_SAMPLE_FIELDS`):
#: 17-91 B per GPU-sample at the default 18-cycle pushes, where a row each took 222-397
#: (``python bench/storage.py``). A pack never spans an hour, so a reader of ``[start, end)``
#: finds its packs among those starting in ``[floor_hour(start), end)``.
#: ``sql/readings.py`` reads them, ``daemon/store/packing.py`` writes them.
gpu_sample_packs = _pack_table("gpu_sample_packs", *_arrays("", (_GPU_INDEX,), GPU_SAMPLE_FIELDS))
GPU_SAMPLES = SampleKind("gpu", gpu_sample_packs, (_GPU_INDEX,), GPU_SAMPLE_FIELDS)

#: the host kinds, packed like the GPU samples (per node, push and UTC hour) but every value as
#: the wire gives it (float8, int8, text, JSON): a node sends one of each per cycle where it
#: sends a GPU sample per GPU, so narrowing them would save little, and every answer read from
#: them stays what it was when they were rows. What packing saves is the row: a header, the
#: node and stamp, and a primary-key index entry per sample, most of a host row's bytes.
#: ONE table for the eight (``host_sample_packs``), each kind's arrays prefixed by its name
#: (``cpu_sample_ts``, ``nic_device``; empty where a push held none): a pack per kind was
#: 1.3-1.9 KB at 18-cycle pushes, under PostgreSQL's ~2 KB TOAST threshold, so never
#: compressed; the eight together pass it and pglz compresses them, and the row's header, key
#: and index entry are paid once (``python bench/storage.py``).
_HOST_KINDS: tuple[tuple[str, tuple[PackedField, ...], tuple[PackedField, ...]], ...] = (
    (
        "cpu",
        (),
        (
            _as_is("cores", sa.Integer),
            *_doubles("busy_ratio", "user_ratio", "system_ratio", "iowait_ratio", "steal_ratio"),
            _as_is("per_core_busy_ratio", Json),
            _as_is("load1", Double),
            _as_is("threads_per_core", sa.SmallInteger),
        ),
    ),
    (
        "memory",
        (),
        (
            *_bigints("total_bytes", "available_bytes", "used_bytes", "swap_total_bytes", "swap_used_bytes"),
            *_doubles("swap_in_bytes_per_s", "swap_out_bytes_per_s"),
        ),
    ),
    (
        "nic",
        (_DEVICE,),
        (
            *_doubles("rx_bytes_per_s", "tx_bytes_per_s", "rx_packets_per_s", "tx_packets_per_s"),
            *_bigints("rx_errors", "tx_errors"),
        ),
    ),
    (
        "infiniband",
        (_DEVICE, _as_is("port", sa.SmallInteger)),
        _doubles(
            "rx_bytes_per_s",
            "tx_bytes_per_s",
            "rx_packets_per_s",
            "tx_packets_per_s",
            "link_rate_bytes_per_s",
        ),
    ),
    (
        "disk",
        (_DEVICE,),
        _doubles("read_bytes_per_s", "write_bytes_per_s", "reads_per_s", "writes_per_s", "busy_ratio"),
    ),
    (
        "job",
        (_JOB_ID,),
        (
            *_doubles("cpu_used_cores", "cpu_allocated_cores"),
            *_bigints("memory_used_bytes", "memory_limit_bytes", "memory_swap_bytes", "memory_cache_bytes"),
            _as_is("memory_pressure_ratio", Double),
            _as_is("cgroup_version", sa.SmallInteger),
        ),
    ),
    (
        "attribution",
        (_GPU_INDEX, _JOB_ID),
        (
            _as_is("gpu_uuid", sa.String(96)),
            _as_is("user", sa.String(64)),
            _as_is("uid", sa.BigInteger),
            _as_is("source", sa.String(16)),
            _as_is("pids", Json),
        ),
    ),
    (
        "agent",
        (),
        (
            *_bigints("spool_batches", "spool_bytes", "dropped_batches_total"),
            _as_is("collector_errors", Json),
            _as_is("collector_seconds", Json),
        ),
    ),
)

host_sample_packs = _pack_table(
    "host_sample_packs", *(c for kind, keys, fields in _HOST_KINDS for c in _arrays(f"{kind}_", keys, fields))
)
HOST_SAMPLES: tuple[SampleKind, ...] = tuple(
    SampleKind(kind, host_sample_packs, keys, fields, f"{kind}_") for kind, keys, fields in _HOST_KINDS
)

#: wire sample kind -> how it is stored, every kind
SAMPLE_KINDS: dict[str, SampleKind] = {k.kind: k for k in (GPU_SAMPLES, *HOST_SAMPLES)}

#: per-process GPU readings, packed per node, push and UTC day (element i of every array is one
#: process on one GPU at one stamp): 10.5 B per GPU-sample at the default 18-cycle pushes, 110 B
#: for one-cycle batches, where a row per process took 273 (``python bench/storage.py``);
#: ``sql/process_packs.py`` reads them, ``daemon/store/packing.py`` writes them.
gpu_process_packs = _pack_table(
    "gpu_process_packs",
    *_arrays("", (_GPU_INDEX,), ()),
    sa.Column("pid", array_of(sa.BigInteger), nullable=False),
    sa.Column("used_memory_bytes", array_of(sa.BigInteger), nullable=False),
    sa.Column("sm_util_ratio", array_of(Double), nullable=False),
    sa.Column("memory_util_ratio", array_of(Double), nullable=False),
    sa.Column("job_id", array_of(sa.String(64)), nullable=False),
)

#: the packed raw tables: every sample kind's, and the GPU processes'
PACK_TABLES: tuple[sa.Table, ...] = (gpu_sample_packs, host_sample_packs, gpu_process_packs)

#: every raw table, partitioned by day on PostgreSQL
PARTITIONED_TABLES: tuple[sa.Table, ...] = PACK_TABLES

#: wire fields of GpuSample kept in ``gpus`` rather than in every sample row
GPU_IDENTITY_FIELDS = (
    "uuid",
    "name",
    "pci_bus_id",
    "parent_gpu_index",
    "parent_uuid",
    "mig_gpu_instance_id",
    "mig_compute_instance_id",
    "card_fraction_ratio",
)

# --------------------------------------------------------------------------- Slurm
#: one row per Slurm job the daemon's sync has seen (squeue while running, sacct after);
#: columns mirror gpuwatch.slurm.model.SlurmJob
slurm_jobs = sa.Table(
    "slurm_jobs",
    metadata,
    sa.Column("job_id", sa.String(64), primary_key=True),
    sa.Column("source", sa.String(16), nullable=False),
    sa.Column("name", sa.Text, nullable=True),
    sa.Column("user_name", sa.String(64), nullable=True, index=True),
    sa.Column("uid", sa.BigInteger, nullable=True),
    sa.Column("account", sa.String(64), nullable=True, index=True),
    sa.Column("partition", sa.String(64), nullable=True),
    sa.Column("qos", sa.String(64), nullable=True),
    sa.Column("state", sa.String(24), nullable=True, index=True),
    sa.Column("state_reason", sa.String(64), nullable=True),
    sa.Column("array_job_id", sa.String(64), nullable=True),
    sa.Column("array_task_id", sa.String(64), nullable=True),
    sa.Column("submit_at", UtcDateTime, nullable=True),
    sa.Column("start_at", UtcDateTime, nullable=True, index=True),
    sa.Column("end_at", UtcDateTime, nullable=True, index=True),
    sa.Column("time_limit_s", sa.BigInteger, nullable=True),
    sa.Column("elapsed_s", sa.BigInteger, nullable=True),
    sa.Column("nodes", Json, nullable=True),
    sa.Column("cpus", sa.Integer, nullable=True),
    sa.Column("memory_bytes", sa.BigInteger, nullable=True),
    sa.Column("gpus", sa.Integer, nullable=True),
    sa.Column("exit_code", sa.Integer, nullable=True),
    sa.Column("exit_signal", sa.Integer, nullable=True),
    sa.Column("tres", Json, nullable=True),
    sa.Column("first_seen_at", UtcDateTime, nullable=False),
    sa.Column("updated_at", UtcDateTime, nullable=False),
)

#: which GPUs (node name, GRES index = NVML index under Slurm's default ordering) a job holds
job_gpus = sa.Table(
    "job_gpus",
    metadata,
    sa.Column(
        "job_id", sa.String(64), sa.ForeignKey("slurm_jobs.job_id", ondelete="CASCADE"), primary_key=True
    ),
    sa.Column("node", sa.String(253), primary_key=True),
    sa.Column("gpu_index", sa.SmallInteger, primary_key=True),
    # "slurm": Slurm's allocation; "agent": the agents attributed the job to it and Slurm gave
    # the job no GPU map (a MIG instance; a job that ran while the daemon was away)
    sa.Column("source", sa.String(8), nullable=False, server_default="slurm"),
)
sa.Index("ix_job_gpus_node_gpu", job_gpus.c.node, job_gpus.c.gpu_index)

# --------------------------------------------------------------------------- rollups
#: utilization histogram bins of gpu_minutes: bin 0 is exactly idle, bin k is (10(k-1), 10k] %
UTIL_BINS = 11


def _rollup_sums(*names: str) -> list[sa.Column]:
    """``<name>_sum`` and ``<name>_n`` per metric: GPM fields are absent on some cards, so each
    mean needs its own count of samples that had the field."""
    cols: list[sa.Column] = []
    for name in names:
        cols += [_d(f"{name}_sum"), sa.Column(f"{name}_n", sa.Integer, nullable=False, server_default="0")]
    return cols


#: metrics of gpu_minutes kept as ``<name>_sum`` + ``<name>_n`` (a mean per window is sum / n)
GPU_MINUTE_SUMS = (
    "util_gpu_ratio",
    "util_gpu_idle_fraction_ratio",
    "util_memory_ratio",
    "sm_active_ratio",
    "sm_occupancy_ratio",
    "tensor_active_ratio",
    "dram_active_ratio",
    "fp32_active_ratio",
    "fp16_active_ratio",
    "power_watts",
    "pcie_bytes_per_s",
    "nvlink_bytes_per_s",
    "fp64_active_ratio",
    # SM clock / the card's max SM clock, per sample (a throttled GPU's clock loss)
    "sm_clock_ratio",
)

#: per GPU per minute: what the classifier and the CLI read instead of raw samples
gpu_minutes = sa.Table(
    "gpu_minutes",
    metadata,
    sa.Column("node_id", sa.Integer, primary_key=True),
    sa.Column("gpu_index", sa.SmallInteger, primary_key=True),
    sa.Column("minute", UtcDateTime, primary_key=True),
    sa.Column("samples", sa.Integer, nullable=False),
    sa.Column("lost_samples", sa.Integer, nullable=False),
    *_rollup_sums(*GPU_MINUTE_SUMS),
    _d("util_gpu_ratio_sumsq"),
    _d("util_gpu_ratio_max"),
    *[sa.Column(f"util_bin_{k}", sa.Integer, nullable=False, server_default="0") for k in range(UTIL_BINS)],
    _i("memory_used_bytes_max"),
    _i("memory_total_bytes"),
    _d("power_limit_watts"),
    # the card's boot-time limit: an enforced limit below it is a power cap someone set
    _d("power_default_limit_watts"),
    _d("temperature_celsius_max"),
    sa.Column("throttled_samples", sa.Integer, nullable=False, server_default="0"),
    # of those, samples whose only reason is the power limiter (sw_power_cap): a GPU at full
    # load at its power limit, which the default 700 W of an H200 is under any real training
    sa.Column("power_capped_samples", sa.Integer, nullable=False, server_default="0"),
    sa.Column("xid_samples", sa.Integer, nullable=False, server_default="0"),
    # samples whose card had a memory repair waiting for a GPU reset (a row remap or a page
    # retirement pending), and samples whose card had a row remap fail (it needs service)
    sa.Column("reset_pending_samples", sa.Integer, nullable=False, server_default="0"),
    sa.Column("remap_failed_samples", sa.Integer, nullable=False, server_default="0"),
    # the minute's distinct XID lists as stored, joined (e.g. '[31] [43, 45]'): codes decide
    # who owns a fault (gpuwatch/classify/xid.py); read with rollups.xid_codes
    sa.Column("xid_codes", sa.Text, nullable=True),
    # the minute's distinct framework lists as stored, joined ('["pytorch"] []'); NULL when no
    # sample was inspected; read with rollups.framework_names
    sa.Column("frameworks", sa.Text, nullable=True),
    sa.Column("simulated", sa.Boolean, nullable=False, server_default=sa.false()),
    # energy the GPU used in the minute: the total-energy counter's rise since the sample
    # before, or (counter absent, reset, or that sample too far back) mean power x interval,
    # for energy_power_samples of the minute's samples (sql/rollups.py)
    _d("energy_joules"),
    sa.Column("energy_power_samples", sa.Integer, nullable=False, server_default="0"),
)
sa.Index("ix_gpu_minutes_minute", gpu_minutes.c.minute)
#: the few GPU-minutes with a fault (an XID, a lost sample, a memory repair pending or failed):
#: the node list's and the overview's faults (``views/faults.py``)
FAULTED = sa.or_(
    *(
        gpu_minutes.c[name] > 0
        for name in ("xid_samples", "lost_samples", "reset_pending_samples", "remap_failed_samples")
    )
)
sa.Index("ix_gpu_minutes_faulted", gpu_minutes.c.minute, postgresql_where=FAULTED, sqlite_where=FAULTED)

#: per Slurm job cgroup per node per minute
job_minutes = sa.Table(
    "job_minutes",
    metadata,
    sa.Column("node_id", sa.Integer, primary_key=True),
    sa.Column("job_id", sa.String(64), primary_key=True),
    sa.Column("minute", UtcDateTime, primary_key=True),
    sa.Column("samples", sa.Integer, nullable=False),
    *_rollup_sums("cpu_used_cores", "memory_pressure_ratio"),
    _d("cpu_allocated_cores"),
    _i("memory_used_bytes_max"),
    _i("memory_cache_bytes_max"),
    # used minus page cache, per sample: what the kernel cannot reclaim when the job nears its
    # limit (a cgroup full of cache from a streamed dataset is not short of memory)
    _i("memory_anon_bytes_max"),
    _i("memory_limit_bytes"),
    _i("memory_swap_bytes_max"),
)
sa.Index("ix_job_minutes_job", job_minutes.c.job_id, job_minutes.c.minute)

#: per Slurm job per hour: its GPU-minutes and cgroup-minutes summed, so a report over weeks
#: reads a row per job-hour instead of a row per GPU-minute (``sql/job_hours.py``). The same
#: sums as ``views/period.py`` takes from the minute tables; kept as long as the jobs.
job_hours = sa.Table(
    "job_hours",
    metadata,
    sa.Column("job_id", sa.String(64), primary_key=True),
    sa.Column("hour", UtcDateTime, primary_key=True),
    sa.Column("gpu_minutes", sa.Integer, nullable=False, server_default="0"),
    _d("util_gpu_ratio_sum"),
    sa.Column("util_gpu_ratio_n", sa.Integer, nullable=False, server_default="0"),
    _d("energy_joules"),
    sa.Column("energy_power_samples", sa.Integer, nullable=False, server_default="0"),
    # samples behind energy_joules (minutes with an energy figure; a lost GPU's left out)
    sa.Column("energy_samples", sa.Integer, nullable=False, server_default="0"),
    # sum over the job's node-minutes (with samples and an allocation) of the mean cores used
    _d("cpu_used_cores"),
    _d("cpu_allocated_cores"),
    _i("memory_used_bytes_max"),
    _i("memory_limit_bytes"),
)
sa.Index("ix_job_hours_hour", job_hours.c.hour)

#: per node per minute: host CPU, memory/swap and network, for input-bound and comm-bound rules
#: node_minutes' metrics, each rolled up as a ``<name>_sum`` and ``<name>_n`` column pair
NODE_MINUTE_SUMS = (
    "busy_ratio",
    "iowait_ratio",
    "swap_in_bytes_per_s",
    "swap_out_bytes_per_s",
    "nic_bytes_per_s",
    "ib_bytes_per_s",
)
node_minutes = sa.Table(
    "node_minutes",
    metadata,
    sa.Column("node_id", sa.Integer, primary_key=True),
    sa.Column("minute", UtcDateTime, primary_key=True),
    *_rollup_sums(*NODE_MINUTE_SUMS),
    _i("available_bytes_min"),
    _i("total_bytes"),
    # logical CPUs per physical core (SMT): job CPU use is judged against physical cores
    sa.Column("threads_per_core", sa.SmallInteger, nullable=True),
    # the node's GPUs that minute, summed from gpu_minutes: the overview's heat map reads a row
    # per node-minute instead of a row per GPU-minute
    *_rollup_sums("gpu_util_ratio"),
    sa.Column("gpus_reporting", sa.SmallInteger, nullable=False, server_default="0"),
    sa.Column("gpu_simulated", sa.Boolean, nullable=False, server_default=sa.false()),
)
sa.Index("ix_node_minutes_minute", node_minutes.c.minute)

#: how far the rollup job has got: 'minutes' (rolled up to, exclusive), 'late_scan' (batches
#: received since this are checked for samples older than the rolled-up edge), 'hours' (minutes
#: folded into the hourly tables up to), 'job_hours'; and 'minutes_from', set by retention: the
#: minute tables hold every minute from there on (``sql/resolution.py``)
rollup_state = sa.Table(
    "rollup_state",
    metadata,
    sa.Column("name", sa.String(32), primary_key=True),
    sa.Column("done_until", UtcDateTime, nullable=False),
)

#: the per-minute rollups, kept ``retention.minute_days``
ROLLUP_TABLES: tuple[sa.Table, ...] = (gpu_minutes, job_minutes, node_minutes)


def _hourly(name: str, minutes: sa.Table) -> sa.Table:
    """The hourly twin of a minute table (:func:`gpuwatch.sql.folding.hourly_columns`), with an
    index on its hour."""
    table = sa.Table(name, metadata, *hourly_columns(minutes))
    sa.Index(f"ix_{name}_hour", table.c.hour)
    return table


#: per GPU per hour, folded from gpu_minutes (``sql/hours.py``): history past the minutes, kept
#: ``retention.rollup_days``. job_minutes has no such twin: ``job_hours`` serves jobs' long ranges.
gpu_hours = _hourly("gpu_hours", gpu_minutes)
#: per node per hour, folded from node_minutes (``sql/hours.py``)
node_hours = _hourly("node_hours", node_minutes)
#: the hourly rollups, kept ``retention.rollup_days``; each minute table they fold
HOUR_TABLES: dict[sa.Table, sa.Table] = {gpu_hours: gpu_minutes, node_hours: node_minutes}

# --------------------------------------------------------------------------- verdicts
#: what the classifier concluded about a job over a window: one row per (evaluation, cause);
#: alerts and the CLI read these, so both show one truth
verdicts = sa.Table(
    "verdicts",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("job_id", sa.String(64), nullable=False),
    sa.Column("evaluated_at", UtcDateTime, nullable=False),
    sa.Column("window_kind", sa.String(16), nullable=False),  # "recent" (rolling) | "job" (whole job)
    sa.Column("window_start", UtcDateTime, nullable=False),
    sa.Column("window_end", UtcDateTime, nullable=False),
    sa.Column("cause", sa.String(32), nullable=False),
    sa.Column("confidence", Double, nullable=False),
    sa.Column("gpus", sa.Integer, nullable=True),
    sa.Column("gpu_hours", Double, nullable=True),
    sa.Column("gpu_hours_wasted", Double, nullable=True),
    sa.Column("mean_util_ratio", Double, nullable=True),
    sa.Column("summary", sa.Text, nullable=False),
    sa.Column("fix", sa.Text, nullable=True),
    sa.Column("evidence", Json, nullable=False),
    sa.Column("rules_version", sa.String(16), nullable=False),
)
sa.Index("ix_verdicts_job_evaluated", verdicts.c.job_id, verdicts.c.evaluated_at)
sa.Index("ix_verdicts_evaluated_cause", verdicts.c.evaluated_at, verdicts.c.cause)

#: per (job, hour of evaluation, cause), the verdicts a period's waste count picks from that
#: hour alone: the latest whole-job verdict and the recent/segment verdict with the most wasted
#: GPU-hours (each with its id, the newest on ties). Kept by triggers on ``verdicts`` (migration
#: 0019; statement-level on PostgreSQL since 0030) for the verdicts that name waste, so a report
#: over weeks reads a row per job-hour, not a row per evaluation: picking over hours gives what
#: picking over the verdicts would
verdict_hours = sa.Table(
    "verdict_hours",
    metadata,
    sa.Column("job_id", sa.String(64), primary_key=True),
    sa.Column("hour", UtcDateTime, primary_key=True),
    sa.Column("cause", sa.String(32), primary_key=True),
    sa.Column("whole_at", UtcDateTime, nullable=True),
    _i("whole_id"),
    _d("whole_wasted"),
    _i("recent_id"),
    _d("recent_wasted"),
)
sa.Index("ix_verdict_hours_hour", verdict_hours.c.hour)

#: an ended job's report figures over its whole run, stored once its hours are summed
#: (``views/job_totals.py``): a period that holds the whole job (``data_from``..``data_to``:
#: its run, its summed hours and its waste verdicts) sums these rows instead of the job's hours
#: and verdicts. A row counts only while the Slurm facts it was made from (start_at .. billing)
#: and the job's newest evaluation are unchanged; new or deleted verdicts of the job and
#: re-summed hours delete it (triggers on ``verdicts``, ``sql/job_hours.py``)
job_totals = sa.Table(
    "job_totals",
    metadata,
    sa.Column("job_id", sa.String(64), primary_key=True),
    sa.Column("start_at", UtcDateTime, nullable=False),
    sa.Column("end_at", UtcDateTime, nullable=False),
    sa.Column("gpus", sa.Integer, nullable=False),
    sa.Column("cpus", sa.Integer, nullable=True),
    _i("time_limit_s"),
    sa.Column("state", sa.String(32), nullable=True),
    _d("billing"),
    sa.Column("evaluated_at", UtcDateTime, nullable=True),
    sa.Column("data_from", UtcDateTime, nullable=False),
    sa.Column("data_to", UtcDateTime, nullable=False),
    sa.Column("gpu_hours", Double, nullable=False),
    _d("billing_hours"),
    sa.Column("lead_cause", sa.String(32), nullable=True),
    sa.Column("gpu_hours_wasted", Double, nullable=False, server_default="0"),
    _d("energy_joules"),
    _d("energy_estimated_joules"),
    sa.Column("util_sum", Double, nullable=False, server_default="0"),
    sa.Column("util_samples", sa.BigInteger, nullable=False, server_default="0"),
    sa.Column("cpu_used_cores", Double, nullable=False, server_default="0"),
    sa.Column("cpu_allocated_cores", Double, nullable=False, server_default="0"),
    # the host memory peak / limit, at most 1 (None: no peak or limit measured)
    _d("memory_ratio"),
    # the next request should change: the time limit, the memory, the cores (0 or 1)
    sa.Column("advised_time", sa.SmallInteger, nullable=False, server_default="0"),
    sa.Column("advised_memory", sa.SmallInteger, nullable=False, server_default="0"),
    sa.Column("advised_cpus", sa.SmallInteger, nullable=False, server_default="0"),
    # over the whole run, as ``gpuwatch job ID`` advises: fewer GPUs, a smaller card or MIG
    # slice (0 or 1), and the GPU-hours the verdict's fix would return (None: no estimate)
    sa.Column("advised_gpus", sa.SmallInteger, nullable=False, server_default="0"),
    sa.Column("advised_gpu_size", sa.SmallInteger, nullable=False, server_default="0"),
    _d("saving_gpu_hours"),
)
sa.Index("ix_job_totals_span", job_totals.c.data_from, job_totals.c.data_to)

#: each job's newest evaluation time, and whether it found waste, kept by triggers on
#: ``verdicts`` (migrations 0010, 0017; on PostgreSQL statement-level since 0026, a job's row
#: written once a statement and not when unchanged, on SQLite a trigger per row): the job page
#: finds a job's latest verdicts by this and the (job, time) index, without a pass over the
#: verdict history
newest_evaluations = sa.Table(
    "newest_evaluations",
    metadata,
    sa.Column("job_id", sa.String(64), primary_key=True),
    sa.Column("evaluated_at", UtcDateTime, nullable=False),
    # a verdict of that evaluation names a cause other than healthy
    sa.Column("waste", sa.Boolean, nullable=False, server_default=sa.false()),
)
sa.Index("ix_newest_evaluations_evaluated", newest_evaluations.c.evaluated_at)
sa.Index(
    "ix_newest_evaluations_waste",
    newest_evaluations.c.evaluated_at,
    postgresql_where=newest_evaluations.c.waste,
    sqlite_where=newest_evaluations.c.waste,
)

#: the verdict each job's newest evaluation shows (``Evaluation.shown``), a copy of its columns
#: but the evidence (``id`` is the verdict's), for the jobs whose newest evaluation shows one:
#: kept by triggers on ``verdicts`` (migration 0025), so the low-utilization listing reads this
#: table and ``slurm_jobs`` alone
shown_verdicts = sa.Table(
    "shown_verdicts",
    metadata,
    sa.Column("job_id", sa.String(64), primary_key=True),
    sa.Column("id", sa.BigInteger, nullable=False),
    *(c._copy() for c in verdicts.c if c.name not in ("id", "job_id", "evidence")),
)

# --------------------------------------------------------------------------- alerts
#: every notice ever decided: the alert worker's persistent queue (``gpuwatch/alerts/outbox.py``).
#: ``dedup_key`` (SHA-256 of job, cause, window, recipient, channel, or of a digest's period) is
#: unique, so re-evaluating a verdict can never enqueue a second notice. ``status``: pending ->
#: sending (claimed under a lease) -> sent | failed | in_doubt; ``handoff_at`` is set just before
#: the message is handed to the channel, so a lease found expired tells "never sent" apart from
#: "maybe sent".
alert_outbox = sa.Table(
    "alert_outbox",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("dedup_key", sa.String(64), nullable=False, unique=True),
    sa.Column("kind", sa.String(16), nullable=False),  # job | digest | enforce | test
    sa.Column("channel", sa.String(16), nullable=False),  # slack | email
    sa.Column("recipient", sa.String(320), nullable=False),  # an address, or the Slack channel's name
    sa.Column("recipient_kind", sa.String(16), nullable=False),  # user | owner | admin
    sa.Column("job_id", sa.String(64), nullable=True),
    sa.Column("cause", sa.String(32), nullable=True),
    sa.Column("user_name", sa.String(64), nullable=True),
    sa.Column("account", sa.String(64), nullable=True),
    sa.Column("verdict_id", sa.BigInteger, nullable=True),
    sa.Column("window_start", UtcDateTime, nullable=True),
    sa.Column("window_end", UtcDateTime, nullable=True),
    sa.Column("gpu_hours_wasted", Double, nullable=True),
    sa.Column("subject", sa.Text, nullable=False),
    sa.Column("payload", Json, nullable=False),  # the rendered message, as the channel sends it
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("created_at", UtcDateTime, nullable=False),
    sa.Column("not_before", UtcDateTime, nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Column("lease_owner", sa.String(128), nullable=True),
    sa.Column("lease_until", UtcDateTime, nullable=True),
    sa.Column("handoff_at", UtcDateTime, nullable=True),
    sa.Column("sent_at", UtcDateTime, nullable=True),
    sa.Column("last_error", sa.Text, nullable=True),
)
sa.Index("ix_alert_outbox_status_not_before", alert_outbox.c.status, alert_outbox.c.not_before)
sa.Index("ix_alert_outbox_recipient_created", alert_outbox.c.recipient, alert_outbox.c.created_at)
sa.Index("ix_alert_outbox_job_created", alert_outbox.c.job_id, alert_outbox.c.created_at)

#: one row per send attempt and its outcome: sent | retry | failed | in_doubt | lost (the worker
#: died before handing the message over) | in_doubt_resent
alert_attempts = sa.Table(
    "alert_attempts",
    metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
    sa.Column(
        "outbox_id",
        sa.BigInteger().with_variant(sa.Integer, "sqlite"),
        sa.ForeignKey("alert_outbox.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
    ),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("worker", sa.String(128), nullable=False),
    sa.Column("started_at", UtcDateTime, nullable=False),
    sa.Column("finished_at", UtcDateTime, nullable=True),
    sa.Column("outcome", sa.String(16), nullable=True),
    sa.Column("status_code", sa.Integer, nullable=True),  # HTTP status or SMTP reply code
    sa.Column("detail", sa.Text, nullable=True),
)

#: what enforcement did (or, in dry-run mode, would have done) per job: one 'warn' and one
#: 'cancel' at most, each for real and each as a dry run (so a dry run never blocks the real thing)
enforcement_actions = sa.Table(
    "enforcement_actions",
    metadata,
    sa.Column("job_id", sa.String(64), primary_key=True),
    sa.Column("action", sa.String(16), primary_key=True),  # warn | cancel
    sa.Column("dry_run", sa.Boolean, primary_key=True),
    sa.Column("at", UtcDateTime, nullable=False),
    sa.Column("idle_since", UtcDateTime, nullable=True),
    sa.Column("command", Json, nullable=True),
    sa.Column("returncode", sa.Integer, nullable=True),
    sa.Column("output", sa.Text, nullable=True),
)

ALERT_TABLES: tuple[sa.Table, ...] = (alert_outbox, alert_attempts, enforcement_actions)
