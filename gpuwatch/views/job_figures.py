"""One job's part of a period, as ``gpuwatch report`` counts it: the figures a group sums.

A job counts for the part of its run inside the period: GPU-hours held are its GPUs times
that overlap (``slurm_jobs``: start, end or now, GPUs), a MIG instance counted as its share of
the card (Slurm counts it as one GPU). GPU-hours wasted are its largest cause among the
verdicts evaluated in the period (:func:`gpuwatch.views.waste.wasted_gpu_hours`; two causes of
one job describe the same GPU-hours), capped at what it held. Energy, utilization, CPU and
memory come from :mod:`gpuwatch.views.period`; the advice from
:func:`gpuwatch.views.advice.right_sizing`. The report computes these per job for the jobs a
period cuts; an ended job inside the period has them stored (:mod:`gpuwatch.views.job_totals`).
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

import sqlalchemy as sa

from gpuwatch.classify.verdict import PRIORITY, Cause
from gpuwatch.sql.schema import gpus, job_gpus, nodes, slurm_jobs
from gpuwatch.views.advice import Advice, right_sizing
from gpuwatch.views.period import JobInPeriod
from gpuwatch.views.usage import JobUsage
from gpuwatch.views.waste import wasted_gpu_hours

#: the advice kinds a report counts per group
ADVISED = ("time", "memory", "cpus")


class Held(NamedTuple):
    """One job's part of the period: its group, GPU-hours and billing-hours inside it."""

    group: str | None
    gpu_hours: float
    billing_hours: float | None
    #: set for a job that ended inside the period: what its advice rests on (elapsed, limit, ...)
    ended: sa.Row | None = None


class JobFigures(NamedTuple):
    """What one job adds to its group's row."""

    gpu_hours: float
    billing_hours: float | None
    lead_cause: str | None  # the cause its waste is credited to; None: no waste
    gpu_hours_wasted: float  # capped at gpu_hours
    energy_joules: float | None
    energy_estimated_joules: float | None
    util_sum: float
    util_samples: int
    cpu_used_cores: float
    cpu_allocated_cores: float
    memory_ratio: float | None  # host memory peak / limit, at most 1
    advised: frozenset[str]  # of ADVISED


def figures(h: Held, job: JobInPeriod | None, lead: str | None, wasted: float) -> JobFigures:
    """A job's figures from what it held, its sums in the period and its largest cause there."""
    wasted = min(wasted, h.gpu_hours)
    energy = None if job is None else job.energy
    memory = None
    if job is not None and job.memory_used_max_bytes is not None and job.memory_limit_bytes:
        memory = min(1.0, job.memory_used_max_bytes / job.memory_limit_bytes)
    return JobFigures(
        gpu_hours=h.gpu_hours,
        billing_hours=h.billing_hours,
        lead_cause=lead if lead is not None and wasted > 0 else None,
        gpu_hours_wasted=wasted if lead is not None and wasted > 0 else 0.0,
        energy_joules=None if energy is None else energy.joules,
        energy_estimated_joules=None if energy is None else energy.joules * energy.estimated_share,
        util_sum=0.0 if job is None else job.util_sum,
        util_samples=0 if job is None else job.util_samples,
        cpu_used_cores=0.0 if job is None else job.cpu_used_cores,
        cpu_allocated_cores=0.0 if job is None else job.cpu_allocated_cores,
        memory_ratio=memory,
        advised=frozenset(a.kind for a in next_time(h, job, lead) if a.kind in ADVISED),
    )


def next_time(h: Held, job: JobInPeriod | None, cause: str | None) -> tuple[Advice, ...]:
    """The advice :func:`gpuwatch.views.advice.right_sizing` gives a job that ended in the period,
    from what the report has of it: elapsed and limit, its CPU and memory use. GPU counts and
    sizes need each GPU's figures and are advised per job only (``gpuwatch job ID``)."""
    r = h.ended
    if r is None or job is None or not r.gpus:
        return ()
    ratio = job.cpu_used_cores / job.cpu_allocated_cores if job.cpu_allocated_cores else None
    cores = float(r.cpus) if r.cpus else None
    usage = JobUsage(
        elapsed_s=int((r.end_at - r.start_at).total_seconds()),
        time_limit_s=r.time_limit_s,
        gpus=r.gpus,
        gpu_hours_allocated=None,
        gpu_efficiency=job.util_sum / job.util_samples if job.util_samples else None,
        sm_active=None,
        idle_gpus=(),
        gpu_memory_used_max_bytes=None,
        gpu_memory_total_bytes=None,
        gpu_model=None,
        cpu_cores_allocated=cores,
        cpu_cores_used=None if ratio is None or cores is None else ratio * cores,
        memory_requested_bytes=job.memory_limit_bytes,
        memory_used_max_bytes=job.memory_used_max_bytes,
        measured_minutes=job.gpu_minutes // r.gpus,
    )
    return right_sizing(usage, cause, r.state)


def wasted_by_job(
    engine: sa.Engine, start: datetime, end: datetime, job_ids: list[str] | None = None
) -> dict[str, tuple[str, float]]:
    """job id -> (the cause its waste is credited to, GPU-hours): its largest cause; two causes
    of one job (idle and CPU-only, say) describe the same GPU-hours, as in the digests. Only
    ``job_ids`` when given."""
    if job_ids == []:
        return {}
    causes = wasted_gpu_hours(engine, start, end, job_ids)
    out = {}
    for job_id, by_cause in causes.items():
        lead = max(by_cause, key=lambda cause: (by_cause[cause], -_specific(cause)))
        out[job_id] = (lead, by_cause[lead])
    return out


def _specific(cause: str) -> int:
    """Rank of a cause in the classifier's tie-break (lower: more specific, as the listing orders
    equal verdicts): a CPU-only job that is also idle is credited to cpu_only."""
    try:
        return PRIORITY[Cause(cause)]
    except ValueError:
        return len(PRIORITY)


#: the Slurm facts a job's figures rest on
HELD_COLUMNS = ("job_id", "gpus", "start_at", "end_at", "state", "time_limit_s", "cpus")


def billing() -> sa.ColumnElement:
    """A job's TRES ``billing`` weight per hour, as Slurm gave it (None: not given)."""
    return slurm_jobs.c.tres["billing"].as_float()


def held(
    conn: sa.Connection,
    start: datetime,
    end: datetime,
    group_col: sa.ColumnElement | None = None,
    where: tuple[sa.ColumnElement, ...] = (),
) -> dict[str, Held]:
    """job id -> its group (``group_col``), the GPU-hours and billing-hours it held inside
    ``[start, end)``, for the GPU jobs of the period that match ``where``."""
    j = slurm_jobs.c
    query = sa.select(
        *(j[name] for name in HELD_COLUMNS),
        (group_col if group_col is not None else sa.null()).label("grp"),
        billing().label("billing"),
    ).where(
        j.gpus > 0,
        j.start_at.is_not(None),
        j.start_at < end,
        sa.or_(j.end_at.is_(None), j.end_at > start),
        *where,
    )
    out: dict[str, Held] = {}
    rows = conn.execute(query).all()
    shares = card_shares(conn, start, end)
    for r in rows:
        held_from = max(r.start_at, start)
        held_to = min(r.end_at or end, end)
        hours = max(0.0, (held_to - held_from).total_seconds()) / 3600
        out[r.job_id] = Held(
            r.grp,
            r.gpus * shares.get(r.job_id, 1.0) * hours,
            None if r.billing is None else float(r.billing) * hours,
            r if r.end_at is not None and r.end_at <= end else None,
        )
    return out


def card_shares(conn: sa.Connection, start: datetime, end: datetime) -> dict[str, float]:
    """job id -> the mean share of a card of the GPUs it held, for the jobs of ``[start, end)``
    that held a MIG instance (a 1g slice of seven counts 1/7, a whole GPU 1): Slurm counts each
    instance as one GPU."""
    jg, g, n, j = job_gpus.c, gpus.c, nodes.c, slurm_jobs.c
    gpu = sa.and_(g.node_id == n.id, g.gpu_index == jg.gpu_index)
    held_instance = (
        sa.select(jg.job_id)
        .select_from(job_gpus.join(nodes, n.name == jg.node).join(gpus, gpu))
        .where(g.card_fraction_ratio.is_not(None))
    )
    in_period = sa.and_(j.job_id == jg.job_id, j.start_at < end, sa.or_(j.end_at.is_(None), j.end_at > start))
    share = sa.func.sum(sa.func.coalesce(g.card_fraction_ratio, 1.0)) / sa.func.count()
    query = (
        sa.select(jg.job_id, share)
        .select_from(
            job_gpus.join(slurm_jobs, in_period).outerjoin(nodes, n.name == jg.node).outerjoin(gpus, gpu)
        )
        .where(jg.job_id.in_(held_instance))
        .group_by(jg.job_id)
    )
    return {job_id: float(value) for job_id, value in conn.execute(query)}
