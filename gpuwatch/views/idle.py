"""Which running jobs have held only idle GPUs, and since when: what enforcement acts on.

A job is idle when its latest evaluations (newest first, back to the first that is not) each
have an ``idle_allocation`` verdict with ``mean_util_ratio`` at most the given ratio and,
where the evidence lists ``signals.idle_gpus``, as many idle GPUs as the verdict's ``gpus``. It is
idle since the first window's start of that streak; a busy evaluation ends the streak.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpuwatch.sql.schema import slurm_jobs, verdicts

IDLE_CAUSE = "idle_allocation"


@dataclass(frozen=True)
class IdleJob:
    job_id: str
    user_name: str | None
    account: str | None
    partition: str | None
    gpus: int | None
    idle_since: datetime
    idle_until: datetime

    @property
    def idle_s(self) -> float:
        return (self.idle_until - self.idle_since).total_seconds()


def _idle_count(evidence: Any) -> int | None:
    """How many GPUs the verdict found idle: the rule's ``signals.idle_gpus`` list."""
    signals = evidence.get("signals") if isinstance(evidence, dict) else None
    idle = signals.get("idle_gpus") if isinstance(signals, dict) else None
    return len(idle) if isinstance(idle, list) else None


def _all_idle(rows: list[Any], max_ratio: float) -> Any | None:
    """The evaluation's all-idle verdict reaching furthest back (a segment window dates the
    idle phase; the recent window only covers its last minutes); None when there is none."""
    found = []
    for r in rows:
        if r.cause != IDLE_CAUSE or r.mean_util_ratio is None or r.mean_util_ratio > max_ratio:
            continue
        idle = _idle_count(r.evidence)
        if idle is not None and r.gpus is not None and idle != r.gpus:
            continue
        found.append(r)
    return min(found, key=lambda r: r.window_start, default=None)


def idle_jobs(engine: sa.Engine, *, evaluated_since: datetime, max_util_ratio: float) -> list[IdleJob]:
    """RUNNING jobs whose latest evaluation (at or after ``evaluated_since``) says all their GPUs
    are idle (mean utilization at most ``max_util_ratio``), with the start of that streak."""
    v, j = verdicts.c, slurm_jobs.c
    since, max_ratio = evaluated_since, max_util_ratio
    with engine.connect() as conn:
        job_ids = list(
            conn.scalars(
                sa.select(v.job_id)
                .join(slurm_jobs, j.job_id == v.job_id)
                .where(v.cause == IDLE_CAUSE, v.evaluated_at >= since, j.state == "RUNNING")
                .distinct()
            )
        )
        out: list[IdleJob] = []
        for job_id in job_ids:
            job = conn.execute(sa.select(slurm_jobs).where(j.job_id == job_id)).mappings().one()
            rows = conn.execute(
                sa.select(verdicts).where(v.job_id == job_id).order_by(v.evaluated_at.desc(), v.id)
            ).all()
            evaluations: dict[datetime, list[Any]] = {}
            for r in rows:
                evaluations.setdefault(r.evaluated_at, []).append(r)
            streak = []
            for _, group in sorted(evaluations.items(), reverse=True):
                idle = _all_idle(group, max_ratio)
                if idle is None:
                    break
                streak.append(idle)
            if not streak or streak[0].evaluated_at < since:
                continue
            out.append(
                IdleJob(
                    job_id=job_id,
                    user_name=job["user_name"],
                    account=job["account"],
                    partition=job["partition"],
                    gpus=streak[0].gpus,
                    idle_since=min(r.window_start for r in streak),
                    idle_until=streak[0].window_end,
                )
            )
    return out
