"""Window features of one job, from the rollup tables only.

A job's GPUs come from ``job_gpus`` (node name -> ``nodes.id``) and its time span from
``slurm_jobs``; when the Slurm sync has no GPUs for it, from the attribution samples (the
prolog/process attribution the agents send). Windows are whole minutes ``[start, end)`` of
``gpu_minutes`` / ``job_minutes`` / ``node_minutes``:

* ``recent`` — the last ``recent_window_s`` before the evaluation edge, so a job that goes
  idle after a busy start is seen idle, not averaged away by its whole-job mean;
* ``job`` — from the job's start to the edge.

The edge is the earliest of ``now``, the job's end and how far the rollups have got
(``rollup_state``), so a window never counts minutes that are not rolled up yet.

A long window reads its whole hours folded so far from ``gpu_hours`` / ``node_hours`` and
only the minutes around them (``sql/resolution.spans``: the same sums). One that begins
before the minutes kept (``retention.minute_days``: a job running longer than that, or one
evaluated again after its minutes went) starts with its first hour whole, and reads the job's
cgroup figures from the ``job_minutes`` still kept (:attr:`WindowFeatures.cgroup_start`).

Every mean is ``SUM(x_sum) / SUM(x_n)`` over the window, so a metric a card does not have
(GPM on an A100) is ``None`` — never 0 — and its name is listed in ``missing``. Percentiles
come from the merged 11-bin utilization histogram (bin 0 = exactly 0 %, bin k = (10(k-1),
10k] %) and are the upper edge of the bin holding the quantile. All arithmetic after the
SQL sums is done in Python on rounded values, so PostgreSQL and SQLite give identical
features.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from gpuwatch.config.thresholds import Thresholds
from gpuwatch.sql import progress
from gpuwatch.sql.buckets import epoch_seconds
from gpuwatch.sql.jobs import SLURM
from gpuwatch.sql.readings import samples_between
from gpuwatch.sql.resolution import Span, minutes_from, span_rows, spans, tier_of
from gpuwatch.sql.rollups import MINUTE, as_utc, floor_minute, framework_names, join_distinct, xid_codes
from gpuwatch.sql.schema import (
    GPU_MINUTE_SUMS,
    NODE_MINUTE_SUMS,
    UTIL_BINS,
    gpus,
    job_gpus,
    job_minutes,
    nodes,
    slurm_jobs,
)

#: rounding of every feature: far below any threshold's resolution, far above float noise
#: from the two databases summing in different orders
DIGITS = 6

GPM_SIGNALS = (
    "sm_active",
    "sm_occupancy",
    "tensor_active",
    "dram_active",
    "fp32_active",
    "fp16_active",
    "fp64_active",
)

#: card families without tensor cores (Kepler, Maxwell, Pascal); anything else named is assumed to have them
_NO_TENSOR_CORES = ("Tesla K", "Tesla M", "Tesla P", "Quadro P", "Quadro M", "GeForce GTX")


def _round(value: float | None) -> float | None:
    if value is None:
        return None
    return round(float(value), DIGITS)


def _frameworks(per_gpu: Iterable[GpuFeatures]) -> tuple[str, ...] | None:
    """The frameworks over the GPUs that were inspected; None when none was."""
    seen = [f.frameworks for f in per_gpu if f.frameworks is not None]
    return tuple(sorted({name for names in seen for name in names})) if seen else None


def _div(num: Any, den: Any) -> float | None:
    if num is None or den is None or not den:
        return None
    return _round(float(num) / float(den))


def quantile_from_bins(bins: list[int], q: float) -> float | None:
    """Upper edge (0..1) of the histogram bin holding quantile ``q``; None without samples."""
    total = sum(bins)
    if total == 0:
        return None
    target = q * total
    cum = 0
    for k, count in enumerate(bins):
        cum += count
        if cum >= target and count:
            return k / 10
    return 1.0


def has_tensor_cores(model: str | None) -> bool | None:
    if not model:
        return None
    return not model.startswith(_NO_TENSOR_CORES)


# ---------------------------------------------------------------------------- the job


@dataclass(frozen=True)
class GpuRef:
    node_id: int
    node: str
    gpu_index: int

    @property
    def label(self) -> str:
        return f"{self.node}/gpu{self.gpu_index}"


@dataclass(frozen=True)
class JobScope:
    """What the classifier knows about a job before looking at any sample."""

    job_id: str
    start: datetime | None
    end: datetime | None
    state: str | None
    cpus: int | None
    memory_bytes: int | None
    gpus: tuple[GpuRef, ...]
    gpu_source: str  # "job_gpus" | "attribution" | "none"

    @property
    def node_ids(self) -> tuple[int, ...]:
        return tuple(sorted({g.node_id for g in self.gpus}))


def load_scope(conn: sa.Connection, job_id: str) -> JobScope | None:
    """The job's GPUs and time span; None when nothing at all is known about it."""
    job = conn.execute(sa.select(slurm_jobs).where(slurm_jobs.c.job_id == job_id)).mappings().first()
    refs = [
        GpuRef(r.node_id, r.node, r.gpu_index)
        for r in conn.execute(
            sa.select(nodes.c.id.label("node_id"), job_gpus.c.node, job_gpus.c.gpu_index)
            .join(nodes, nodes.c.name == job_gpus.c.node)
            # Slurm's allocation; GPUs only the agents saw are read from the attribution below
            .where(job_gpus.c.job_id == job_id, job_gpus.c.source == SLURM)
        )
    ]
    source = "job_gpus"
    start = job["start_at"] if job else None
    end = job["end_at"] if job else None
    if not refs:
        a = samples_between(
            conn, "attribution", None if start is None else start - MINUTE, job_ids=[job_id]
        ).c
        query = (
            sa.select(a.node_id, nodes.c.name, a.gpu_index, sa.func.min(a.ts), sa.func.max(a.ts))
            .join(nodes, nodes.c.id == a.node_id)
            .where(a.job_id == job_id)
            .group_by(a.node_id, nodes.c.name, a.gpu_index)
        )
        rows = conn.execute(query).all()
        refs = [GpuRef(r[0], r[1], r[2]) for r in rows]
        source = "attribution" if refs else "none"
        if rows and start is None:
            start = min(r[3] for r in rows)
            end = None if job else max(r[4] for r in rows)
    if job is None and not refs:
        return None
    return JobScope(
        job_id=job_id,
        start=start,
        end=end,
        state=job["state"] if job else None,
        cpus=job["cpus"] if job else None,
        memory_bytes=job["memory_bytes"] if job else None,
        gpus=tuple(sorted(refs, key=lambda g: (g.node, g.gpu_index))),
        gpu_source=source,
    )


def rolled_until(conn: sa.Connection) -> datetime | None:
    return progress.done_until(conn, "minutes")


def window_edge(conn: sa.Connection, scope: JobScope, now: datetime) -> datetime:
    """Exclusive end (a minute boundary) of every window evaluated at ``now``."""
    edge = floor_minute(now)
    if scope.end is not None:
        edge = min(edge, floor_minute(scope.end) + MINUTE)
    done = rolled_until(conn)
    if done is not None:
        edge = min(edge, done)
    return edge


# ---------------------------------------------------------------------------- features


@dataclass(frozen=True)
class Activity:
    """How busy GPUs were over a window: utilization and its spread, idle shares, GPM pipe
    activity. One GPU's (:class:`GpuFeatures`) or a job's over its GPUs, sample-weighted
    (:class:`WindowFeatures`); a GPM field is None where the card has no GPM."""

    util_mean: float | None
    util_p50: float | None
    util_p95: float | None
    util_max: float | None
    util_std: float | None
    zero_share: float | None  # share of samples at exactly 0 % (histogram bin 0)
    idle_fraction_mean: float | None  # mean share of 1 s polls at 0 % inside a sample
    burst_util: float | None  # util_mean / (1 - idle_fraction_mean): how busy the bursts are
    sm_active: float | None
    sm_occupancy: float | None
    tensor_active: float | None
    dram_active: float | None
    fp32_active: float | None
    fp16_active: float | None
    fp64_active: float | None


@dataclass(frozen=True)
class GpuFeatures(Activity):
    """One GPU over one window."""

    gpu: str  # "node/gpuN"
    model: str | None
    minutes: int
    samples: int
    lost_samples: int
    util_samples: int
    memory_used_max_bytes: int | None
    memory_total_bytes: int | None
    memory_used_ratio: float | None
    power_mean_watts: float | None
    power_limit_watts: float | None
    # the card's default (boot-time) limit; None from agents that do not send it
    power_default_limit_watts: float | None
    # enforced / default limit: below 1 someone capped the card (nvidia-smi -pl)
    power_cap_ratio: float | None
    power_ratio: float | None
    temperature_max_celsius: float | None
    throttled_samples: int
    throttled_share: float | None
    # throttled by something other than the power limiter alone (thermal, HW slowdown, ...)
    clock_limited_share: float | None
    # held by the power limiter alone (a card at full load at its limit)
    power_capped_share: float | None
    xid_samples: int
    xid_codes: tuple[int, ...]  # distinct XID codes seen (gpuwatch/classify/xid.py says whose)
    # deep-learning frameworks its processes mapped; () none; None never inspected
    frameworks: tuple[str, ...] | None
    pcie_bytes_per_s: float | None
    nvlink_bytes_per_s: float | None
    sm_clock_ratio: float | None  # mean SM clock / max SM clock over the window's samples
    idle: bool  # every (or idle_zero_share of) util sample at exactly 0 %
    # a MIG instance's share of its card (1/7 for a 1g slice); None for a whole GPU (counts 1)
    card_fraction: float | None = None


@dataclass(frozen=True)
class WindowFeatures(Activity):
    """One job over one window: per-GPU features, job aggregates (its :class:`Activity`, over
    its GPUs, sample-weighted) and host signals."""

    job_id: str
    kind: str  # "recent" | "job"
    start: datetime
    end: datetime
    gpu_source: str
    node_count: int
    gpu_count: int  # GPUs the job holds
    gpus_with_data: int
    gpus: tuple[GpuFeatures, ...]
    models: tuple[str, ...]
    has_gpm: bool
    tensor_cores: bool | None
    gpu_hours: float
    # job aggregates over its GPUs (sample-weighted)
    samples: int
    lost_samples: int
    memory_used_ratio_max: float | None
    power_ratio: float | None
    throttled_share: float | None
    xid_samples: int
    xid_codes: tuple[int, ...]  # distinct over the job's GPUs
    # deep-learning frameworks on the job's GPUs; () none runs one; None never inspected
    frameworks: tuple[str, ...] | None
    pcie_bytes_per_s: float | None  # mean per GPU
    nvlink_bytes_per_s: float | None  # mean per GPU
    idle_gpus: tuple[str, ...]
    faulty_gpus: tuple[str, ...]
    # the job's cgroups (job_minutes), summed over its nodes
    cpu_used_cores: float | None
    cpu_allocated_cores: float | None  # logical CPUs, as Slurm counts them
    # used / allocated physical cores (logical CPUs / the node's threads per core where it
    # reports SMT), at most 1: one busy process per core fills an SMT allocation
    cpu_ratio: float | None
    cpu_ratio_max_node: float | None
    threads_per_core: int | None  # the most of the job's nodes (1: no SMT; None: no host data)
    job_memory_used_max_bytes: int | None
    job_memory_limit_bytes: int | None
    # the worst node's memory without page cache / its limit (cache included where a minute
    # has no figure without it)
    job_memory_ratio: float | None
    job_swap_max_bytes: int | None
    memory_pressure: float | None
    # the job's hosts (node_minutes), mean over its nodes
    host_busy: float | None
    iowait: float | None
    swap_bytes_per_s: float | None
    nic_bytes_per_s: float | None  # per node
    ib_bytes_per_s: float | None  # per node
    network_bytes_per_s: float | None  # NIC + IB per node
    # whole-job context (same in both windows): was a GPU ever used at all?
    job_util_max: float | None
    job_gpu_memory_max_bytes: int | None
    missing: tuple[str, ...] = field(default=())
    #: share of the samples with an idle fraction that lie in idle minutes at a GPU's edges of
    #: the window (:func:`_idle_edges`): an idle phase, not a duty cycle's gaps
    idle_edge_share: float | None = None
    #: the longest run of minutes from a GPU's first to its last minute with work in the window
    active_span_minutes: int | None = None
    #: the job's MIG instances (:func:`mig_evidence`); None when it holds whole GPUs only
    mig: dict[str, Any] | None = None
    #: the window began before the minutes kept (``retention.minute_days``): its GPU and host
    #: figures come from the hourly rollups up to the hours folded, its first hour whole
    hourly: bool = False
    #: where the job's cgroup figures (CPU, memory) begin when it is after ``start``: the cgroup
    #: minutes have no hourly twin, so a window older than them reads them where they are kept
    cgroup_start: datetime | None = None

    @property
    def gap_fraction(self) -> float | None:
        """Share of 0 % polls between a GPU's first and last minute with work: the gaps of a
        duty cycle.

        Idle minutes at the window's edges are left out: a GPU idle throughout, or idle after a
        busy stretch (a window across a job's change from training to idle), is a phase, not
        gaps; counted in ``idle_fraction_mean`` it looks like a loader stalling every step. Idle
        minutes between busy ones stay in: a loader that stalls for longer than a sample is
        still a loader that stalls.
        """
        idle, edges = self.idle_fraction_mean, self.idle_edge_share or 0.0
        if idle is None:
            return None
        if edges >= 0.999:
            return 0.0
        return _round(max(0.0, min(1.0, (idle - edges) / (1.0 - edges))))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["start"] = self.start.isoformat()
        data["end"] = self.end.isoformat()
        data["cgroup_start"] = None if self.cgroup_start is None else self.cgroup_start.isoformat()
        return data


#: every summed metric of gpu_minutes (util_memory_ratio too: unused by the rules, but cheap)
_GPU_SUMS = GPU_MINUTE_SUMS


def _gpu_span_rows(
    scope: JobScope, pieces: Sequence[Span], columns: Sequence[str] | None = None
) -> sa.Subquery:
    """The rows of the job's nodes' GPUs over ``pieces`` (minutes and hours alike): ``columns``
    of them, None all."""
    return span_rows(
        pieces, lambda tier: tier.gpu, lambda rows: (rows.c.node_id.in_(scope.node_ids),), columns
    )


#: what :func:`_idle_edges` reads of a GPU's rows
_EDGE_COLUMNS = ("util_bin_0", "util_gpu_ratio_n", "util_gpu_idle_fraction_ratio_n")


def _gpu_rows(conn: sa.Connection, scope: JobScope, pieces: Sequence[Span]) -> dict[tuple, dict]:
    g = _gpu_span_rows(scope, pieces).c
    cols: list[sa.ColumnElement] = [
        g.node_id,
        g.gpu_index,
        sa.func.sum(g.minutes).label("minutes"),
        sa.func.sum(g.samples).label("samples"),
        sa.func.sum(g.lost_samples).label("lost_samples"),
        sa.func.sum(g.util_gpu_ratio_sumsq).label("util_sumsq"),
        sa.func.max(g.util_gpu_ratio_max).label("util_max"),
        sa.func.max(g.memory_used_bytes_max).label("memory_used_max"),
        sa.func.max(g.memory_total_bytes).label("memory_total"),
        sa.func.max(g.power_limit_watts).label("power_limit"),
        sa.func.max(g.power_default_limit_watts).label("power_default_limit"),
        sa.func.max(g.temperature_celsius_max).label("temperature_max"),
        sa.func.sum(g.throttled_samples).label("throttled_samples"),
        sa.func.sum(g.power_capped_samples).label("power_capped_samples"),
        sa.func.sum(g.xid_samples).label("xid_samples"),
        join_distinct(conn, g.xid_codes).label("xid_codes"),
        join_distinct(conn, g.frameworks).label("frameworks"),
    ]
    for name in _GPU_SUMS:
        cols += [
            sa.func.sum(g[f"{name}_sum"]).label(f"{name}_sum"),
            sa.func.sum(g[f"{name}_n"]).label(f"{name}_n"),
        ]
    cols += [sa.func.sum(g[f"util_bin_{k}"]).label(f"bin{k}") for k in range(UTIL_BINS)]
    wanted = {(ref.node_id, ref.gpu_index) for ref in scope.gpus}
    rows = conn.execute(sa.select(*cols).group_by(g.node_id, g.gpu_index)).mappings()
    return {(r["node_id"], r["gpu_index"]): dict(r) for r in rows if (r["node_id"], r["gpu_index"]) in wanted}


def _idle_edges(conn: sa.Connection, scope: JobScope, pieces: Sequence[Span]) -> tuple[int, int | None]:
    """(samples with a per-poll idle fraction in minutes at 0 % throughout that come before a
    GPU's first minute with work in the window or after its last, the longest span of minutes
    from a GPU's first to its last minute with work; None when no GPU worked).

    Idle minutes at the edges are an idle phase (a job that went idle, or has not started
    computing yet), or a GPU idle all along — not the gaps of a duty cycle, which lie between
    minutes with work; and a duty cycle needs a few minutes of work to show at all. Where the
    window is read in whole hours the edges are whole hours: an hour with any work is worked.
    """
    w = _gpu_span_rows(scope, pieces, _EDGE_COLUMNS).c
    wanted = {(ref.node_id, ref.gpu_index) for ref in scope.gpus}
    active = (
        sa.select(
            w.node_id,
            w.gpu_index,
            sa.func.min(w.time).label("first"),
            sa.func.max(w.time).label("last"),
            sa.func.max(epoch_seconds(conn, w.time) + w.width_s).label("last_end"),
        )
        .where(w.util_bin_0 < w.util_gpu_ratio_n)
        .group_by(w.node_id, w.gpu_index)
        .subquery("active")
    )
    a = active.c
    lengths = [
        (int(r.last_end) - int(as_utc(conn, r.first).timestamp())) // 60
        for r in conn.execute(sa.select(active))
        if (r.node_id, r.gpu_index) in wanted
    ]
    rows_of = _gpu_span_rows(scope, pieces, _EDGE_COLUMNS)
    g = rows_of.c
    rows = conn.execute(
        sa.select(g.node_id, g.gpu_index, sa.func.sum(g.util_gpu_idle_fraction_ratio_n).label("n"))
        .select_from(rows_of.outerjoin(active, sa.and_(a.node_id == g.node_id, a.gpu_index == g.gpu_index)))
        .where(sa.or_(a.first.is_(None), g.time < a.first, g.time > a.last))
        .group_by(g.node_id, g.gpu_index)
    )
    edges = sum(int(r.n or 0) for r in rows if (r.node_id, r.gpu_index) in wanted)
    return edges, max(lengths, default=None)


def _mean(row: dict, name: str) -> float | None:
    return _div(row.get(f"{name}_sum"), row.get(f"{name}_n"))


def _std(sumsq: Any, total: Any, n: Any) -> float | None:
    if not n or sumsq is None or total is None:
        return None
    mean = float(total) / n
    return _round(math.sqrt(max(0.0, float(sumsq) / n - mean * mean)))


def _burst(util: float | None, idle_fraction: float | None) -> float | None:
    if util is None or idle_fraction is None:
        return None
    if idle_fraction >= 0.999:
        return 0.0
    return _round(min(1.0, util / (1.0 - idle_fraction)))


def _gpu_features(
    ref: GpuRef, row: dict | None, model: str | None, card_fraction: float | None, t: Thresholds
) -> GpuFeatures:
    row = row or {}
    bins = [int(row.get(f"bin{k}") or 0) for k in range(UTIL_BINS)]
    util_n = int(row.get("util_gpu_ratio_n") or 0)
    util = _mean(row, "util_gpu_ratio")
    idle_fraction = _mean(row, "util_gpu_idle_fraction_ratio")
    zero_share = _div(bins[0], util_n)
    used, total = row.get("memory_used_max"), row.get("memory_total")
    power = _mean(row, "power_watts")
    samples = int(row.get("samples") or 0)
    lost = int(row.get("lost_samples") or 0)
    throttled = int(row.get("throttled_samples") or 0)
    power_capped = int(row.get("power_capped_samples") or 0)
    xid = int(row.get("xid_samples") or 0)
    return GpuFeatures(
        gpu=ref.label,
        model=model,
        minutes=int(row.get("minutes") or 0),
        samples=samples,
        lost_samples=lost,
        util_samples=util_n,
        util_mean=util,
        util_p50=quantile_from_bins(bins, 0.5),
        util_p95=quantile_from_bins(bins, 0.95),
        util_max=_round(row.get("util_max")),
        util_std=_std(row.get("util_sumsq"), row.get("util_gpu_ratio_sum"), util_n),
        zero_share=zero_share,
        idle_fraction_mean=idle_fraction,
        burst_util=_burst(util, idle_fraction),
        sm_active=_mean(row, "sm_active_ratio"),
        sm_occupancy=_mean(row, "sm_occupancy_ratio"),
        tensor_active=_mean(row, "tensor_active_ratio"),
        dram_active=_mean(row, "dram_active_ratio"),
        fp32_active=_mean(row, "fp32_active_ratio"),
        fp16_active=_mean(row, "fp16_active_ratio"),
        fp64_active=_mean(row, "fp64_active_ratio"),
        memory_used_max_bytes=None if used is None else int(used),
        memory_total_bytes=None if total is None else int(total),
        memory_used_ratio=_div(used, total),
        power_mean_watts=power,
        power_limit_watts=_round(row.get("power_limit")),
        power_default_limit_watts=_round(row.get("power_default_limit")),
        power_cap_ratio=_div(row.get("power_limit"), row.get("power_default_limit")),
        power_ratio=_div(power, row.get("power_limit")),
        temperature_max_celsius=_round(row.get("temperature_max")),
        throttled_samples=throttled,
        throttled_share=_div(throttled, samples),
        clock_limited_share=_div(throttled - power_capped, samples),
        power_capped_share=_div(power_capped, samples),
        xid_samples=xid,
        xid_codes=xid_codes(row.get("xid_codes")),
        frameworks=framework_names(row.get("frameworks")),
        pcie_bytes_per_s=_mean(row, "pcie_bytes_per_s"),
        nvlink_bytes_per_s=_mean(row, "nvlink_bytes_per_s"),
        sm_clock_ratio=_mean(row, "sm_clock_ratio"),
        # util is None on a MIG instance without GPM: no samples, never "idle" for it
        idle=util_n > 0 and zero_share is not None and zero_share >= t.idle_zero_share,
        card_fraction=card_fraction,
    )


def _job_rows(conn: sa.Connection, job_id: str, start: datetime, end: datetime) -> list[dict]:
    j = job_minutes.c
    return [
        dict(r)
        for r in conn.execute(
            sa.select(
                j.node_id,
                sa.func.sum(j.cpu_used_cores_sum).label("cpu_sum"),
                sa.func.sum(j.cpu_used_cores_n).label("cpu_n"),
                sa.func.max(j.cpu_allocated_cores).label("cpu_alloc"),
                sa.func.max(j.memory_used_bytes_max).label("mem_max"),
                sa.func.max(j.memory_anon_bytes_max).label("anon_max"),
                sa.func.count(j.memory_anon_bytes_max).label("anon_minutes"),
                sa.func.count().label("minutes"),
                sa.func.max(j.memory_limit_bytes).label("mem_limit"),
                sa.func.max(j.memory_swap_bytes_max).label("swap_max"),
                sa.func.sum(j.memory_pressure_ratio_sum).label("psi_sum"),
                sa.func.sum(j.memory_pressure_ratio_n).label("psi_n"),
            )
            .where(j.job_id == job_id, j.minute >= start, j.minute < end)
            .group_by(j.node_id)
            .order_by(j.node_id)
        ).mappings()
    ]


def _node_rows(conn: sa.Connection, node_ids: tuple[int, ...], pieces: Sequence[Span]) -> list[dict]:
    summed = [f"{name}_{part}" for name in NODE_MINUTE_SUMS for part in ("sum", "n")]
    n = span_rows(
        pieces,
        lambda tier: tier.node,
        lambda rows: (rows.c.node_id.in_(node_ids),),
        [*summed, "threads_per_core"],
    ).c
    cols: list[sa.ColumnElement] = [n.node_id]
    for name in NODE_MINUTE_SUMS:
        cols += [
            sa.func.sum(n[f"{name}_sum"]).label(f"{name}_sum"),
            sa.func.sum(n[f"{name}_n"]).label(f"{name}_n"),
        ]
    cols.append(sa.func.max(n.threads_per_core).label("threads_per_core"))
    return [
        dict(r) for r in conn.execute(sa.select(*cols).group_by(n.node_id).order_by(n.node_id)).mappings()
    ]


def _avg(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return _round(math.fsum(present) / len(present)) if present else None


def _models(conn: sa.Connection, scope: JobScope) -> dict[tuple[int, int], tuple[str | None, float | None]]:
    """(node, GPU) -> (model name, share of the card: a MIG instance's fraction, None whole)."""
    g = gpus.c
    rows = conn.execute(
        sa.select(g.node_id, g.gpu_index, g.name, g.card_fraction_ratio).where(g.node_id.in_(scope.node_ids))
    )
    return {(r[0], r[1]): (r[2], r[3]) for r in rows}


def gpu_hours_of(per_gpu: Sequence[GpuFeatures]) -> float:
    """GPU-hours held: each GPU's minutes, a MIG instance's weighted by its share of the card
    (a 1g instance of an H100 held for an hour is 1/7 of a GPU-hour)."""
    minutes = math.fsum(f.minutes * (1.0 if f.card_fraction is None else f.card_fraction) for f in per_gpu)
    return _round(minutes / 60.0) or 0.0


def mig_evidence(per_gpu: Sequence[GpuFeatures]) -> dict[str, Any] | None:
    """What a verdict says of a job's MIG instances: NVML utilization is not supported on them,
    so "utilization" is GPM graphics-engine activity (``gr_engine_active_ratio``), and
    GPU-hours count each instance's share of its card."""
    instances = [f for f in per_gpu if f.card_fraction is not None]
    if not instances:
        return None
    return {
        "instances": [f.gpu for f in instances],
        "card_fraction": {f.gpu: round(f.card_fraction or 0.0, 4) for f in instances},
        "cards": round(math.fsum(f.card_fraction or 0.0 for f in instances), 4),
        "util_signal": "gr_engine_active",
        "note": "MIG instance: utilization is GPM graphics-engine activity (NVML utilization is not "
        "supported on MIG); GPU-hours count the instance's share of its card",
    }


def window_features(
    conn: sa.Connection,
    scope: JobScope,
    kind: str,
    start: datetime,
    end: datetime,
    thresholds: Thresholds,
    context: WindowFeatures | None = None,
) -> WindowFeatures:
    """Features of ``scope``'s job over the whole minutes ``[start, end)``.

    ``context`` is the whole-job window when computing the recent one (for "was a GPU ever
    used"); without it the window is its own context.
    """
    start = floor_minute(start)
    kept_from = minutes_from(conn)
    older = tier_of(start, kept_from).hourly  # begins before the minutes kept
    pieces = spans(conn, start, end)
    # the cgroup minutes have no hourly twin: a window older than them reads them where they are kept
    cgroup_start = max(start, kept_from) if older and kept_from is not None else start
    rows = _gpu_rows(conn, scope, pieces)
    models = _models(conn, scope)
    per_gpu = tuple(
        _gpu_features(ref, rows.get(key), *models.get(key, (None, None)), thresholds)
        for ref in scope.gpus
        for key in [(ref.node_id, ref.gpu_index)]
    )
    all_rows = [rows[k] for k in sorted(rows)]

    def tot(key: str) -> float | None:
        values = [r.get(key) for r in all_rows if r.get(key) is not None]
        return math.fsum(float(v) for v in values) if values else None

    def jmean(name: str) -> float | None:
        return _div(tot(f"{name}_sum"), tot(f"{name}_n"))

    bins = [int(tot(f"bin{k}") or 0) for k in range(UTIL_BINS)]
    edges, active_span = _idle_edges(conn, scope, pieces)
    util_n = int(tot("util_gpu_ratio_n") or 0)
    util = jmean("util_gpu_ratio")
    idle_fraction = jmean("util_gpu_idle_fraction_ratio")
    samples = int(tot("samples") or 0)
    with_data = [f for f in per_gpu if f.samples]
    model_names = tuple(sorted({f.model for f in per_gpu if f.model}))
    tensor = [has_tensor_cores(m) for m in model_names]
    util_max_values = [f.util_max for f in per_gpu if f.util_max is not None]
    mem_max_values = [f.memory_used_max_bytes for f in per_gpu if f.memory_used_max_bytes is not None]

    # job cgroups: cores summed over nodes; ratios against the allocation's physical cores
    jrows = _job_rows(conn, scope.job_id, cgroup_start, end)
    nrows = _node_rows(conn, scope.node_ids, pieces)
    # logical CPUs per core of each node that reports it (a node that does not counts as 1)
    threads = {r["node_id"]: int(r["threads_per_core"]) for r in nrows if r["threads_per_core"] is not None}
    cpu_used = cpu_alloc = cores_alloc = None
    node_ratios: list[float] = []
    mem_max = mem_limit = swap_max = None
    mem_ratios: list[float] = []
    for r in jrows:
        used = _div(r["cpu_sum"], r["cpu_n"])
        if used is not None:
            cpu_used = (cpu_used or 0.0) + used
        if r["cpu_alloc"] is not None:
            cpu_alloc = (cpu_alloc or 0.0) + float(r["cpu_alloc"])
            cores = float(r["cpu_alloc"]) / max(1, threads.get(r["node_id"], 1))
            cores_alloc = (cores_alloc or 0.0) + cores
            if used is not None and cores:
                node_ratios.append(min(1.0, used / cores))
        if r["mem_max"] is not None:
            mem_max = max(mem_max or 0, int(r["mem_max"]))
            if r["mem_limit"]:
                # page cache is reclaimed before the job runs short: judge what is left
                whole = r["anon_max"] is not None and r["anon_minutes"] == r["minutes"]
                held = int(r["anon_max"]) if whole else int(r["mem_max"])
                mem_ratios.append(held / int(r["mem_limit"]))
        if r["mem_limit"] is not None:
            mem_limit = max(mem_limit or 0, int(r["mem_limit"]))
        if r["swap_max"] is not None:
            swap_max = max(swap_max or 0, int(r["swap_max"]))
    psi = _div(math.fsum(float(r["psi_sum"] or 0) for r in jrows), sum(int(r["psi_n"] or 0) for r in jrows))

    def nmean(name: str) -> list[float | None]:
        return [_div(r[f"{name}_sum"], r[f"{name}_n"]) for r in nrows]

    swap = [
        None if i is None and o is None else (i or 0.0) + (o or 0.0)
        for i, o in zip(nmean("swap_in_bytes_per_s"), nmean("swap_out_bytes_per_s"), strict=True)
    ]
    nic = nmean("nic_bytes_per_s")
    ib = nmean("ib_bytes_per_s")
    net = [None if a is None and b is None else (a or 0.0) + (b or 0.0) for a, b in zip(nic, ib, strict=True)]

    features: dict[str, Any] = dict(
        job_id=scope.job_id,
        kind=kind,
        start=start,
        end=end,
        gpu_source=scope.gpu_source,
        hourly=older,
        cgroup_start=cgroup_start if cgroup_start != start else None,
        node_count=len(scope.node_ids),
        gpu_count=len(scope.gpus),
        gpus_with_data=len(with_data),
        gpus=per_gpu,
        models=model_names,
        has_gpm=any(f.sm_active is not None for f in per_gpu),
        tensor_cores=None if not tensor or None in tensor else all(tensor),
        gpu_hours=gpu_hours_of(per_gpu),
        mig=mig_evidence(per_gpu),
        samples=samples,
        lost_samples=int(tot("lost_samples") or 0),
        util_mean=util,
        util_p50=quantile_from_bins(bins, 0.5),
        util_p95=quantile_from_bins(bins, 0.95),
        util_max=max(util_max_values) if util_max_values else None,
        util_std=_std(tot("util_sumsq"), tot("util_gpu_ratio_sum"), util_n),
        zero_share=_div(bins[0], util_n),
        idle_fraction_mean=idle_fraction,
        idle_edge_share=_div(edges, tot("util_gpu_idle_fraction_ratio_n")),
        active_span_minutes=active_span,
        burst_util=_burst(util, idle_fraction),
        sm_active=jmean("sm_active_ratio"),
        sm_occupancy=jmean("sm_occupancy_ratio"),
        tensor_active=jmean("tensor_active_ratio"),
        dram_active=jmean("dram_active_ratio"),
        fp32_active=jmean("fp32_active_ratio"),
        fp16_active=jmean("fp16_active_ratio"),
        fp64_active=jmean("fp64_active_ratio"),
        memory_used_ratio_max=max(
            (f.memory_used_ratio for f in per_gpu if f.memory_used_ratio is not None), default=None
        ),
        power_ratio=_avg([f.power_ratio for f in with_data]),
        throttled_share=_div(sum(f.throttled_samples for f in per_gpu), samples),
        xid_samples=sum(f.xid_samples for f in per_gpu),
        xid_codes=tuple(sorted({code for f in per_gpu for code in f.xid_codes})),
        frameworks=_frameworks(per_gpu),
        pcie_bytes_per_s=_avg([f.pcie_bytes_per_s for f in with_data]),
        nvlink_bytes_per_s=_avg([f.nvlink_bytes_per_s for f in with_data]),
        idle_gpus=tuple(f.gpu for f in per_gpu if f.idle),
        faulty_gpus=tuple(
            f.gpu
            for f in per_gpu
            if f.lost_samples >= thresholds.fault_min_samples or f.xid_samples >= thresholds.fault_min_samples
        ),
        cpu_used_cores=_round(cpu_used),
        cpu_allocated_cores=_round(cpu_alloc),
        cpu_ratio=_round(min(1.0, cpu_used / cores_alloc)) if cpu_used is not None and cores_alloc else None,
        threads_per_core=max(threads.values(), default=None),
        cpu_ratio_max_node=_round(max(node_ratios)) if node_ratios else None,
        job_memory_used_max_bytes=mem_max,
        job_memory_limit_bytes=mem_limit,
        job_memory_ratio=_round(max(mem_ratios)) if mem_ratios else None,
        job_swap_max_bytes=swap_max,
        memory_pressure=psi,
        host_busy=_avg(nmean("busy_ratio")),
        iowait=_avg(nmean("iowait_ratio")),
        swap_bytes_per_s=_avg(swap),
        nic_bytes_per_s=_avg(nic),
        ib_bytes_per_s=_avg(ib),
        network_bytes_per_s=_avg(net),
        job_util_max=None,
        job_gpu_memory_max_bytes=None,
    )
    if context is not None:
        features["job_util_max"] = context.job_util_max
        features["job_gpu_memory_max_bytes"] = context.job_gpu_memory_max_bytes
    else:
        features["job_util_max"] = features["util_max"]
        features["job_gpu_memory_max_bytes"] = max(mem_max_values) if mem_max_values else None

    checks = {
        **{name: features[name] for name in GPM_SIGNALS},
        "util_gpu": features["util_mean"],
        "util_idle_fraction": features["idle_fraction_mean"],
        "gpu_memory": features["memory_used_ratio_max"],
        "power": features["power_ratio"],
        "nvlink": features["nvlink_bytes_per_s"],
        "pcie": features["pcie_bytes_per_s"],
        "job_cpu": features["cpu_ratio"],
        "job_memory_limit": features["job_memory_ratio"],
        "job_memory_pressure": features["memory_pressure"],
        "host_iowait": features["iowait"],
        "host_swap": features["swap_bytes_per_s"],
        "network": features["network_bytes_per_s"],
    }
    features["missing"] = tuple(name for name, value in checks.items() if value is None)
    return WindowFeatures(**features)


def job_windows(
    conn: sa.Connection, scope: JobScope, now: datetime, thresholds: Thresholds
) -> tuple[WindowFeatures, WindowFeatures] | None:
    """(recent, whole-job) features at ``now``; None when the job has no start or no minutes yet."""
    if scope.start is None:
        return None
    edge = window_edge(conn, scope, now)
    start = floor_minute(scope.start)
    if edge <= start:
        return None
    whole = window_features(conn, scope, "job", start, edge, thresholds)
    recent_start = max(start, edge - timedelta(seconds=thresholds.recent_window_s))
    recent = window_features(conn, scope, "recent", recent_start, edge, thresholds, context=whole)
    return recent, whole
