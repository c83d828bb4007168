"""What each job's GPUs and cgroups did inside a period: the report's per-job sums.

Whole hours come from ``job_hours`` (a row per job-hour, summed by the rollup pass:
``sql/job_hours.py``); the rest of the period — a start or end inside an hour, the hours not
summed yet — from the minute tables (an edge older than the minutes kept: its whole hour from
``job_hours``), with the same sums (:func:`gpuwatch.sql.job_hours.gpu_sums_of_jobs`,
:func:`~gpuwatch.sql.job_hours.host_sums`). So a month reads a row per job-hour, not per
GPU-minute, and the figures are the same either way:

* GPU: energy (:mod:`gpuwatch.views.energy`) and the utilization sums behind a
  sample-weighted mean, over the GPUs each job held (``job_gpus``) from the minute it started
  to its end;
* CPU: the cores used (each node-minute's mean) and allocated, over node-minutes that had both,
  so their ratio is the job's CPU efficiency;
* memory: the most its cgroup held on one node and its limit there (page cache included).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpuwatch.sql.buckets import ceil_hour, floor_hour
from gpuwatch.sql.job_hours import gpu_sums_of_jobs, host_sums, summed_until
from gpuwatch.sql.jobs import IDS_PER_READ, among
from gpuwatch.sql.resolution import minutes_from
from gpuwatch.sql.schema import job_hours, job_minutes, slurm_jobs
from gpuwatch.views.energy import JobEnergy, energy_of


@dataclass(frozen=True)
class JobInPeriod:
    job_id: str
    energy: JobEnergy | None = None
    gpu_minutes: int = 0  # GPU-minutes with a rolled-up row
    util_sum: float = 0.0  # sum of util_gpu_ratio samples over its GPU-minutes
    util_samples: int = 0
    cpu_used_cores: float = 0.0  # sum over node-minutes of the mean cores used
    cpu_allocated_cores: float = 0.0  # sum over the same node-minutes of the cores allocated
    memory_used_max_bytes: int | None = None
    memory_limit_bytes: int | None = None


_SUMMED = (
    "gpu_minutes", "util_gpu_ratio_sum", "util_gpu_ratio_n", "energy_joules", "energy_power_samples",
    "energy_samples", "cpu_used_cores", "cpu_allocated_cores",
)  # fmt: skip
_PEAKS = ("memory_used_bytes_max", "memory_limit_bytes")


def jobs_in_period(
    engine: sa.Engine, start: datetime, end: datetime, job_ids: Sequence[str] | None = None
) -> dict[str, JobInPeriod]:
    """Every job (or ``job_ids``) with GPU- or cgroup-minutes in ``[start, end)``. Many
    ``job_ids`` are read :data:`~gpuwatch.sql.jobs.IDS_PER_READ` at a time (a user's month can hold more
    jobs than one statement may bind: 32,766 on SQLite)."""
    totals: dict[str, dict[str, Any]] = {}
    with engine.connect() as conn:
        until = summed_until(conn)
        # an edge hour older than the minutes kept (sql/resolution.py) is read whole from job_hours
        kept_from = minutes_from(conn)
        first = floor_hour(start) if kept_from is not None and start < kept_from else ceil_hour(start)
        last_hour = ceil_hour(end) if kept_from is not None and end <= kept_from else floor_hour(end)
        last = min(last_hour, until) if until is not None else None
        ids = sorted(set(job_ids)) if job_ids is not None else None
        step = IDS_PER_READ
        for chunk in [None] if ids is None else [ids[i : i + step] for i in range(0, len(ids), step)]:
            if last is None or last <= first:
                _add(totals, _minute_rows(conn, start, end, chunk))
            else:
                _add(totals, _minute_rows(conn, start, first, chunk))
                _add(totals, _hour_rows(conn, first, last, chunk))
                _add(totals, _minute_rows(conn, last, end, chunk))
    return {job_id: _job(job_id, t) for job_id, t in totals.items()}


def _add(totals: dict[str, dict[str, Any]], rows: Iterable[sa.RowMapping]) -> None:
    for r in rows:
        t = totals.get(r["job_id"])
        if t is None:  # most jobs come from one scan: their row is their sums
            totals[r["job_id"]] = {key: value for key, value in r.items() if value is not None}
            continue
        for key in _SUMMED:
            if r.get(key) is not None:
                t[key] = t.get(key, 0) + r[key]
        for key in _PEAKS:
            if r.get(key) is not None:
                t[key] = max(t.get(key, 0), r[key])


def _job(job_id: str, t: dict[str, Any]) -> JobInPeriod:
    sums = {"energy_joules": None, "energy_power_samples": 0, "energy_samples": 0}
    energy = energy_of(job_id, {key: t.get(key, default) for key, default in sums.items()})
    mem, limit = t.get("memory_used_bytes_max"), t.get("memory_limit_bytes")
    return JobInPeriod(
        job_id=job_id,
        energy=energy,
        gpu_minutes=int(t.get("gpu_minutes", 0)),
        util_sum=float(t.get("util_gpu_ratio_sum", 0.0)),
        util_samples=int(t.get("util_gpu_ratio_n", 0)),
        cpu_used_cores=float(t.get("cpu_used_cores", 0.0)),
        cpu_allocated_cores=float(t.get("cpu_allocated_cores", 0.0)),
        memory_used_max_bytes=None if mem is None else int(mem),
        memory_limit_bytes=None if limit is None else int(limit),
    )


def _minute_rows(
    conn: sa.Connection, start: datetime, end: datetime, job_ids: Sequence[str] | None
) -> list[sa.RowMapping]:
    if end <= start:
        return []
    c = job_minutes.c
    host = sa.select(c.job_id, *host_sums()).where(c.minute >= start, c.minute < end)
    of_jobs: tuple[sa.ColumnElement[bool], ...] = ()
    if job_ids is not None:
        of_jobs = (among(conn, slurm_jobs.c.job_id, job_ids),)
        host = host.where(among(conn, c.job_id, job_ids))
    return [*gpu_sums_of_jobs(conn, start, end, of_jobs), *conn.execute(host.group_by(c.job_id)).mappings()]


def _hour_rows(
    conn: sa.Connection, start: datetime, end: datetime, job_ids: Sequence[str] | None
) -> list[sa.RowMapping]:
    h = job_hours.c
    query = sa.select(
        h.job_id,
        *(sa.func.sum(h[key]).label(key) for key in _SUMMED),
        *(sa.func.max(h[key]).label(key) for key in _PEAKS),
    ).where(h.hour >= start, h.hour < end)
    if job_ids is not None:
        query = query.where(among(conn, h.job_id, job_ids))
    return list(conn.execute(query.group_by(h.job_id)).mappings())
