"""An ended job's report figures over its whole run, stored once (``job_totals``), and their sums.

A report over a month of a large cluster would read every job-hour and verdict-hour of the
month and build each job's figures in Python. An ended job's figures stop changing once its
hours are summed, so :func:`store_job_totals` (the daemon's rollup pass) computes them once,
with the same code the report uses for any job (:func:`gpuwatch.views.job_figures.figures`),
over the job's whole run. A period that holds all of a job (its run, its summed hours and its
waste verdicts: ``data_from`` .. ``data_to``) then adds the stored row, summed per group in SQL
(:func:`covered_sums`); the report computes the other jobs as before.

A row counts only while it is current (:func:`_current`): the Slurm facts it rests on (start,
end, GPUs, CPUs, time limit, state, billing) are unchanged, and so is the job's newest
evaluation time (a newer one: verdicts came after). Storing or deleting verdicts of the job
deletes its row (triggers on ``verdicts``), so does summing one of its hours again
(``sql/job_hours.py``) and replacing its GPU map (``job_gpus``: its summed hours are summed
again from the new map, :func:`gpuwatch.sql.job_hours.resum_jobs`); the next pass makes it again.
A pass does not store the row of a job whose hours were summed again while it read them
(:func:`_hours_print`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from gpuwatch.clock import utcnow
from gpuwatch.config.thresholds import Thresholds
from gpuwatch.slurm.model import TERMINAL_STATES
from gpuwatch.sql.buckets import as_utc
from gpuwatch.sql.job_hours import HOUR, floor_hour, summed_until
from gpuwatch.sql.schema import job_hours, job_totals, newest_evaluations, slurm_jobs, verdicts
from gpuwatch.views.advice import site_cards
from gpuwatch.views.evaluations import HEALTHY
from gpuwatch.views.job import job_advice
from gpuwatch.views.job_figures import ADVISED, HELD_COLUMNS, billing, figures, held, wasted_by_job
from gpuwatch.views.period import jobs_in_period
from gpuwatch.views.usage import site_gpu_models

#: jobs whose totals one call stores at most (the rest: next call)
BATCH = 500
_TICK = timedelta(microseconds=1)


def _current(t: Any, j: Any) -> sa.ColumnElement[bool]:
    """The row ``t`` of job ``j`` rests on the Slurm facts and the evaluation the job has now;
    read from :func:`_totals_and_newest` (the job's newest evaluation joined beside its row)."""
    return sa.and_(
        t.job_id == j.job_id,
        t.start_at == j.start_at,
        t.end_at == j.end_at,
        t.gpus == j.gpus,
        t.cpus.is_not_distinct_from(j.cpus),
        t.time_limit_s.is_not_distinct_from(j.time_limit_s),
        t.state.is_not_distinct_from(j.state),
        t.billing.is_not_distinct_from(billing()),
        t.evaluated_at.is_not_distinct_from(newest_evaluations.c.evaluated_at),
    )


def _totals_and_newest() -> sa.Join:
    """``job_totals`` with each job's newest evaluation beside it (none: NULL), one join."""
    return job_totals.outerjoin(newest_evaluations, newest_evaluations.c.job_id == job_totals.c.job_id)


def covered(start: datetime, end: datetime) -> sa.ColumnElement[bool]:
    """The ``slurm_jobs`` row has current totals and ``[start, end)`` holds all of the job."""
    t = job_totals.c
    return (
        sa.exists()
        .select_from(_totals_and_newest())
        .where(_current(t, slurm_jobs.c), *_inside(t, start, end))
        .correlate(slurm_jobs)
    )


def _inside(t: Any, start: datetime, end: datetime) -> tuple[sa.ColumnElement[bool], ...]:
    """The period holds all of the job, and counts it (as the report counts a job that ran in it)."""
    j = slurm_jobs.c
    return (t.data_from >= start, t.data_to <= end, j.start_at < end, j.end_at > start)


def covered_sums(
    conn: sa.Connection,
    start: datetime,
    end: datetime,
    group_col: sa.ColumnElement,
    where: tuple[sa.ColumnElement, ...] = (),
    hours_only: bool = False,
) -> list[sa.Row]:
    """The sums of the current totals of the jobs ``[start, end)`` holds, per group (``grp``) and
    the cause their waste is credited to (``lead_cause``; None: no waste), in one pass; with
    ``hours_only`` per group only, held and wasted GPU-hours only."""
    t, j = job_totals.c, slurm_jobs.c
    joined = _totals_and_newest().join(slurm_jobs, _current(t, j))
    inside = (*_inside(t, start, end), *where)
    grp = group_col.label("grp")
    hours = [sa.func.sum(t.gpu_hours).label("gpu_hours"), sa.func.sum(t.gpu_hours_wasted).label("wasted")]
    if hours_only:
        query = sa.select(grp, *hours).select_from(joined).where(*inside).group_by(group_col)
        return list(conn.execute(query).all())
    billed, memory = t.billing_hours.is_not(None), sa.and_(t.memory_ratio.is_not(None), t.gpu_hours > 0)
    share = sa.case((t.gpu_hours > 0, t.gpu_hours_wasted / t.gpu_hours), else_=0.0)
    sums = sa.select(
        grp,
        t.lead_cause,
        sa.func.count().label("jobs"),
        sa.func.sum(sa.case((t.lead_cause.is_not(None), 1), else_=0)).label("flagged"),
        *hours,
        sa.func.sum(t.energy_joules).label("joules"),
        sa.func.sum(t.energy_estimated_joules).label("estimated_joules"),
        sa.func.sum(t.util_sum).label("util_sum"),
        sa.func.sum(t.util_samples).label("util_samples"),
        sa.func.sum(t.cpu_used_cores).label("cpu_used"),
        sa.func.sum(t.cpu_allocated_cores).label("cpu_alloc"),
        sa.func.sum(sa.case((memory, t.memory_ratio * t.gpu_hours))).label("memory_weighted"),
        sa.func.sum(sa.case((memory, t.gpu_hours))).label("memory_hours"),
        sa.func.sum(sa.case((billed, 1), else_=0)).label("billed_jobs"),
        sa.func.sum(sa.case((billed, t.billing_hours))).label("billing_hours"),
        sa.func.sum(sa.case((billed, t.billing_hours * share))).label("billing_hours_wasted"),
        sa.func.sum(sa.case((billed, 0), else_=1)).label("unbilled_jobs"),
        sa.func.sum(sa.case((billed, 0.0), else_=t.gpu_hours)).label("unbilled_gpu_hours"),
        sa.func.sum(sa.case((billed, 0.0), else_=t.gpu_hours_wasted)).label("unbilled_wasted"),
        sa.func.sum(t.advised_time).label("advised_time"),
        sa.func.sum(t.advised_memory).label("advised_memory"),
        sa.func.sum(t.advised_cpus).label("advised_cpus"),
        sa.func.sum(t.advised_gpus).label("advised_gpus"),
        sa.func.sum(t.advised_gpu_size).label("advised_gpu_size"),
        sa.func.sum(t.saving_gpu_hours).label("saving_gpu_hours"),
    )
    query = sums.select_from(joined).where(*inside).group_by(group_col, t.lead_cause)
    return list(conn.execute(query).all())


def store_job_totals(
    engine: sa.Engine,
    batch: int = BATCH,
    thresholds: Thresholds | None = None,
    now: datetime | None = None,
) -> int:
    """Store the totals of up to ``batch`` ended GPU jobs that have none current, whose hours are
    all summed (the hour after their end too: a cgroup seen just after the end); the count.
    ``thresholds``: the classifier's (the job view's advice rests on them)."""
    j, t = slurm_jobs.c, job_totals.c
    with engine.connect() as conn:
        until = summed_until(conn)
        if until is None:
            return 0
        pending = (
            sa.select(j.job_id)
            .where(
                j.gpus > 0,
                j.start_at.is_not(None),
                j.end_at.is_not(None),
                j.end_at <= until - HOUR,
                j.state.in_(sorted(TERMINAL_STATES)),
                ~sa.exists().select_from(_totals_and_newest()).where(_current(t, j)).correlate(slurm_jobs),
            )
            .order_by(j.end_at, j.job_id)
            .limit(batch)
        )
        ids = list(conn.execute(pending).scalars())
        if not ids:
            return 0
        read = _hours_print(conn, ids)
        # the newest evaluation before the verdicts: a later one makes the row not current
        newest = dict(
            conn.execute(
                sa.select(newest_evaluations.c.job_id, newest_evaluations.c.evaluated_at).where(
                    newest_evaluations.c.job_id.in_(ids)
                )
            ).all()
        )
        rows = _totals(conn, engine, ids, until, newest)
        cards = site_cards(site_gpu_models(conn))
        for row in rows:
            advice, saving = job_advice(
                conn, row["job_id"], now or utcnow(), thresholds or Thresholds(), cards
            )
            kinds = {a.kind for a in advice}
            row["advised_gpus"], row["advised_gpu_size"] = int("gpus" in kinds), int("gpu_size" in kinds)
            row["saving_gpu_hours"] = None if saving is None else saving.gpu_hours
    with engine.begin() as conn:
        conn.execute(job_totals.delete().where(t.job_id.in_(ids)))  # SQLite: the write lock, first
        if conn.dialect.name == "postgresql":  # an hour summed again now waits for this commit
            h = job_hours.c
            shared = sa.select(h.job_id).where(h.job_id.in_(ids)).order_by(h.job_id, h.hour)
            conn.execute(shared.with_for_update(read=True))
        now_print = _hours_print(conn, ids)
        rows = [row for row in rows if now_print.get(row["job_id"]) == read.get(row["job_id"])]
        if rows:
            conn.execute(job_totals.insert(), rows)
    return len(rows)


def _hours_print(conn: sa.Connection, ids: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """Job id -> what summing one of its hours again changes (its job-hours, GPU-minutes and
    samples: integers, so the same rows read twice compare equal). A job whose hours were summed
    again while its totals were computed (a node's late batch, a new GPU map) is not stored then:
    its row would rest on the old sums, and the re-sum deleted the row before this one existed."""
    h = job_hours.c
    query = (
        sa.select(
            h.job_id,
            sa.func.count(),
            sa.func.sum(h.gpu_minutes),
            sa.func.sum(h.util_gpu_ratio_n),
            sa.func.sum(h.energy_samples),
            sa.func.sum(h.energy_power_samples),
        )
        .where(h.job_id.in_(ids))
        .group_by(h.job_id)
    )
    return {job_id: tuple(int(v or 0) for v in values) for job_id, *values in conn.execute(query)}


def _totals(
    conn: sa.Connection, engine: sa.Engine, ids: Sequence[str], until: datetime, newest: dict[str, datetime]
) -> list[dict[str, Any]]:
    j = slurm_jobs.c
    span = sa.select(sa.func.min(j.start_at), sa.func.max(j.end_at)).where(j.job_id.in_(ids))
    first, last = (as_utc(conn, t) for t in conn.execute(span).one())
    # a tick either side: a job that started and ended at once is held for no time, not left out;
    # each ended inside the span, so its Held carries its Slurm facts (``ended``)
    holding = held(conn, first - _TICK, last + _TICK, where=(j.job_id.in_(ids),))
    facts = {job_id: h.ended for job_id, h in holding.items() if h.ended is not None}
    h = job_hours.c
    hour_span = {
        r.job_id: (r.lo, r.hi + HOUR)
        for r in conn.execute(
            sa.select(h.job_id, sa.func.min(h.hour).label("lo"), sa.func.max(h.hour).label("hi"))
            .where(h.job_id.in_(ids))
            .group_by(h.job_id)
        )
    }
    v = verdicts.c
    verdict_span = {
        r.job_id: (r.lo, r.hi + _TICK)
        for r in conn.execute(
            sa.select(
                v.job_id, sa.func.min(v.evaluated_at).label("lo"), sa.func.max(v.evaluated_at).label("hi")
            )
            .where(v.job_id.in_(ids), v.cause != HEALTHY, v.gpu_hours_wasted > 0)
            .group_by(v.job_id)
        )
    }
    spans = {
        job_id: (
            min([r.start_at, *(s[job_id][0] for s in (hour_span, verdict_span) if job_id in s)]),
            max([r.end_at, *(s[job_id][1] for s in (hour_span, verdict_span) if job_id in s)]),
        )
        for job_id, r in facts.items()
    }
    # whole hours, all summed: the sums come from job_hours alone
    period = jobs_in_period(engine, floor_hour(min(lo for lo, _ in spans.values())), until, job_ids=ids)
    wasted = {}
    if verdict_span:
        lo = floor_hour(min(lo for lo, _ in verdict_span.values()))
        hi = floor_hour(max(hi for _, hi in verdict_span.values())) + HOUR
        wasted = wasted_by_job(engine, lo, hi, sorted(verdict_span))
    out = []
    for job_id, r in facts.items():
        lead, hours_wasted = wasted.get(job_id, (None, 0.0))
        f = figures(holding[job_id], period.get(job_id), lead, hours_wasted)
        out.append(
            {
                **{name: r._mapping[name] for name in HELD_COLUMNS},
                "billing": r.billing,
                "evaluated_at": newest.get(job_id),
                "data_from": spans[job_id][0],
                "data_to": spans[job_id][1],
                **{key: value for key, value in f._asdict().items() if key != "advised"},
                **{f"advised_{kind}": int(kind in f.advised) for kind in ADVISED},
            }
        )
    return out
