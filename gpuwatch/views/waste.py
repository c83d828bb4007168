"""How many GPU-hours each job wasted in a period, and on what: the digests' figures.

Counting waste from verdicts without counting it twice: the classifier writes a verdict per
evaluation, and rolling ("recent") windows overlap. Per (job, cause) a period counts the
latest whole-job (``window_kind = 'job'``) verdict evaluated in it if there is one — the
window :func:`gpuwatch.views.low_util_jobs` shows too — else the largest
``gpu_hours_wasted`` among its recent windows (a lower bound).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from gpuwatch.sql.jobs import CHUNK
from gpuwatch.sql.schema import slurm_jobs, verdicts
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
    """One row per (job, cause) with waste in verdicts evaluated in ``[start, end)``; only of
    ``job_ids`` when given (one user's page reads its own jobs' verdicts, not everyone's).

    The choice is made in SQL (two grouped passes over the period's verdicts), so what comes
    back is a row per (job, cause), not a row per evaluation."""
    if job_ids is None:
        return _waste(engine, start, end, ())
    out: list[JobWaste] = []
    ids = sorted(set(job_ids))
    for i in range(0, len(ids), CHUNK):
        out += _waste(engine, start, end, (verdicts.c.job_id.in_(ids[i : i + CHUNK]),))
    return out


def _waste(
    engine: sa.Engine, start: datetime, end: datetime, only: tuple[sa.ColumnElement, ...]
) -> list[JobWaste]:
    v = verdicts.c
    wasted = (v.evaluated_at >= start, v.evaluated_at < end, v.cause != HEALTHY, v.gpu_hours_wasted > 0)
    wasted += only
    whole = v.window_kind == "job"
    latest = (
        sa.select(v.job_id, v.cause, sa.func.max(v.evaluated_at).label("pick"))
        .where(*wasted, whole)
        .group_by(v.job_id, v.cause)
        .subquery()
    )
    largest = (
        sa.select(v.job_id, v.cause, sa.func.max(v.gpu_hours_wasted).label("pick"))
        .where(*wasted, sa.not_(whole))
        .group_by(v.job_id, v.cause)
        .subquery()
    )
    best: dict[tuple[str, str], sa.Row] = {}
    with engine.connect() as conn:
        # recent windows first: a whole-job verdict of the same (job, cause) replaces them
        for picked, column, condition in (
            (largest, v.gpu_hours_wasted, sa.not_(whole)),
            (latest, v.evaluated_at, whole),
        ):
            query = (
                sa.select(v.job_id, v.cause, v.gpu_hours_wasted, v.fix, v.id, v.window_kind)
                .join(
                    picked,
                    sa.and_(v.job_id == picked.c.job_id, v.cause == picked.c.cause, column == picked.c.pick),
                )
                .where(*wasted, condition)
                .order_by(v.id)  # ties: the newest row
            )
            for r in conn.execute(query):
                key = (r.job_id, r.cause)
                old = best.get(key)
                if old is None or old.window_kind != "job" or r.window_kind == "job":
                    best[key] = r
        jobs = _job_facts(conn, sorted({job for job, _ in best}))
    return [
        JobWaste(r.job_id, *jobs.get(r.job_id, (None, None, None)), r.cause, float(r.gpu_hours_wasted), r.fix)
        for r in best.values()
    ]


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
