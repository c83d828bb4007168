"""Who wastes GPU-hours, by user, account or partition, over a period: ``gpuwatch report``.

A job counts in a period for the part of its run inside it: GPU-hours allocated are its GPUs
times that overlap (``slurm_jobs``: start, end or now, GPUs), a MIG instance counted as its share
of the card (Slurm counts it as one GPU). GPU-hours wasted are what
:func:`gpuwatch.views.waste_in_period` counts from the verdicts evaluated in the period (the
same figures the digests send): a job's largest cause (two causes of one job describe the same
GPU-hours), capped at what it held in the period, and credited to that cause. The top cause
of a group is the one with the most wasted GPU-hours. Energy is the GPUs' own, from the driver's
energy counter while the jobs held them (:mod:`gpuwatch.views.energy`); CO2 is that energy
times ``report.grid_co2_kg_per_kwh`` when the site sets it. GPU, CPU and memory efficiency
come from the same scans of the rollups (:mod:`gpuwatch.views.period`); cost from the site's
prices (:class:`Prices`); the trend is the wasted share of the period's last week against the
week before.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import NamedTuple

import sqlalchemy as sa

from gpuwatch.classify.verdict import PRIORITY, Cause
from gpuwatch.sql.schema import gpus, job_gpus, nodes, slurm_jobs
from gpuwatch.views.advice import Advice, right_sizing
from gpuwatch.views.energy import JOULES_PER_KWH
from gpuwatch.views.period import JobInPeriod, jobs_in_period
from gpuwatch.views.usage import JobUsage
from gpuwatch.views.waste import wasted_gpu_hours


class GroupBy(str, Enum):
    USER = "user"
    ACCOUNT = "account"
    PARTITION = "partition"


_COLUMN = {GroupBy.USER: "user_name", GroupBy.ACCOUNT: "account", GroupBy.PARTITION: "partition"}
#: the group of a job whose user, account or partition Slurm did not give
UNKNOWN = "(unknown)"
WEEK = timedelta(days=7)


@dataclass(frozen=True)
class Prices:
    """What GPU time costs (``[report]`` in the config); neither set: no cost figures."""

    gpu_hour: float | None = None
    #: per hour of one unit of Slurm's TRES ``billing``; used for jobs whose billing Slurm gave
    billing_hour: float | None = None


@dataclass(frozen=True)
class ReportRow:
    """One user, account or partition over the period."""

    group: str
    jobs: int
    jobs_flagged: int  # jobs with any wasted GPU-hours
    gpu_hours: float  # allocated inside the period
    gpu_hours_wasted: float
    wasted_share: float | None  # wasted / allocated
    top_cause: str | None
    top_cause_gpu_hours: float
    #: the GPUs' energy while the group's jobs held them, inside the period (views/energy.py)
    energy_kwh: float
    #: share of that energy's samples estimated from power x interval (no counter reading)
    energy_estimated_share: float | None
    #: energy x the configured grid intensity; None when none is configured
    co2_kg: float | None
    #: mean NVML utilization of the jobs' GPUs over their samples inside the period
    gpu_efficiency: float | None = None
    #: cores used / cores allocated over the jobs' cgroup minutes inside the period
    cpu_efficiency: float | None = None
    #: each job's host memory peak / limit (one node, page cache included), GPU-hour weighted
    memory_efficiency: float | None = None
    #: what the GPU-hours cost, and the wasted ones; None when no price is configured
    cost: float | None = None
    cost_wasted: float | None = None
    #: wasted / allocated in the period's last 7 days, and in the 7 days before (the trend)
    wasted_share_last_week: float | None = None
    wasted_share_week_before: float | None = None
    #: jobs that ended in the period whose next request should change (views/advice.py, as
    #: ``gpuwatch job ID`` advises each): a shorter time limit, less memory, more or fewer cores
    jobs_advised_time: int = 0
    jobs_advised_memory: int = 0
    jobs_advised_cpus: int = 0


@dataclass
class _Group:
    """A group's running sums while the report is built."""

    jobs: int = 0
    flagged: int = 0
    hours: float = 0.0
    wasted: float = 0.0
    causes: dict[str, float] = field(default_factory=dict)
    joules: float = 0.0
    estimated_joules: float = 0.0
    util_sum: float = 0.0
    util_samples: int = 0
    cpu_used: float = 0.0
    cpu_alloc: float = 0.0
    memory_weighted: float = 0.0
    memory_hours: float = 0.0
    cost: float | None = None
    cost_wasted: float | None = None
    advised: dict[str, int] = field(default_factory=dict)


class _Held(NamedTuple):
    """One job's part of the period: its group, GPU-hours and billing-hours inside it."""

    group: str
    gpu_hours: float
    billing_hours: float | None
    #: set for a job that ended inside the period: what its advice rests on (elapsed, limit, ...)
    ended: sa.Row | None = None


def usage_report(
    engine: sa.Engine,
    by: GroupBy,
    start: datetime,
    end: datetime,
    co2_kg_per_kwh: float | None = None,
    prices: Prices | None = None,
    group: str | None = None,
) -> list[ReportRow]:
    """Every group with a GPU job running inside ``[start, end)``, most wasted GPU-hours first;
    only ``group``'s row when given, read from that group's jobs alone (a user's page)."""
    prices = prices or Prices()
    held = _allocated(engine, by, start, end, group)
    jobs = None if group is None else sorted(held)
    period = jobs_in_period(engine, start, end, job_ids=jobs) if jobs != [] else {}
    wasted = _wasted_by_job(engine, start, end, jobs)
    groups: dict[str, _Group] = {}
    for job_id, h in held.items():
        g = groups.setdefault(h.group, _Group())
        g.jobs += 1
        g.hours += h.gpu_hours
        _add_measured(g, period.get(job_id), h.gpu_hours)
        lead, hours_wasted = wasted.get(job_id, (None, 0.0))
        hours_wasted = min(hours_wasted, h.gpu_hours)
        _add_cost(g, h, hours_wasted, prices)
        for advice in _next_time(h, period.get(job_id), lead):
            g.advised[advice.kind] = g.advised.get(advice.kind, 0) + 1
        if lead is None or hours_wasted <= 0:
            continue
        g.flagged += 1
        g.causes[lead] = g.causes.get(lead, 0.0) + hours_wasted
        g.wasted += hours_wasted
    # the default period is the last week: its sums are the trend's last week already
    known = {(start, end): (held, wasted)}
    last_week, week_before = _weekly_shares(engine, by, end, known, group)
    out = [
        _row(group, g, co2_kg_per_kwh, last_week.get(group), week_before.get(group))
        for group, g in groups.items()
    ]
    return sorted(out, key=lambda row: (-row.gpu_hours_wasted, -row.gpu_hours, row.group))


def _add_measured(g: _Group, job: JobInPeriod | None, gpu_hours: float) -> None:
    """A job's measured sums: energy, GPU utilization, CPU, memory."""
    if job is None:
        return
    if job.energy is not None:
        g.joules += job.energy.joules
        g.estimated_joules += job.energy.joules * job.energy.estimated_share
    g.util_sum += job.util_sum
    g.util_samples += job.util_samples
    g.cpu_used += job.cpu_used_cores
    g.cpu_alloc += job.cpu_allocated_cores
    if job.memory_used_max_bytes is not None and job.memory_limit_bytes and gpu_hours > 0:
        g.memory_weighted += min(1.0, job.memory_used_max_bytes / job.memory_limit_bytes) * gpu_hours
        g.memory_hours += gpu_hours


def _next_time(h: _Held, job: JobInPeriod | None, cause: str | None) -> tuple[Advice, ...]:
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


def _add_cost(g: _Group, h: _Held, hours_wasted: float, prices: Prices) -> None:
    """Billing-hours x their price where Slurm gave the billing, else GPU-hours x theirs."""
    if prices.billing_hour is not None and h.billing_hours is not None:
        cost = h.billing_hours * prices.billing_hour
    elif prices.gpu_hour is not None:
        cost = h.gpu_hours * prices.gpu_hour
    else:
        return
    share = hours_wasted / h.gpu_hours if h.gpu_hours > 0 else 0.0
    g.cost = (g.cost or 0.0) + cost
    g.cost_wasted = (g.cost_wasted or 0.0) + cost * share


def _row(
    group: str, g: _Group, co2_kg_per_kwh: float | None, last_week: float | None, week_before: float | None
) -> ReportRow:
    top = max(g.causes.items(), key=lambda item: (item[1], item[0]), default=(None, 0.0))
    kwh = g.joules / JOULES_PER_KWH
    return ReportRow(
        group=group,
        jobs=g.jobs,
        jobs_flagged=g.flagged,
        gpu_hours=round(g.hours, 4),
        gpu_hours_wasted=round(g.wasted, 4),
        wasted_share=_share(g.wasted, g.hours),
        top_cause=top[0],
        top_cause_gpu_hours=round(top[1], 4),
        energy_kwh=round(kwh, 4),
        energy_estimated_share=_share(g.estimated_joules, g.joules),
        co2_kg=None if co2_kg_per_kwh is None else round(kwh * co2_kg_per_kwh, 4),
        gpu_efficiency=_share(g.util_sum, g.util_samples),
        cpu_efficiency=_share(g.cpu_used, g.cpu_alloc),
        memory_efficiency=_share(g.memory_weighted, g.memory_hours),
        cost=None if g.cost is None else round(g.cost, 2),
        cost_wasted=None if g.cost_wasted is None else round(g.cost_wasted, 2),
        wasted_share_last_week=last_week,
        wasted_share_week_before=week_before,
        jobs_advised_time=g.advised.get("time", 0),
        jobs_advised_memory=g.advised.get("memory", 0),
        jobs_advised_cpus=g.advised.get("cpus", 0),
    )


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole > 0 else None


def _wasted_by_job(
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


def _weekly_shares(
    engine: sa.Engine,
    by: GroupBy,
    end: datetime,
    known: dict[tuple[datetime, datetime], tuple[dict[str, _Held], dict[str, tuple[str, float]]]],
    group: str | None = None,
) -> tuple[dict[str, float], dict[str, float]]:
    """Each group's (or ``group``'s) wasted share in the 7 days before ``end`` and in the 7 days
    before those; ``known``: periods whose held and wasted GPU-hours are read already."""
    weeks = []
    for k in (1, 2):
        w_start, w_end = end - k * WEEK, end - (k - 1) * WEEK
        if (w_start, w_end) in known:
            held, wasted = known[(w_start, w_end)]
        else:
            held = _allocated(engine, by, w_start, w_end, group)
            wasted = _wasted_by_job(engine, w_start, w_end, None if group is None else sorted(held))
        hours: dict[str, float] = defaultdict(float)
        lost: dict[str, float] = defaultdict(float)
        for job_id, h in held.items():
            hours[h.group] += h.gpu_hours
            lost[h.group] += min(wasted.get(job_id, (None, 0.0))[1], h.gpu_hours)
        weeks.append(
            {group: share for group in hours if (share := _share(lost[group], hours[group])) is not None}
        )
    return weeks[0], weeks[1]


def _specific(cause: str) -> int:
    """Rank of a cause in the classifier's tie-break (lower: more specific, as the listing orders
    equal verdicts): a CPU-only job that is also idle is credited to cpu_only."""
    try:
        return PRIORITY[Cause(cause)]
    except ValueError:
        return len(PRIORITY)


def _allocated(
    engine: sa.Engine, by: GroupBy, start: datetime, end: datetime, group: str | None = None
) -> dict[str, _Held]:
    """job id -> its group, the GPU-hours and billing-hours it held inside the period; only the
    jobs of ``group`` when given."""
    j = slurm_jobs.c
    group_col = j[_COLUMN[by]]
    query = sa.select(
        j.job_id,
        group_col.label("grp"),
        j.gpus,
        j.start_at,
        j.end_at,
        j.tres["billing"].as_float().label("billing"),
        j.state,
        j.time_limit_s,
        j.cpus,
    ).where(
        j.gpus > 0, j.start_at.is_not(None), j.start_at < end, sa.or_(j.end_at.is_(None), j.end_at > start)
    )
    if group is not None:
        query = query.where(group_col.is_(None) if group == UNKNOWN else group_col == group)
    out: dict[str, _Held] = {}
    with engine.connect() as conn:
        rows = conn.execute(query).all()
        shares = _card_shares(conn, start, end)
        for r in rows:
            held_from = max(r.start_at, start)
            held_to = min(r.end_at or end, end)
            hours = max(0.0, (held_to - held_from).total_seconds()) / 3600
            billing = r.billing
            out[r.job_id] = _Held(
                r.grp or UNKNOWN,
                r.gpus * shares.get(r.job_id, 1.0) * hours,
                None if billing is None else float(billing) * hours,
                r if r.end_at is not None and r.end_at <= end else None,
            )
    return out


def _card_shares(conn: sa.Connection, start: datetime, end: datetime) -> dict[str, float]:
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


@dataclass(frozen=True)
class WeekRow:
    """One week of one user, account or partition: what its jobs held and wasted."""

    start: datetime
    end: datetime
    gpu_hours: float
    gpu_hours_wasted: float
    wasted_share: float | None


def weekly_history(
    engine: sa.Engine, by: GroupBy, group: str, end: datetime, weeks: int = 8
) -> list[WeekRow]:
    """The ``weeks`` weeks before ``end``, oldest first, counted as :func:`usage_report` counts
    (a job's largest cause, capped at what it held in the week): the trend the group pages chart."""
    out = []
    for k in range(weeks, 0, -1):
        w_start, w_end = end - k * WEEK, end - (k - 1) * WEEK
        held = _allocated(engine, by, w_start, w_end, group)
        wasted = _wasted_by_job(engine, w_start, w_end, sorted(held))
        hours = lost = 0.0
        for job_id, h in held.items():
            hours += h.gpu_hours
            lost += min(wasted.get(job_id, (None, 0.0))[1], h.gpu_hours)
        out.append(WeekRow(w_start, w_end, round(hours, 4), round(lost, 4), _share(lost, hours)))
    return out
