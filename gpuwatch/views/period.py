"""What each job's GPUs and cgroups did inside a period: the report's per-job sums.

Two grouped scans per period, one over ``gpu_minutes`` (the GPUs each job held, from
``job_gpus``, from the minute it started to its end) and one over ``job_minutes`` (its cgroups),
so a report over a month reads each rolled-up minute once, whatever it asks of it:

* GPU: energy (:mod:`gpuwatch.views.energy`) and the utilization sums behind a
  sample-weighted mean;
* CPU: the cores used (each node-minute's mean) and allocated, summed over node-minutes that
  had samples, so their ratio is the job's CPU efficiency;
* memory: the most its cgroup held on one node and its limit there (page cache included).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from gpuwatch.sql.rollups import minute_bucket
from gpuwatch.sql.schema import gpu_minutes, job_gpus, job_minutes, nodes, slurm_jobs
from gpuwatch.views.energy import JobEnergy, energy_from, energy_sums


@dataclass(frozen=True)
class JobInPeriod:
    job_id: str
    energy: JobEnergy | None = None
    util_sum: float = 0.0  # sum of util_gpu_ratio samples over its GPU-minutes
    util_samples: int = 0
    cpu_used_cores: float = 0.0  # sum over node-minutes of the mean cores used
    cpu_allocated_cores: float = 0.0  # sum over the same node-minutes of the cores allocated
    memory_used_max_bytes: int | None = None
    memory_limit_bytes: int | None = None


def jobs_in_period(
    engine: sa.Engine, start: datetime, end: datetime, job_ids: Sequence[str] | None = None
) -> dict[str, JobInPeriod]:
    """Every job (or ``job_ids``) with GPU- or cgroup-minutes in ``[start, end)``."""
    with engine.connect() as conn:
        gpu = {r.job_id: r for r in conn.execute(_gpu_query(conn, start, end, job_ids))}
        host = {r.job_id: r for r in conn.execute(_host_query(start, end, job_ids))}
    out = {}
    for job_id in gpu.keys() | host.keys():
        g, h = gpu.get(job_id), host.get(job_id)
        out[job_id] = JobInPeriod(
            job_id=job_id,
            energy=None if g is None else energy_from(job_id, g),
            util_sum=float(g.util_sum or 0.0) if g is not None else 0.0,
            util_samples=int(g.util_n or 0) if g is not None else 0,
            cpu_used_cores=float(h.cpu_used or 0.0) if h is not None else 0.0,
            cpu_allocated_cores=float(h.cpu_alloc or 0.0) if h is not None else 0.0,
            memory_used_max_bytes=None if h is None or h.mem_max is None else int(h.mem_max),
            memory_limit_bytes=None if h is None or h.mem_limit is None else int(h.mem_limit),
        )
    return out


def _gpu_query(
    conn: sa.Connection, start: datetime, end: datetime, job_ids: Sequence[str] | None
) -> sa.Select:
    j, jg, n, m = slurm_jobs.c, job_gpus.c, nodes.c, gpu_minutes.c
    query = (
        sa.select(
            j.job_id,
            *energy_sums(),
            sa.func.sum(m.util_gpu_ratio_sum).label("util_sum"),
            sa.func.sum(m.util_gpu_ratio_n).label("util_n"),
        )
        .select_from(
            slurm_jobs.join(job_gpus, jg.job_id == j.job_id)
            .join(nodes, n.name == jg.node)
            .join(gpu_minutes, sa.and_(m.node_id == n.id, m.gpu_index == jg.gpu_index))
        )
        .where(
            m.minute >= start,
            m.minute < end,
            j.start_at.is_not(None),
            m.minute >= minute_bucket(conn, j.start_at),
            sa.or_(j.end_at.is_(None), m.minute < j.end_at),
        )
        .group_by(j.job_id)
    )
    return query if job_ids is None else query.where(j.job_id.in_(list(job_ids)))


def _host_query(start: datetime, end: datetime, job_ids: Sequence[str] | None) -> sa.Select:
    c = job_minutes.c
    sampled = sa.and_(c.cpu_used_cores_n > 0, c.cpu_allocated_cores > 0)  # a ratio needs both
    mean_used = c.cpu_used_cores_sum / c.cpu_used_cores_n
    query = (
        sa.select(
            c.job_id,
            sa.func.sum(sa.case((sampled, mean_used), else_=None)).label("cpu_used"),
            sa.func.sum(sa.case((sampled, c.cpu_allocated_cores), else_=None)).label("cpu_alloc"),
            sa.func.max(c.memory_used_bytes_max).label("mem_max"),
            sa.func.max(c.memory_limit_bytes).label("mem_limit"),
        )
        .where(c.minute >= start, c.minute < end)
        .group_by(c.job_id)
    )
    return query if job_ids is None else query.where(c.job_id.in_(list(job_ids)))
