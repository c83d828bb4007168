"""How many GPU-hours each job wasted in a period, and on what: the digests' figures.

Counting waste from verdicts without counting it twice: the classifier writes a verdict per
evaluation, and rolling ("recent") windows overlap. Per (job, cause) a period counts the
latest whole-job (``window_kind = 'job'``) verdict evaluated in it if there is one — the
window :func:`gpuwatch.views.low_util_jobs` shows too — else the largest
``gpu_hours_wasted`` among its recent windows (a lower bound).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

import sqlalchemy as sa

from gpuwatch.sql.buckets import ceil_hour, floor_hour
from gpuwatch.sql.job_hours import HOUR
from gpuwatch.sql.jobs import CHUNK, IDS_PER_READ, among
from gpuwatch.sql.schema import slurm_jobs, verdict_hours, verdicts
from gpuwatch.views.evaluations import HEALTHY


@dataclass(frozen=True)
class JobWaste:
    job_id: str
    job_name: str | None
    user_name: str | None
    account: str | None
    cause: str
    gpu_hours_wasted: float
    fix: str | None


def waste_in_period(
    engine: sa.Engine, start: datetime, end: datetime, job_ids: Sequence[str] | None = None
) -> list[JobWaste]:
    """One row per (job, cause) with waste in verdicts evaluated in ``[start, end)``, with the
    job's name, user and account and the picked verdict's fix; only of ``job_ids`` when given
    (one user's page reads its own jobs' verdicts, not everyone's)."""
    out: list[JobWaste] = []
    with engine.connect() as conn:
        for chunk in _chunks(job_ids):
            best = _picks(conn, start, end, chunk)
            texts = _fixes(conn, [p.verdict_id for p in best.values()])
            jobs = _job_facts(conn, sorted({job for job, _ in best}))
            out += [
                JobWaste(
                    p.job_id,
                    *jobs.get(p.job_id, (None, None, None)),
                    p.cause,
                    float(p.gpu_hours_wasted),
                    texts.get(p.verdict_id),
                )
                for p in best.values()
            ]
    return out


def wasted_gpu_hours(
    engine: sa.Engine, start: datetime, end: datetime, job_ids: Sequence[str] | None = None
) -> dict[str, dict[str, float]]:
    """job id -> cause -> GPU-hours wasted, counted as :func:`waste_in_period` counts them, without
    the job facts and fixes (a report over a month counts hours only)."""
    out: dict[str, dict[str, float]] = {}
    with engine.connect() as conn:
        for chunk in _chunks(job_ids):
            for (job_id, cause), p in _picks(conn, start, end, chunk).items():
                out.setdefault(job_id, {})[cause] = float(p.gpu_hours_wasted)
    return out


def _chunks(job_ids: Sequence[str] | None) -> list[list[str] | None]:
    if job_ids is None:
        return [None]
    ids = sorted(set(job_ids))
    return [ids[i : i + IDS_PER_READ] for i in range(0, len(ids), IDS_PER_READ)]


class _Pick(NamedTuple):
    """A candidate for a (job, cause)'s counted verdict: a whole-job one beats any recent one;
    between two of a kind the larger ``order`` wins (whole: time, id; recent: wasted, id)."""

    job_id: str
    cause: str
    whole: bool
    order: tuple[Any, int]
    gpu_hours_wasted: float
    verdict_id: int


def _picks(
    conn: sa.Connection, start: datetime, end: datetime, job_ids: list[str] | None
) -> dict[tuple[str, str], _Pick]:
    """(job, cause) -> its counted verdict in ``[start, end)``. The whole hours of the period are
    read from ``verdict_hours`` (each hour's picks, kept by triggers on ``verdicts``), the part of
    an hour at either end from the verdicts themselves; both picks are maxima, so taking them per
    hour and then over the hours gives what taking them over the verdicts would. The hour a period
    ends in counts whole when it has no verdict at or after ``end`` (a report that ends now): its
    picks are then the ones of ``[hour, end)``."""
    first, last = ceil_hour(start), floor_hour(end)
    best: dict[tuple[str, str], _Pick] = {}
    spans = [(start, end)]
    if first < last:
        spans = [(start, first), (last, end)]
        picks = None
        if last < end and _none_from(conn, end, last + HOUR):
            picks = list(_hour_picks(conn, first, last + HOUR, job_ids))
            # a verdict stored meanwhile at or after ``end`` would be in them: read the edge instead
            if _none_from(conn, end, last + HOUR):
                spans = [(start, first)]
            else:
                picks = None
        _take(best, picks if picks is not None else _hour_picks(conn, first, last, job_ids))
    for s, e in spans:
        if s < e:
            _take(best, _verdict_picks(conn, s, e, job_ids))
    return best


def _none_from(conn: sa.Connection, start: datetime, end: datetime) -> bool:
    """No verdict (of any job) is evaluated in ``[start, end)``."""
    v = verdicts.c
    query = sa.select(v.id).where(v.evaluated_at >= start, v.evaluated_at < end).limit(1)
    return conn.execute(query).first() is None


def _take(best: dict[tuple[str, str], _Pick], picks: Iterable[_Pick]) -> None:
    for p in picks:
        key = (p.job_id, p.cause)
        old = best.get(key)
        if old is None or (p.whole, p.order) > (old.whole, old.order):
            best[key] = p


def _verdict_picks(
    conn: sa.Connection, start: datetime, end: datetime, job_ids: list[str] | None
) -> Iterator[_Pick]:
    """Each (job, cause)'s picks among the verdicts of ``[start, end)``: the latest whole-job
    one, the recent one with most waste (ties: every tied row; :func:`_take` keeps the newest)."""
    v = verdicts.c
    wasted = [v.evaluated_at >= start, v.evaluated_at < end, v.cause != HEALTHY, v.gpu_hours_wasted > 0]
    if job_ids is not None:
        wasted.append(among(conn, v.job_id, job_ids))
    whole = v.window_kind == "job"
    for condition, column in ((whole, v.evaluated_at), (sa.not_(whole), v.gpu_hours_wasted)):
        picked = (
            sa.select(v.job_id, v.cause, sa.func.max(column).label("pick"))
            .where(*wasted, condition)
            .group_by(v.job_id, v.cause)
            .subquery()
        )
        query = (
            sa.select(v.job_id, v.cause, v.evaluated_at, v.gpu_hours_wasted, v.id)
            .join(
                picked,
                sa.and_(v.job_id == picked.c.job_id, v.cause == picked.c.cause, column == picked.c.pick),
            )
            .where(*wasted, condition)
        )
        is_whole = condition is whole
        for r in conn.execute(query):
            order = (r.evaluated_at, r.id) if is_whole else (r.gpu_hours_wasted, r.id)
            yield _Pick(r.job_id, r.cause, is_whole, order, r.gpu_hours_wasted, r.id)


def _hour_picks(
    conn: sa.Connection, first: datetime, last: datetime, job_ids: list[str] | None
) -> Iterator[_Pick]:
    """The same picks over the whole hours ``[first, last)``, from ``verdict_hours``: per (job,
    cause) the hour with the latest whole-job pick, else the hour(s) with the most recent waste."""
    h = verdict_hours.c
    span = [h.hour >= first, h.hour < last]
    if job_ids is not None:
        span.append(among(conn, h.job_id, job_ids))
    top = (
        sa.select(
            h.job_id,
            h.cause,
            sa.func.max(h.whole_at).label("whole_at"),
            sa.func.max(h.recent_wasted).label("recent_wasted"),
        )
        .where(*span)
        .group_by(h.job_id, h.cause)
        .subquery()
    )
    query = (
        sa.select(h.job_id, h.cause, h.whole_at, h.whole_id, h.whole_wasted, h.recent_id, h.recent_wasted)
        .join(
            top,
            sa.and_(
                h.job_id == top.c.job_id,
                h.cause == top.c.cause,
                sa.or_(
                    h.whole_at == top.c.whole_at,
                    sa.and_(top.c.whole_at.is_(None), h.recent_wasted == top.c.recent_wasted),
                ),
            ),
        )
        .where(*span)
    )
    # a row joined by its whole-job pick stands for it (a whole-job verdict beats any recent
    # one); where the (job, cause) has none in the span, rows joined by the most recent waste
    for job_id, cause, whole_at, whole_id, whole_wasted, recent_id, recent_wasted in conn.execute(
        query
    ).all():
        if whole_id is not None:
            yield _Pick(job_id, cause, True, (whole_at, whole_id), whole_wasted, whole_id)
        else:
            yield _Pick(job_id, cause, False, (recent_wasted, recent_id), recent_wasted, recent_id)


def _fixes(conn: sa.Connection, verdict_ids: list[int]) -> dict[int, str | None]:
    v = verdicts.c
    out: dict[int, str | None] = {}
    for i in range(0, len(verdict_ids), CHUNK):
        chunk = verdict_ids[i : i + CHUNK]
        out.update(conn.execute(sa.select(v.id, v.fix).where(v.id.in_(chunk))).all())
    return out


def _job_facts(
    conn: sa.Connection, job_ids: list[str]
) -> dict[str, tuple[str | None, str | None, str | None]]:
    """job id -> (name, user, account) from ``slurm_jobs``, for the jobs that have a row."""
    j = slurm_jobs.c
    out = {}
    for i in range(0, len(job_ids), CHUNK):
        chunk = job_ids[i : i + CHUNK]
        for r in conn.execute(sa.select(j.job_id, j.name, j.user_name, j.account).where(j.job_id.in_(chunk))):
            out[r.job_id] = (r.name, r.user_name, r.account)
    return out
