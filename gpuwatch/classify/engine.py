"""Classifying one job: features per window, every cause rule, verdicts best first.

:func:`classify_job` evaluates up to three windows — ``recent`` (the last
``recent_window_s``), ``job`` (the whole job) and ``segment`` (the job's latest phase, from the
latest change in a GPU's utilization: :mod:`gpuwatch.classify.segments`) — and returns their
verdicts, each window's sorted best first (:attr:`Verdict.sort_key`: confidence, then GPU-hours
wasted, then the more specific cause; a verdict that a more specific one explains is capped at
that one's confidence). A window where no rule fires gets one fallback verdict:
``unknown_low`` when it is low, else ``healthy``. A job younger than the grace period (or a
finished job shorter than it) gets no verdict at all, nor does a window with
fewer than ``min_window_minutes`` minutes of GPU data.

Nothing here writes: :mod:`gpuwatch.classify.runner` decides which jobs to evaluate when
and stores the verdicts; :mod:`gpuwatch.views` reads them back.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime

import sqlalchemy as sa

from gpuwatch.classify.features import WindowFeatures, job_windows, load_scope
from gpuwatch.classify.rules import RULES, unknown_low
from gpuwatch.classify.segments import segment_window
from gpuwatch.classify.verdict import REFINES, Skipped, Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS, Thresholds

#: bump when a rule or threshold default changes meaning, so stored verdicts can be told apart
RULES_VERSION = "6"


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
    return sorted(_refined(fired), key=lambda v: v.sort_key)


def _refined(fired: list[Verdict]) -> list[Verdict]:
    """Each verdict a more specific one explains (:data:`REFINES`) capped at that one's confidence."""
    by_cause = {v.cause: v for v in fired}
    out = []
    for v in fired:
        specific = next((by_cause[s] for s, g in REFINES.items() if g is v.cause and s in by_cause), None)
        if specific is not None and v.confidence > specific.confidence:
            v.evidence["confidence"]["capped_by"] = specific.cause.value
            v = replace(v, confidence=specific.confidence)
        out.append(v)
    return out


def classify_job(
    conn_or_engine: sa.Engine | sa.Connection,
    job_id: str,
    now: datetime,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> list[Verdict]:
    """Verdicts of the recent window, the whole-job window and, where the job's behaviour
    changed, the segment window of its latest phase; [] inside the grace period."""
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
        found = classify_window(recent, thresholds) + classify_window(whole, thresholds)
        segment = segment_window(conn, scope, thresholds, whole)
        return found + (classify_window(segment, thresholds) if segment is not None else [])


def primary(found: list[Verdict], window_kind: str = "recent") -> Verdict | None:
    """The leading verdict of one window (what an alert or a one-line listing shows)."""
    return next((v for v in found if v.window_kind == window_kind), None)
