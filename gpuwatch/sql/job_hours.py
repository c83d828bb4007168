"""Each Slurm job's minutes summed per hour (``job_hours``): what reports over weeks read.

A job's GPU-minutes are the ``gpu_minutes`` rows of the GPUs it held (``job_gpus``) from the
minute it started to its end; its cgroup-minutes are its ``job_minutes`` rows. An hour is summed
once every minute of it is rolled up and it has settled (:data:`SETTLE`: the Slurm sync has
named the jobs that started in it), and summed again when minutes in it are re-rolled (a node's
late batches). Summing an hour is "delete its rows, insert them again", so it is idempotent.
A job whose GPU map is replaced has its summed hours summed again, its own rows alone
(:func:`resum_jobs`).

The sums are the ones :mod:`gpuwatch.views.period` takes from the minute tables, so a report
adds whole hours from here to the minutes of the hours not summed yet and gets the same figures.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

import sqlalchemy as sa

from gpuwatch.sql import progress
from gpuwatch.sql.buckets import as_utc, ceil_hour, floor_hour, minute_bucket
from gpuwatch.sql.schema import (
    gpu_minutes,
    job_gpus,
    job_hours,
    job_minutes,
    job_totals,
    nodes,
    slurm_jobs,
)

HOUR = timedelta(hours=1)
MINUTE = timedelta(minutes=1)
#: an hour is summed this long after its last minute is rolled up
SETTLE = timedelta(minutes=10)
#: ``rollup_state`` row: hours summed up to (exclusive)
STATE = "job_hours"


def summed_until(conn: sa.Connection) -> datetime | None:
    """Hours before this are in ``job_hours``; None before the first hour was summed."""
    return progress.done_until(conn, STATE)


def gpu_sums(table: sa.Table = gpu_minutes) -> list[sa.ColumnElement]:
    """The sums over a set of GPU-minutes (a job's: :func:`gpu_minutes_of_jobs`): minutes,
    utilization, and energy with the samples estimated from power and the samples behind it
    (minutes with an energy figure, a lost GPU's samples left out). ``table``: ``gpu_minutes``,
    or ``gpu_hours``, whose rows count their ``minutes`` (and, for the samples behind the
    energy, every sample of an hour with an energy figure)."""
    m = table.c
    counted = sa.case((m.energy_joules.is_not(None), m.samples - m.lost_samples), else_=0)
    minutes = sa.func.coalesce(sa.func.sum(m.minutes), 0) if "minutes" in m else sa.func.count()
    return [
        minutes.label("gpu_minutes"),
        sa.func.sum(m.util_gpu_ratio_sum).label("util_gpu_ratio_sum"),
        sa.func.coalesce(sa.func.sum(m.util_gpu_ratio_n), 0).label("util_gpu_ratio_n"),
        sa.func.sum(m.energy_joules).label("energy_joules"),
        sa.func.coalesce(sa.func.sum(m.energy_power_samples), 0).label("energy_power_samples"),
        sa.func.coalesce(sa.func.sum(counted), 0).label("energy_samples"),
    ]


def gpu_minutes_of_jobs(conn: sa.Connection, start: datetime, end: datetime) -> sa.FromClause:
    """``gpu_minutes`` of ``[start, end)`` joined to the jobs that held each GPU at that minute."""
    j, jg, n, m = slurm_jobs.c, job_gpus.c, nodes.c, gpu_minutes.c
    return (
        # only the jobs that overlap the span: each earlier job of a GPU would join every minute
        # of it before the time filter drops it (a cost that grew with the GPU's job history)
        slurm_jobs.join(
            job_gpus,
            sa.and_(
                jg.job_id == j.job_id,
                j.start_at < end,
                sa.or_(j.end_at.is_(None), j.end_at > start),
            ),
        )
        .join(nodes, n.name == jg.node)
        .join(
            gpu_minutes,
            sa.and_(
                m.node_id == n.id,
                m.gpu_index == jg.gpu_index,
                m.minute >= start,
                m.minute < end,
                j.start_at.is_not(None),
                m.minute >= minute_bucket(conn, j.start_at),
                sa.or_(j.end_at.is_(None), m.minute < j.end_at),
            ),
        )
    )


def covers(start: datetime, end: datetime) -> sa.ColumnElement[bool]:
    """The ``slurm_jobs`` row's run holds every minute of ``[start, end)``: it started in the
    minute of ``start`` or before (its first GPU-minute is the minute it started in) and had not
    ended by ``end``. Each GPU-minute of ``[start, end)`` of its GPUs is then one of its own."""
    j, first_minute = slurm_jobs.c, start.replace(second=0, microsecond=0)
    return sa.and_(j.start_at < first_minute + MINUTE, sa.or_(j.end_at.is_(None), j.end_at >= end))


def gpu_sums_of_jobs(
    conn: sa.Connection, start: datetime, end: datetime, where: tuple[sa.ColumnElement[bool], ...] = ()
) -> list[sa.RowMapping]:
    """Each job's :func:`gpu_sums` over its GPU-minutes in ``[start, end)`` (:func:`gpu_minutes_of_jobs`),
    of the jobs that match ``where`` (conditions on ``slurm_jobs``), a row per job.

    A job whose run holds the whole span (:func:`covers`; most jobs, for an hour or the part of one)
    adds its GPUs' sums: the minutes are summed per GPU first, then per job, a row per GPU to join
    instead of a row per GPU-minute. The jobs that start or end inside the span, if any (a look at
    ``slurm_jobs`` first), are joined minute by minute, as :func:`gpu_minutes_of_jobs` says."""
    j, jg, n, m = slurm_jobs.c, job_gpus.c, nodes.c, gpu_minutes.c
    per_gpu = (
        sa.select(m.node_id, m.gpu_index, *gpu_sums())
        .where(m.minute >= start, m.minute < end)
        .group_by(m.node_id, m.gpu_index)
        .subquery("per_gpu")
    )
    g = per_gpu.c
    whole = (
        sa.select(
            j.job_id,
            *(sa.cast(sa.func.sum(g[name]), sa.BigInteger).label(name) for name in _COUNTS),
            *(sa.func.sum(g[name]).label(name) for name in _SUMS),
        )
        .select_from(
            slurm_jobs.join(job_gpus, jg.job_id == j.job_id)
            .join(nodes, n.name == jg.node)
            .join(per_gpu, sa.and_(g.node_id == n.id, g.gpu_index == jg.gpu_index))
        )
        .where(covers(start, end), *where)
        .group_by(j.job_id)
    )
    rows = list(conn.execute(whole).mappings())
    cut = (sa.not_(covers(start, end)), *where)
    in_span = (j.start_at.is_not(None), j.start_at < end, sa.or_(j.end_at.is_(None), j.end_at > start))
    if conn.execute(sa.select(j.job_id).where(*in_span, *cut).limit(1)).first() is not None:
        query = sa.select(j.job_id, *gpu_sums()).select_from(gpu_minutes_of_jobs(conn, start, end))
        query = query.where(*cut)
        rows += conn.execute(query.group_by(j.job_id)).mappings()
    return rows


#: :func:`gpu_sums` that count (integers, never NULL) and that sum values (NULL: none had one)
_COUNTS = ("gpu_minutes", "util_gpu_ratio_n", "energy_power_samples", "energy_samples")
_SUMS = ("util_gpu_ratio_sum", "energy_joules")


def host_sums() -> list[sa.ColumnElement]:
    """The sums over a job's cgroup-minutes: each node-minute's mean cores used and the cores it
    had (only node-minutes with both), and the memory peak and limit on one node."""
    c = job_minutes.c
    counted = sa.and_(c.cpu_used_cores_n > 0, c.cpu_allocated_cores > 0)
    return [
        sa.func.sum(sa.case((counted, c.cpu_used_cores_sum / c.cpu_used_cores_n), else_=None)).label(
            "cpu_used_cores"
        ),
        sa.func.sum(sa.case((counted, c.cpu_allocated_cores), else_=None)).label("cpu_allocated_cores"),
        sa.func.max(c.memory_used_bytes_max).label("memory_used_bytes_max"),
        sa.func.max(c.memory_limit_bytes).label("memory_limit_bytes"),
    ]


def sum_hours(
    conn: sa.Connection, start: datetime, end: datetime, job_ids: Collection[str] | None = None
) -> int:
    """(Re)build ``job_hours`` of the whole hours in ``[start, end)``, of ``job_ids`` alone when
    given; the job-hours written."""
    start, end = floor_hour(start), floor_hour(end)
    only: tuple[sa.ColumnElement[bool], ...] = ()
    if job_ids is not None:
        only = (job_hours.c.job_id.in_(sorted(job_ids)),)
    written = 0
    hour = start
    while hour < end:
        _forget_totals(conn, hour, only)
        conn.execute(job_hours.delete().where(job_hours.c.hour == hour, *only))
        rows: dict[str, dict] = {}
        of_jobs = () if job_ids is None else (slurm_jobs.c.job_id.in_(sorted(job_ids)),)
        for r in gpu_sums_of_jobs(conn, hour, hour + HOUR, of_jobs):
            rows[r["job_id"]] = {"job_id": r["job_id"], "hour": hour, **r}
        c = job_minutes.c
        host = sa.select(c.job_id, *host_sums()).where(c.minute >= hour, c.minute < hour + HOUR)
        if job_ids is not None:
            host = host.where(c.job_id.in_(sorted(job_ids)))
        for r in conn.execute(host.group_by(c.job_id)).mappings():
            rows.setdefault(r["job_id"], {"job_id": r["job_id"], "hour": hour}).update(r)
        if rows:
            conn.execute(job_hours.insert(), [_complete(row) for row in rows.values()])
        _forget_totals(conn, hour, only)
        written += len(rows)
        hour += HOUR
    return written


def resum_jobs(conn: sa.Connection, job_ids: Collection[str]) -> int:
    """Sum again the summed hours of ``job_ids``' runs, theirs alone, and drop their stored
    totals (``job_totals``, made anew by the next totals pass): what they held changed (their
    GPU map, :func:`gpuwatch.sql.jobs.replace_job_gpus`), and both were derived from it. Hours
    not summed yet are left to :func:`advance`, and hours before the minutes kept are kept as
    they are (their minutes are gone). The job-hours written."""
    if not job_ids:
        return 0
    ids = sorted(job_ids)
    conn.execute(job_totals.delete().where(job_totals.c.job_id.in_(ids)))
    until = summed_until(conn)
    if until is None:
        return 0
    until = as_utc(conn, until)
    j = slurm_jobs.c
    query = sa.select(j.start_at, j.end_at).where(j.job_id.in_(ids), j.start_at.is_not(None))
    runs = conn.execute(query).all()
    if not runs:
        return 0
    start = floor_hour(min(as_utc(conn, r.start_at) for r in runs))
    # hours before the minutes kept (retention.minute_days) cannot be summed again: kept as they are
    kept_from = progress.done_until(conn, progress.MINUTES_FROM)
    if kept_from is not None:
        start = max(start, as_utc(conn, kept_from))
    end = min(until, max(ceil_hour(as_utc(conn, r.end_at)) if r.end_at is not None else until for r in runs))
    return sum_hours(conn, start, end, ids) if start < end else 0


def _forget_totals(
    conn: sa.Connection, hour: datetime, only: tuple[sa.ColumnElement[bool], ...] = ()
) -> None:
    """The jobs of an hour summed again (those of ``only``) lose their stored totals
    (``job_totals``, made anew by the next totals pass): called before the hour's rows go and
    after the new ones are in."""
    in_hour = sa.select(job_hours.c.job_id).where(job_hours.c.hour == hour, *only)
    conn.execute(job_totals.delete().where(job_totals.c.job_id.in_(in_hour)))


def _complete(row: dict) -> dict:
    """Every column of a job-hour: counts 0 and sums NULL where one of the two scans had none."""
    return {col.name: row.get(col.name, 0 if col.name in _COUNTS else None) for col in job_hours.c}


def advance(conn: sa.Connection, minutes_done: datetime) -> int:
    """Sum the hours that are complete and settled now that minutes are rolled up to
    ``minutes_done``; the job-hours written. The first call starts at the first rolled minute."""
    target = floor_hour(minutes_done - SETTLE)
    since = summed_until(conn)
    if since is None:
        first = conn.execute(sa.select(sa.func.min(gpu_minutes.c.minute))).scalar()
        first_job = conn.execute(sa.select(sa.func.min(job_minutes.c.minute))).scalar()
        known = [as_utc(conn, t) for t in (first, first_job) if t is not None]
        since = floor_hour(min(known)) if known else target
    written = sum_hours(conn, since, target) if since < target else 0
    progress.set_done_until(conn, STATE, max(since, target))
    return written


def resum(conn: sa.Connection, start: datetime, end: datetime) -> int:
    """Re-sum the already summed hours touched by re-rolled minutes ``[start, end)``."""
    until = summed_until(conn)
    if until is None:
        return 0
    stop = min(ceil_hour(end), until)
    return sum_hours(conn, floor_hour(start), stop) if floor_hour(start) < stop else 0
