"""What one job did: its Slurm facts, each GPU's means, a utilization timeline, charts, verdicts.

The one answer behind ``gpuwatch job ID`` and the web view's job page. The job's GPUs and
span come from the classifier's :func:`~gpuwatch.classify.features.load_scope` (Slurm's
allocation, else the agents' attribution), so the page shows exactly the GPUs the verdicts
judged. The run window is whole minutes from the job's start to its end (or ``now``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa

from gpuwatch.cards import Card
from gpuwatch.classify.features import GpuRef, JobScope, load_scope
from gpuwatch.config.thresholds import Thresholds
from gpuwatch.sql.readings import samples_between
from gpuwatch.sql.resolution import tier_for
from gpuwatch.sql.rollups import floor_minute, xid_codes
from gpuwatch.sql.schema import slurm_jobs, verdicts
from gpuwatch.views import _job_series as series
from gpuwatch.views._job_series import GPU_METRICS, Points, downsample
from gpuwatch.views.advice import Advice, Saving, estimated_saving, right_sizing, site_cards
from gpuwatch.views.energy import JOULES_PER_KWH, JobEnergy, gpus_energy
from gpuwatch.views.evaluations import Evaluation, latest_evaluations
from gpuwatch.views.faults import GpuFaults
from gpuwatch.views.jobs import JobIdentity, display_id, run_seconds
from gpuwatch.views.usage import JobUsage, job_usage, site_gpu_models

__all__ = ["GPU_METRICS", "GpuSummary", "JobCharts", "JobInfo", "JobView", "downsample", "job_view"]

#: the timeline's default width, in columns
TIMELINE_COLUMNS = 60
#: at most this much of a job is charted per minute (its last day)
MAX_CHART_SPAN = timedelta(hours=24)
#: the window of a job without a known start: the hour before its end
NO_START_SPAN = timedelta(hours=1)


@dataclass(frozen=True)
class JobInfo(JobIdentity):
    """The job as Slurm (or, without a Slurm row, the agents' attribution) knows it."""

    start_at: datetime | None
    end_at: datetime | None
    duration_s: int | None
    cpus: int | None
    #: where the GPUs come from: "job_gpus" (Slurm), "attribution" (agents) or "none"
    gpu_source: str


@dataclass(frozen=True)
class GpuSummary(GpuFaults):
    """One GPU of the job over its run: means of ratios (0..1), bytes and watts."""

    node: str
    gpu_index: int
    samples: int
    util_gpu_mean: float | None
    sm_active_mean: float | None
    tensor_active_mean: float | None
    memory_used_bytes_max: int | None
    memory_total_bytes: int | None
    power_watts_mean: float | None
    power_limit_watts: float | None
    #: the energy it used over the run (views/energy.py has how it is counted); None: not measured
    energy_kwh: float | None = None
    #: the samples it sent as lost (fallen off the bus, unreadable) and its XIDs over the run
    lost_samples: int = 0
    xid_codes: tuple[int, ...] = ()
    #: samples with a memory repair pending a GPU reset; with a failed row remap
    reset_pending_samples: int = 0
    remap_failed_samples: int = 0


@dataclass(frozen=True)
class JobCharts:
    """Per-minute series of the job's last :data:`MAX_CHART_SPAN`, for charts."""

    start: datetime
    end: datetime
    #: metric (:data:`GPU_METRICS`) -> GPU -> points; ratios 0..1
    gpu: dict[str, dict[GpuRef, Points]]
    #: the job's CPU use of its allocation, each node's busy and iowait (ratios)
    cpu: dict[str, Points]
    #: each node's NIC and InfiniBand bytes per second
    network: dict[str, Points]


@dataclass(frozen=True)
class JobView:
    job: JobInfo
    gpu_refs: tuple[GpuRef, ...]
    #: the run window: first minute, exclusive end minute
    start: datetime
    end: datetime
    gpus: tuple[GpuSummary, ...]
    #: GPU -> mean utilization per column of the run window (``columns`` wide, or per minute)
    timeline: dict[GpuRef, list[float | None]]
    column_s: float
    evaluation: Evaluation | None
    simulated: bool
    charts: JobCharts | None = field(default=None)
    #: the energy its GPUs used over the run window (views/energy.py); None where not measured
    energy: JobEnergy | None = None
    #: what it used of what it asked for (the seff-style summary, views/usage.py)
    usage: JobUsage | None = None
    #: what to request next time (views/advice.py)
    advice: tuple[Advice, ...] = ()
    #: the GPU-hours the shown verdict's fix would give back; None where no estimate holds
    saving: Saving | None = None

    @property
    def minutes(self) -> int:
        return max(1, int((self.end - self.start).total_seconds() // 60))


def resolve_job(conn: sa.Connection, text: str) -> str | None:
    """A job id as users type it (``18_1`` for an array task) -> the stored job id, or None."""
    j = slurm_jobs.c
    if conn.execute(sa.select(j.job_id).where(j.job_id == text)).first():
        return text
    if "_" in text:
        array, task = text.split("_", 1)
        found = conn.execute(
            sa.select(j.job_id).where(j.array_job_id == array, j.array_task_id == task)
        ).scalar()
        if found:
            return found
    for table in (verdicts, samples_between(conn, "attribution", job_ids=[text])):
        if conn.execute(sa.select(table.c.job_id).where(table.c.job_id == text).limit(1)).first():
            return text
    return None


def _gpu_summary(conn: sa.Connection, ref: GpuRef, start: datetime, end: datetime) -> GpuSummary:
    r = series.gpu_totals(conn, ref, start, end)
    return GpuSummary(
        node=ref.node,
        gpu_index=ref.gpu_index,
        samples=int(r["samples"] or 0),
        util_gpu_mean=series.mean(r["util_sum"], r["util_n"]),
        sm_active_mean=series.mean(r["sm_sum"], r["sm_n"]),
        tensor_active_mean=series.mean(r["tensor_sum"], r["tensor_n"]),
        memory_used_bytes_max=None if r["memory_max"] is None else int(r["memory_max"]),
        memory_total_bytes=None if r["memory_total"] is None else int(r["memory_total"]),
        power_watts_mean=series.mean(r["power_sum"], r["power_n"]),
        power_limit_watts=r["power_limit"],
        energy_kwh=None if r["energy_j"] is None else round(float(r["energy_j"]) / JOULES_PER_KWH, 4),
        lost_samples=int(r["lost"] or 0),
        xid_codes=xid_codes(r["xid_text"]),
        reset_pending_samples=int(r["reset_pending"] or 0),
        remap_failed_samples=int(r["remap_failed"] or 0),
    )


def job_view(
    engine: sa.Engine | sa.Connection,
    job_id: str,
    now: datetime,
    *,
    columns: int | None = TIMELINE_COLUMNS,
    charts: bool = False,
    thresholds: Thresholds | None = None,
) -> JobView | None:
    """Everything known about ``job_id`` (as users type it) at ``now``; None for an unknown job.

    ``columns``: the timeline is at most that many columns wide (each the mean of its slice of
    the run, computed in the database: a week-long job is ~10,000 minutes per GPU); a shorter
    job gets one column per minute, and so does every job with ``columns=None``.
    ``charts``: also the per-minute series of the job's last day (the web view's charts).
    ``thresholds``: the classifier's (idle GPUs are the ones its rules call idle); default its defaults.
    """
    t = thresholds or Thresholds()
    if isinstance(engine, sa.Connection):
        return _job_view(engine, job_id, now, columns, charts, t)
    with engine.connect() as conn:
        return _job_view(conn, job_id, now, columns, charts, t)


def _job_view(
    conn: sa.Connection, text: str, now: datetime, columns: int | None, charts: bool, thresholds: Thresholds
) -> JobView | None:
    stored = resolve_job(conn, text)
    if stored is None:
        return None
    scope, slurm, start, end = _run(conn, stored, now)
    refs = scope.gpus
    minutes = max(1, int((end - start) / series.MINUTE))
    if columns is not None and minutes > columns:
        timeline = series.util_bucketed(conn, refs, start, end, columns)
    else:
        timeline = series.util_per_minute(conn, refs, start, end)
    width = len(next(iter(timeline.values()), [])) or min(minutes, columns or minutes)
    found = latest_evaluations(conn, job_ids=[stored]).get(stored)
    job_charts, simulated = None, False
    if charts:
        chart_start = max(start, end - MAX_CHART_SPAN)
        gpu, cpu, network, simulated = series.chart_series(conn, stored, refs, chart_start, end)
        job_charts = JobCharts(chart_start, end, gpu, cpu, network)
    else:
        simulated = _any_simulated(conn, refs, start, end)
    info = JobInfo(
        job_id=display_id(stored, slurm["array_job_id"], slurm["array_task_id"]) if slurm else stored,
        raw_job_id=stored,
        name=slurm["name"] if slurm else None,
        user=slurm["user_name"] if slurm else None,
        account=slurm["account"] if slurm else None,
        partition=slurm["partition"] if slurm else None,
        state=scope.state,
        start_at=scope.start,
        end_at=scope.end,
        duration_s=run_seconds(scope.start, scope.end, scope.state, now),
        cpus=scope.cpus,
        gpu_source=scope.gpu_source,
    )
    cards = site_cards(site_gpu_models(conn))
    usage, advice, saving = _advise(conn, scope, slurm, found, info.duration_s, start, end, thresholds, cards)
    return JobView(
        job=info,
        gpu_refs=refs,
        start=start,
        end=end,
        gpus=tuple(_gpu_summary(conn, ref, start, end) for ref in refs),
        timeline=timeline,
        column_s=round(minutes * 60 / width, 3),
        evaluation=found,
        simulated=simulated,
        charts=job_charts,
        energy=gpus_energy(conn, sorted({(r.node_id, r.gpu_index) for r in refs}), stored, start, end),
        usage=usage,
        advice=advice,
        saving=saving,
    )


def _run(
    conn: sa.Connection, stored: str, now: datetime
) -> tuple[JobScope, sa.RowMapping | None, datetime, datetime]:
    """A stored job's scope, its Slurm row and its run window in whole minutes up to ``now``."""
    # a job known only from its verdicts (its Slurm row and attribution gone) still shows them
    scope = load_scope(conn, stored) or JobScope(stored, None, None, None, None, None, (), "none")
    slurm = conn.execute(sa.select(slurm_jobs).where(slurm_jobs.c.job_id == stored)).mappings().first()
    stop = now if scope.end is None else min(scope.end, now)
    end = floor_minute(stop) + series.MINUTE
    start = floor_minute(scope.start) if scope.start is not None else end - NO_START_SPAN
    return scope, slurm, start, end


def _advise(
    conn: sa.Connection,
    scope: JobScope,
    slurm: sa.RowMapping | None,
    found: Evaluation | None,
    duration_s: int | None,
    start: datetime,
    end: datetime,
    thresholds: Thresholds,
    cards: tuple[Card, ...],
) -> tuple[JobUsage, tuple[Advice, ...], Saving | None]:
    """What the job used, what to request next time, and what its verdict's fix would return."""
    usage = job_usage(conn, scope, slurm, duration_s, start, end, thresholds)
    shown = found.shown if found is not None else None
    cause = shown.cause if shown is not None else None
    advice = right_sizing(usage, cause, scope.state, cards)
    saving = None
    if shown is not None:
        saving = estimated_saving(
            usage, cause, shown.window_kind, shown.gpu_hours or 0.0, shown.gpu_hours_wasted or 0.0, advice
        )
    return usage, advice, saving


def job_advice(
    conn: sa.Connection, stored: str, now: datetime, thresholds: Thresholds, cards: tuple[Card, ...]
) -> tuple[tuple[Advice, ...], Saving | None]:
    """The advice and the estimated saving :func:`job_view` shows for the stored job id, without
    the rest of the view (a report's totals pass asks this of every job that ended);
    ``cards``: :func:`gpuwatch.views.advice.site_cards` of the cluster."""
    scope, slurm, start, end = _run(conn, stored, now)
    found = latest_evaluations(conn, job_ids=[stored]).get(stored)
    duration = run_seconds(scope.start, scope.end, scope.state, now)
    _, advice, saving = _advise(conn, scope, slurm, found, duration, start, end, thresholds, cards)
    return advice, saving


def _any_simulated(conn: sa.Connection, refs: tuple[GpuRef, ...], start: datetime, end: datetime) -> bool:
    tier = tier_for(conn, start, end)
    g = tier.gpu.c
    pairs = sorted({(ref.node_id, ref.gpu_index) for ref in refs})
    if not pairs:
        return False
    query = sa.select(g.node_id).where(
        sa.tuple_(g.node_id, g.gpu_index).in_(pairs),
        *tier.within(tier.gpu, start, end),
        g.simulated.is_(True),
    )
    return conn.execute(query.limit(1)).first() is not None
