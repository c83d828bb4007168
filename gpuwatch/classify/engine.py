"""Classifying jobs: features per window, every cause rule, verdicts stored and read back.

:func:`classify_job` evaluates two windows — ``recent`` (the last ``recent_window_s``) and
``job`` (the whole job) — and returns their verdicts, each window's sorted best first
(confidence, then the more specific cause). A window where no rule fires gets one fallback
verdict: ``unknown_low`` when it is low, else ``healthy``. A job younger than the grace
period (or a finished job shorter than it) gets no verdict at all, nor does a window with
fewer than ``min_window_minutes`` minutes of GPU data.

**Healthy is stored** as a row with ``cause = "healthy"``: the verdicts table then shows
that a job *was* evaluated and found fine (an alert can clear, the CLI can say "ok"),
instead of an absence that also means "not evaluated". :func:`latest_verdicts` leaves
healthy rows out unless asked.

:func:`evaluate_running` runs this for every running job (``slurm_jobs`` state RUNNING, or
jobs only the agents' attribution knows about) and stores one row per (evaluation, window,
cause) with the evidence as JSON and :data:`RULES_VERSION`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from gpuwatch.classify.features import WindowFeatures, job_windows, load_scope
from gpuwatch.classify.rules import RULES, unknown_low
from gpuwatch.classify.verdict import Cause, Skipped, Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS, Thresholds
from gpuwatch.sql.schema import attribution_samples, slurm_jobs, verdicts

#: bump when a rule or threshold default changes meaning, so stored verdicts can be told apart
RULES_VERSION = "1"


@contextmanager
def _connection(conn_or_engine: sa.Engine | sa.Connection) -> Iterator[sa.Connection]:
    if isinstance(conn_or_engine, sa.Connection):
        yield conn_or_engine
    else:
        with conn_or_engine.connect() as conn:
            yield conn


def classify_window(f: WindowFeatures, thresholds: Thresholds) -> list[Verdict]:
    """Every cause seen in one window, best first; the fallback verdict when none is."""
    if not f.gpus_with_data or max(g.minutes for g in f.gpus) < thresholds.min_window_minutes:
        return []
    fired: list[Verdict] = []
    skipped: list[Skipped] = []
    for rule in RULES:
        outcome = rule(f, thresholds)
        if isinstance(outcome, Verdict):
            fired.append(outcome)
        elif isinstance(outcome, Skipped):
            skipped.append(outcome)
    if not fired:
        fired = [unknown_low.rule(f, thresholds, skipped) or unknown_low.healthy(f, thresholds, skipped)]
    for verdict in fired:
        verdict.evidence["not_checked"] = [s.as_dict() for s in skipped]
    return sorted(fired, key=lambda v: v.sort_key)


def classify_job(
    conn_or_engine: sa.Engine | sa.Connection,
    job_id: str,
    now: datetime,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> list[Verdict]:
    """Verdicts of the recent window, then of the whole-job window; [] inside the grace period."""
    with _connection(conn_or_engine) as conn:
        scope = load_scope(conn, job_id)
        if scope is None or scope.start is None or scope.start > now:
            return []
        until = now if scope.end is None else min(now, scope.end)
        if (until - scope.start).total_seconds() < thresholds.grace_period_s:
            return []
        windows = job_windows(conn, scope, now, thresholds)
        if windows is None:
            return []
        recent, whole = windows
        return classify_window(recent, thresholds) + classify_window(whole, thresholds)


def primary(found: list[Verdict], window_kind: str = "recent") -> Verdict | None:
    """The leading verdict of one window (what an alert or a one-line listing shows)."""
    return next((v for v in found if v.window_kind == window_kind), None)


# ---------------------------------------------------------------------------- storage

_RUNNING_STATES = ("RUNNING", "COMPLETING", "SUSPENDED")


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
                sa.or_(s.state.in_(_RUNNING_STATES), sa.and_(s.state.is_(None), s.end_at.is_(None))),
            )
        ).scalars()
    )
    a = attribution_samples.c
    since = now - timedelta(seconds=thresholds.recent_window_s)
    seen = set(conn.execute(sa.select(a.job_id).where(a.ts >= since, a.ts <= now).distinct()).scalars())
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
    transaction; an evaluation stored again for the same job and time replaces the old rows."""
    with engine.begin() as conn:
        for job_id, (at, found) in results.items():
            conn.execute(verdicts.delete().where(verdicts.c.evaluated_at == at, verdicts.c.job_id == job_id))
            rows = [_row(v, at) for v in found]
            if rows:
                conn.execute(verdicts.insert(), rows)


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


def latest_verdicts(
    engine: sa.Engine | sa.Connection,
    job_id: str | None = None,
    *,
    window_kind: str | None = None,
    cause: str | None = None,
    include_healthy: bool = False,
) -> list[dict[str, Any]]:
    """The rows of each job's latest evaluation (best first per job and window)."""
    v = verdicts.c
    latest = sa.select(v.job_id, sa.func.max(v.evaluated_at).label("at")).group_by(v.job_id)
    if job_id is not None:
        latest = latest.where(v.job_id == job_id)
    sub = latest.subquery()
    query = sa.select(verdicts).join(sub, sa.and_(v.job_id == sub.c.job_id, v.evaluated_at == sub.c.at))
    if window_kind is not None:
        query = query.where(v.window_kind == window_kind)
    if cause is not None:
        query = query.where(v.cause == cause)
    elif not include_healthy:
        query = query.where(v.cause != Cause.HEALTHY.value)
    query = query.order_by(v.job_id, v.window_kind.desc(), v.confidence.desc(), v.id)
    with _connection(engine) as conn:
        return [dict(r) for r in conn.execute(query).mappings()]
