"""How many GPU-hours each job wasted in a period, and on what: the digests' figures.

Counting waste from verdicts without counting it twice: the classifier writes a verdict per
evaluation, and rolling ("recent") windows overlap. Per (job, cause) a period counts the
latest whole-job (``window_kind = 'job'``) verdict evaluated in it if there is one — the
window :func:`gpuwatch.views.low_util_jobs` shows too — else the largest
``gpu_hours_wasted`` among its recent windows (a lower bound).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

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


def _better(new: sa.Row, old: sa.Row) -> bool:
    """Whole-job verdicts win over recent windows; the latest whole-job one; the largest window."""
    if (new.window_kind == "job") != (old.window_kind == "job"):
        return new.window_kind == "job"
    if new.window_kind == "job":
        return (new.evaluated_at, new.id) > (old.evaluated_at, old.id)
    return new.gpu_hours_wasted > old.gpu_hours_wasted


def waste_in_period(engine: sa.Engine, start: datetime, end: datetime) -> list[JobWaste]:
    """One row per (job, cause) with waste in verdicts evaluated in ``[start, end)``."""
    v, j = verdicts.c, slurm_jobs.c
    query = (
        sa.select(
            v.job_id,
            v.cause,
            v.window_kind,
            v.evaluated_at,
            v.gpu_hours_wasted,
            v.fix,
            v.id,
            j.name,
            j.user_name,
            j.account,
        )
        .outerjoin(slurm_jobs, j.job_id == v.job_id)
        .where(v.evaluated_at >= start, v.evaluated_at < end, v.cause != HEALTHY, v.gpu_hours_wasted > 0)
    )
    best: dict[tuple[str, str], sa.Row] = {}
    with engine.connect() as conn:
        for r in conn.execute(query):
            old = best.get((r.job_id, r.cause))
            if old is None or _better(r, old):
                best[(r.job_id, r.cause)] = r
    return [
        JobWaste(r.job_id, r.name, r.user_name, r.account, r.cause, float(r.gpu_hours_wasted), r.fix)
        for r in best.values()
    ]
