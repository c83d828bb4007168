"""Running the classifier over stored jobs and storing what it finds.

:func:`evaluate_running` classifies every running job at one time (the daemon's scheduler,
every ``classify.evaluate_interval_s``); :func:`evaluate_ended` classifies, at their end, the
jobs Slurm says ended in a span, so each finished job gets one whole-job verdict made from
all of its minutes; :func:`evaluate_jobs` classifies given jobs at one time, or each at its
end (``gpuwatch import``). Each evaluation's verdicts are stored in one transaction, one row
per (evaluation, window, cause), with the evidence as JSON and
:data:`~gpuwatch.classify.engine.RULES_VERSION`. Healthy is stored too: a ``healthy`` row
says a job *was* evaluated and found fine, which an absence cannot.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from gpuwatch.classify.engine import RULES_VERSION, classify_job
from gpuwatch.classify.features import load_scope
from gpuwatch.classify.verdict import Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS, Thresholds
from gpuwatch.slurm.model import HOLDING_STATES, TERMINAL_STATES
from gpuwatch.sql.jobs import CHUNK
from gpuwatch.sql.readings import samples_between
from gpuwatch.sql.schema import gpu_minutes, slurm_jobs, verdicts
from gpuwatch.sql.types import UtcDateTime

MINUTE = timedelta(minutes=1)


def running_jobs(
    conn: sa.Connection, now: datetime, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> list[str]:
    """Jobs to evaluate at ``now``: Slurm's running ones, plus jobs known only from attribution."""
    s = slurm_jobs.c
    known = set(
        conn.execute(
            sa.select(s.job_id).where(
                s.start_at.is_not(None),
                s.start_at <= now,
                sa.or_(s.state.in_(HOLDING_STATES), sa.and_(s.state.is_(None), s.end_at.is_(None))),
            )
        ).scalars()
    )
    since = now - timedelta(seconds=thresholds.recent_window_s)
    a = samples_between(conn, "attribution", since, now + timedelta(microseconds=1)).c
    seen = set(conn.execute(sa.select(a.job_id).distinct()).scalars())
    recorded = set(conn.execute(sa.select(s.job_id).where(s.job_id.in_(seen))).scalars()) if seen else set()
    return sorted(known | (seen - recorded))


def _row(v: Verdict, now: datetime) -> dict[str, Any]:
    return {
        "job_id": v.job_id,
        "evaluated_at": now,
        "window_kind": v.window_kind,
        "window_start": v.window_start,
        "window_end": v.window_end,
        "cause": v.cause.value,
        "confidence": v.confidence,
        "gpus": v.gpus,
        "gpu_hours": v.gpu_hours,
        "gpu_hours_wasted": v.gpu_hours_wasted,
        "mean_util_ratio": v.mean_util_ratio,
        "summary": v.summary,
        "fix": v.fix or None,
        "evidence": v.evidence,
        "rules_version": RULES_VERSION,
    }


def store_evaluations(engine: sa.Engine, results: dict[str, tuple[datetime, list[Verdict]]]) -> None:
    """Store each job's verdicts of one evaluation (``job -> (evaluated_at, verdicts)``) in one
    transaction; an evaluation stored again for the same job and time replaces the old rows.

    A few statements for the whole pass, not a few per job: on PostgreSQL each statement on
    ``verdicts`` runs the statement triggers that keep ``shown_verdicts`` (migration 0025),
    whose plans are made per statement (3 ms each; one INSERT a verdict took 8-36 ms a job)."""
    by_time: dict[datetime, list[str]] = defaultdict(list)
    for job_id, (at, _) in results.items():
        by_time[at].append(job_id)
    rows = [_row(v, at) for at, found in results.values() for v in found]
    with engine.begin() as conn:
        for at, job_ids in by_time.items():
            for start in range(0, len(job_ids), CHUNK):
                chunk = verdicts.c.job_id.in_(job_ids[start : start + CHUNK])
                conn.execute(verdicts.delete().where(verdicts.c.evaluated_at == at, chunk))
        for start in range(0, len(rows), _ROWS_PER_INSERT):
            # one multi-row INSERT (ids in the rows' order: "first stored" breaks ties)
            conn.execute(verdicts.insert().values(rows[start : start + _ROWS_PER_INSERT]))


#: verdict rows per INSERT: 15 columns each, under SQLite's 32,766 and PostgreSQL's 65,535
#: parameters a statement
_ROWS_PER_INSERT = 2000


def evaluate_running(
    engine: sa.Engine, now: datetime, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> dict[str, list[Verdict]]:
    """Classify every running job and store its verdicts (re-running for the same ``now`` replaces them)."""
    with engine.connect() as conn:
        results = {
            job_id: classify_job(conn, job_id, now, thresholds)
            for job_id in running_jobs(conn, now, thresholds)
        }
    store_evaluations(engine, {job_id: (now, found) for job_id, found in results.items()})
    return results


def evaluate_jobs(
    engine: sa.Engine,
    job_ids: Iterable[str],
    now: datetime | None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> dict[str, list[Verdict]]:
    """Classify ``job_ids`` and store their verdicts, as :func:`evaluate_running` does.

    ``now=None`` evaluates each job at its end (a job with no end: at its last rolled-up
    GPU minute + 1 minute). Re-running for the same time replaces that evaluation's rows.
    """
    results: dict[str, tuple[datetime, list[Verdict]]] = {}
    with engine.connect() as conn:
        for job_id in sorted(set(job_ids)):
            at = now if now is not None else _end_of(conn, job_id)
            if at is None:
                continue
            results[job_id] = (at, classify_job(conn, job_id, at, thresholds))
    store_evaluations(engine, results)
    return {job_id: found for job_id, (_, found) in results.items()}


def evaluate_ended(
    engine: sa.Engine, since: datetime, until: datetime, thresholds: Thresholds = DEFAULT_THRESHOLDS
) -> dict[str, list[Verdict]]:
    """Classify, at their end, the jobs Slurm says ended in ``(since, until]``.

    The daemon calls this every classification pass with ``until`` = now minus the rollup lag,
    so each finished job gets one whole-job verdict made from all of its minutes; a job that
    ended while the daemon was down is caught on the next pass that covers its end.
    """
    s = slurm_jobs.c
    with engine.connect() as conn:
        ended = conn.execute(
            sa.select(s.job_id).where(
                s.end_at > since, s.end_at <= until, s.state.in_(sorted(TERMINAL_STATES))
            )
        ).scalars()
        job_ids = list(ended)
    return evaluate_jobs(engine, job_ids, None, thresholds) if job_ids else {}


def _end_of(conn: sa.Connection, job_id: str) -> datetime | None:
    scope = load_scope(conn, job_id)
    if scope is None:
        return None
    if scope.end is not None:
        return scope.end
    g = gpu_minutes.c
    last = None
    for ref in scope.gpus:
        value = conn.execute(
            sa.select(sa.func.max(g.minute)).where(g.node_id == ref.node_id, g.gpu_index == ref.gpu_index)
        ).scalar()
        if isinstance(value, str):
            value = datetime.fromisoformat(value)
        if value is not None:
            value = UtcDateTime().process_result_value(value, conn.dialect)
            last = value if last is None else max(last, value)
    return None if last is None else last + MINUTE
