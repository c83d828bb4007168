"""The per-minute rollups of one job's GPUs and nodes, for :mod:`gpuwatch.views.job` (and the
aggregates of a GPU's minutes the node page shares with it).

Only rollup tables are read (``gpu_minutes``, ``job_minutes``, ``node_minutes``), never raw
samples, so a page costs the same on a day-old job as on a new one. A range older than the
minutes kept reads the hourly tables instead (``gpu_hours``, ``node_hours``, and the job's
``job_hours`` for its CPU; ``sql/resolution.py``), a point per hour up to the hour in
progress. A GPU's sums over a range (:func:`gpu_totals`) read its whole folded hours and only
the minutes around them (``resolution.spans``): the same sums, a tenth of the rows. Every
mean is ``SUM(x_sum) / SUM(x_n)``: a metric a card does not have is None, never 0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from gpuwatch.classify.features import GpuRef
from gpuwatch.sql.buckets import floor_hour, hour_bucket
from gpuwatch.sql.job_hours import host_sums, summed_until
from gpuwatch.sql.resolution import Span, Tier, minute_offset, span_rows, spans, tier_for
from gpuwatch.sql.rollups import join_distinct
from gpuwatch.sql.schema import gpu_minutes, job_hours, job_minutes, nodes
from gpuwatch.sql.types import UtcDateTime
from gpuwatch.views.faults import memory_repair_columns

MINUTE = timedelta(minutes=1)
#: a chart point: (minute, value or None where there is no data)
Points = list[tuple[datetime, float | None]]
GPU_METRICS = ("util", "sm", "tensor", "memory", "power")


def mean(total: Any, n: Any) -> float | None:
    return None if not n or total is None else float(total) / float(n)


def _minute(value: Any, dialect: sa.Dialect) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    out = UtcDateTime().process_result_value(value, dialect)
    assert out is not None
    return out


def sum_and_n(metric: str, label: str, table: sa.FromClause = gpu_minutes) -> list[sa.Label[Any]]:
    """``SUM(<metric>_sum)`` and ``SUM(<metric>_n)`` of ``table`` (GPU minutes or hours),
    labelled ``<label>_sum`` and ``<label>_n``: what :func:`mean` divides."""
    g = table.c
    return [sa.func.sum(g[f"{metric}_{part}"]).label(f"{label}_{part}") for part in ("sum", "n")]


def gpu_span_columns(conn: sa.Connection, table: sa.FromClause = gpu_minutes) -> list[sa.Label[Any]]:
    """What the job page and the node page both show of a GPU over a span, as aggregates of its
    rollup rows (``table``: GPU minutes or hours): the sums and counts of the means of util, SM
    activity and power, the most memory used and the memory size, the samples it sent as lost,
    its XIDs (the ``xid_codes`` texts joined) and its memory's repairs."""
    g = table.c
    return [
        *sum_and_n("util_gpu_ratio", "util", table),
        *sum_and_n("sm_active_ratio", "sm", table),
        *sum_and_n("power_watts", "power", table),
        sa.func.max(g.memory_used_bytes_max).label("memory_max"),
        sa.func.max(g.memory_total_bytes).label("memory_total"),
        sa.func.sum(g.lost_samples).label("lost"),
        join_distinct(conn, g.xid_codes).label("xid_text"),
        *memory_repair_columns(table),
    ]


#: the GPU rollup columns :func:`gpu_totals` sums
TOTALS_COLUMNS = (
    "samples",
    *(
        f"{m}_{part}"
        for m in ("util_gpu_ratio", "sm_active_ratio", "power_watts", "tensor_active_ratio")
        for part in ("sum", "n")
    ),
    "memory_used_bytes_max",
    "memory_total_bytes",
    "lost_samples",
    "xid_codes",
    "reset_pending_samples",
    "remap_failed_samples",
    "power_limit_watts",
    "energy_joules",
)


def gpu_totals(conn: sa.Connection, ref: GpuRef, start: datetime, end: datetime) -> dict[str, Any]:
    """One GPU's sums over ``[start, end)``: :func:`gpu_span_columns`, and its samples, the sums
    of its tensor activity, its power limit and its energy (joules, None where not measured)."""
    rows = span_rows(
        spans(conn, start, end),
        lambda tier: tier.gpu,
        lambda table: (table.c.node_id == ref.node_id, table.c.gpu_index == ref.gpu_index),
        TOTALS_COLUMNS,
    )
    g = rows.c
    r = (
        conn.execute(
            sa.select(
                sa.func.sum(g.samples).label("samples"),
                *gpu_span_columns(conn, rows),
                *sum_and_n("tensor_active_ratio", "tensor", rows),
                sa.func.max(g.power_limit_watts).label("power_limit"),
                sa.func.sum(g.energy_joules).label("energy_j"),
            )
        )
        .mappings()
        .one()
    )
    return dict(r)


def util_per_minute(
    conn: sa.Connection, refs: Sequence[GpuRef], start: datetime, end: datetime
) -> dict[GpuRef, list[float | None]]:
    """Each GPU's mean utilization per minute of ``[start, end)``, None where no data; on the
    hourly tier each minute of the range holds its hour's mean."""
    tier = tier_for(conn, start, end)
    g = tier.gpu.c
    minutes = max(1, int((end - start) / MINUTE))
    per_row = int(tier.width / MINUTE)
    series: dict[GpuRef, list[float | None]] = {}
    for ref in refs:
        values: list[float | None] = [None] * minutes
        rows = conn.execute(
            sa.select(tier.time(tier.gpu), g.util_gpu_ratio_sum, g.util_gpu_ratio_n).where(
                g.node_id == ref.node_id, g.gpu_index == ref.gpu_index, *tier.within(tier.gpu, start, end)
            )
        )
        for bucket, total, n in rows:
            first = int((_minute(bucket, conn.dialect) - start) / MINUTE)
            for k in range(max(0, first), min(minutes, first + per_row)):
                values[k] = mean(total, n)
        series[ref] = values
    return series


def util_bucketed(
    conn: sa.Connection, refs: Sequence[GpuRef], start: datetime, end: datetime, columns: int
) -> dict[GpuRef, list[float | None]]:
    """:func:`downsample` of each GPU's per-minute utilization, done by a GROUP BY in the database.

    A week-long job is ~10,000 minutes per GPU, which cost ~1 s to fetch and average in Python.
    Minute ``k`` belongs to column ``((k + 1) * columns - 1) // minutes``: the column whose
    slice ``[c * minutes // columns, (c + 1) * minutes // columns)`` holds it. Where a column
    spans an hour or more, the whole hours folded are read from the hourly rollups
    (``resolution.spans``); an hour row lies in the column of its first minute in the range and
    counts as its minutes, at its samples' mean (the minutes' mean but where a minute of the
    hour holds fewer samples).
    """
    minutes = max(1, int((end - start) / MINUTE))
    if minutes >= 60 * columns:
        pieces = spans(conn, start, end)
    else:
        pieces = (Span(tier_for(conn, start, end), start, end),)
    series: dict[GpuRef, list[float | None]] = {}
    for ref in refs:
        rows_of = span_rows(
            pieces,
            lambda tier: tier.gpu,
            lambda table, ref=ref: (table.c.node_id == ref.node_id, table.c.gpu_index == ref.gpu_index),
            ("util_gpu_ratio_sum", "util_gpu_ratio_n"),
        )
        g = rows_of.c
        column = ((minute_offset(conn, g.time, start) + 1) * columns - 1) // minutes
        with_util = g.util_gpu_ratio_n > 0
        weighted = sa.case((with_util, g.util_gpu_ratio_sum / g.util_gpu_ratio_n * g.minutes))
        counted = sa.case((with_util, g.minutes))
        values: list[float | None] = [None] * columns
        rows = conn.execute(
            sa.select(column.label("c"), sa.func.sum(weighted) / sa.func.sum(counted)).group_by(
                sa.literal_column("c")
            )
        )
        for c, value in rows:
            if 0 <= int(c) < columns and value is not None:
                values[int(c)] = float(value)
        series[ref] = values
    return series


def downsample(values: Sequence[float | None], columns: int = 60) -> list[float | None]:
    """Mean of each of ``columns`` equal slices (fewer values: unchanged); None: slice has no data."""
    if len(values) <= columns:
        return list(values)
    out: list[float | None] = []
    for c in range(columns):
        lo, hi = c * len(values) // columns, (c + 1) * len(values) // columns
        got = [x for x in values[lo:hi] if x is not None]
        out.append(sum(got) / len(got) if got else None)
    return out


def chart_series(
    conn: sa.Connection, job_id: str, refs: Sequence[GpuRef], start: datetime, end: datetime
) -> tuple[dict[str, dict[GpuRef, Points]], dict[str, Points], dict[str, Points], bool]:
    """Per-minute series of ``[start, end)`` (per hour before the minutes kept): GPU metrics per
    GPU (ratios), CPU, network; simulated?

    Only the job's own (node, GPU) pairs are read: a 1-GPU job on an 8-GPU node reads 1/8 of
    the node's rows.
    """
    tier = tier_for(conn, start, end)
    g, n, at = tier.gpu.c, tier.node.c, tier.time_column
    wanted = {(ref.node_id, ref.gpu_index): ref for ref in refs}
    node_ids = sorted({ref.node_id for ref in refs})
    gpu_rows = (
        conn.execute(
            sa.select(tier.gpu)
            .where(sa.tuple_(g.node_id, g.gpu_index).in_(sorted(wanted)), *tier.within(tier.gpu, start, end))
            .order_by(tier.time(tier.gpu))
        ).mappings()
        if wanted
        else []
    )
    gpu: dict[str, dict[GpuRef, Points]] = {m: defaultdict(list) for m in GPU_METRICS}
    simulated = False
    for r in gpu_rows:
        ref, t = wanted[(r["node_id"], r["gpu_index"])], _minute(r[at], conn.dialect)
        simulated = simulated or bool(r["simulated"])
        gpu["util"][ref].append((t, mean(r["util_gpu_ratio_sum"], r["util_gpu_ratio_n"])))
        gpu["sm"][ref].append((t, mean(r["sm_active_ratio_sum"], r["sm_active_ratio_n"])))
        gpu["tensor"][ref].append((t, mean(r["tensor_active_ratio_sum"], r["tensor_active_ratio_n"])))
        used, total = r["memory_used_bytes_max"], r["memory_total_bytes"]
        gpu["memory"][ref].append((t, used / total if used is not None and total else None))
        watts, limit = mean(r["power_watts_sum"], r["power_watts_n"]), r["power_limit_watts"]
        gpu["power"][ref].append((t, watts / limit if watts is not None and limit else None))
    # CPU as ratios: the job's cgroup against its allocation, the node's busy and iowait
    cpu: dict[str, Points] = defaultdict(list)
    cpu["job CPU of allocated"] = _job_cpu(conn, tier, job_id, start, end)
    if not cpu["job CPU of allocated"]:
        del cpu["job CPU of allocated"]
    network: dict[str, Points] = defaultdict(list)
    node_rows = (
        conn.execute(
            sa.select(tier.node, nodes.c.name)
            .join(nodes, nodes.c.id == n.node_id)
            .where(n.node_id.in_(node_ids), *tier.within(tier.node, start, end))
            .order_by(tier.time(tier.node))
        ).mappings()
        if node_ids
        else []
    )
    for r in node_rows:
        t, name = _minute(r[at], conn.dialect), r["name"]
        cpu[f"{name} busy"].append((t, mean(r["busy_ratio_sum"], r["busy_ratio_n"])))
        cpu[f"{name} iowait"].append((t, mean(r["iowait_ratio_sum"], r["iowait_ratio_n"])))
        network[f"{name} NIC"].append((t, mean(r["nic_bytes_per_s_sum"], r["nic_bytes_per_s_n"])))
        if r["ib_bytes_per_s_n"]:
            network[f"{name} IB"].append((t, mean(r["ib_bytes_per_s_sum"], r["ib_bytes_per_s_n"])))
    return {m: dict(v) for m, v in gpu.items()}, dict(cpu), dict(network), simulated


def _job_cpu(conn: sa.Connection, tier: Tier, job_id: str, start: datetime, end: datetime) -> Points:
    """The job's cgroup CPU use over its allocation, per minute (``job_minutes``), or per hour
    on the hourly tier (``job_hours``: the summed mean cores used over the summed cores held;
    the hours not summed yet, such as the hour in progress, summed here from ``job_minutes``)."""
    if not tier.hourly:
        j = job_minutes.c
        query = sa.select(j.minute, j.cpu_used_cores_sum, j.cpu_used_cores_n, j.cpu_allocated_cores)
        rows = conn.execute(
            query.where(j.job_id == job_id, j.minute >= start, j.minute < end).order_by(j.minute)
        )
        used = [(t, mean(total, n), alloc) for t, total, n, alloc in rows]
    else:
        h = job_hours.c
        summed = summed_until(conn) or floor_hour(start)
        query = sa.select(h.hour, h.cpu_used_cores, h.cpu_allocated_cores).where(h.job_id == job_id)
        rows = list(
            conn.execute(query.where(*tier.within(job_hours, start, min(end, summed))).order_by(h.hour))
        )
        if summed < end:  # the hours not summed yet (the hour in progress): the same sums, from the minutes
            j = job_minutes.c
            hour = hour_bucket(conn, j.minute).label("hour")
            cpu_used, cpu_allocated = host_sums()[:2]
            since = max(summed, floor_hour(start))
            unsummed = sa.select(hour, cpu_used, cpu_allocated).where(
                j.job_id == job_id, j.minute >= since, j.minute < end
            )
            rows += conn.execute(unsummed.group_by(hour).order_by(hour))
        used = [(t, None if u is None else float(u), alloc) for t, u, alloc in rows]
    return [
        (_minute(t, conn.dialect), u / alloc if u is not None and alloc else None) for t, u, alloc in used
    ]
