"""Reads behind ``gpuwatch jobs --low-util``, ``gpuwatch job ID`` and ``gpuwatch import``.

:func:`low_util_jobs` lists jobs whose latest evaluation is not healthy. It reads
``verdicts`` (one latest evaluation per job, its leading verdict per job via
``ROW_NUMBER()``) joined to ``slurm_jobs`` — never samples — so its cost is set by the
number of jobs and verdict rows, not by the number of samples behind them.

The row shown per job is the leading (highest confidence, then most specific) verdict of
the latest evaluation's ``window`` (``"job"``, the whole job, by default, so GPU-hours
wasted cover the whole run; a job evaluated with only a recent window falls back to it).
With ``cause`` set, the row is that cause's verdict, for jobs whose latest evaluation has it.

:func:`gpu_summary` / :func:`gpu_timeline` read ``gpu_minutes`` over a job's window for the
per-GPU detail view; :func:`evaluate_jobs` classifies given jobs at one time and stores the
verdicts as :func:`gpuwatch.classify.engine.evaluate_running` does (for offline imports).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from gpuwatch.classify.engine import classify_job, store_evaluations
from gpuwatch.classify.features import load_scope
from gpuwatch.classify.verdict import Cause, Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS, Thresholds
from gpuwatch.slurm.model import TERMINAL_STATES
from gpuwatch.sql.jobs import apply_job_filters
from gpuwatch.sql.rollups import epoch_seconds, floor_minute
from gpuwatch.sql.schema import gpu_minutes, slurm_jobs, verdicts
from gpuwatch.sql.types import UtcDateTime

SORTS = ("wasted", "util", "duration", "start")
MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class LowUtilFilters:
    """What ``gpuwatch jobs --low-util`` can ask for; None = no filter."""

    user: str | None = None
    account: str | None = None
    partition: str | None = None
    node: str | None = None
    states: tuple[str, ...] = ()
    #: jobs evaluated at or after this time and not ended before it
    since: datetime | None = None
    cause: str | None = None
    job_ids: tuple[str, ...] | None = None
    sort: str = "wasted"
    limit: int | None = None
    window: str = "job"


def _sort_key(sort: str):  # type: ignore[no-untyped-def]
    big = float("inf")
    if sort == "wasted":
        return lambda r: (-(r["gpu_hours_wasted"] or 0.0), r["job_id"])
    if sort == "util":
        return lambda r: (big if r["mean_util_ratio"] is None else r["mean_util_ratio"], r["job_id"])
    if sort == "duration":
        return lambda r: (-(r["duration_s"] or 0), r["job_id"])
    if sort == "start":
        return lambda r: (-(r["start_at"].timestamp() if r["start_at"] else -big), r["job_id"])
    raise ValueError(f"sort must be one of {SORTS}, not {sort!r}")


def low_util_jobs(
    engine: sa.Engine | sa.Connection, filters: LowUtilFilters | None = None, *, now: datetime
) -> list[dict[str, Any]]:
    """One row per job whose latest evaluation is not healthy, sorted per ``filters.sort``."""
    f = filters or LowUtilFilters()
    _sort_key(f.sort)  # a bad sort fails before the query
    if isinstance(engine, sa.Connection):
        return _low_util(engine, f, now)
    with engine.connect() as conn:
        return _low_util(conn, f, now)


def _low_util(conn: sa.Connection, f: LowUtilFilters, now: datetime) -> list[dict[str, Any]]:
    v = verdicts.c
    j = slurm_jobs.c
    latest = sa.select(v.job_id, sa.func.max(v.evaluated_at).label("at")).group_by(v.job_id)
    if f.since is not None:
        latest = latest.where(v.evaluated_at >= f.since)
    if f.job_ids is not None:
        latest = latest.where(v.job_id.in_(list(f.job_ids)))
    lsub = latest.subquery("latest")
    # the window shown: the requested kind when the evaluation has it, else the other one
    prefer = sa.case((v.window_kind == f.window, 0), else_=1)
    rank = sa.func.row_number().over(partition_by=v.job_id, order_by=(prefer, v.confidence.desc(), v.id))
    picked = sa.select(
        v.id,
        v.job_id,
        v.evaluated_at,
        v.window_kind,
        v.window_start,
        v.window_end,
        v.cause,
        v.confidence,
        v.gpus,
        v.gpu_hours,
        v.gpu_hours_wasted,
        v.mean_util_ratio,
        v.summary,
        v.fix,
        rank.label("rank"),
    ).join(lsub, sa.and_(v.job_id == lsub.c.job_id, v.evaluated_at == lsub.c.at))
    if f.cause is not None:
        picked = picked.where(v.cause == f.cause)
    psub = picked.subquery("picked")
    stmt = (
        sa.select(psub, j.user_name, j.account, j.partition, j.state, j.start_at, j.end_at,
                  j.elapsed_s, j.array_job_id, j.array_task_id, j.name)
        .select_from(psub.outerjoin(slurm_jobs, slurm_jobs.c.job_id == psub.c.job_id))
        .where(psub.c.rank == 1, psub.c.cause != Cause.HEALTHY.value)
    )  # fmt: skip
    stmt = apply_job_filters(stmt, f)
    conv = UtcDateTime()
    out = []
    for r in conn.execute(stmt).mappings():
        start, end = r["start_at"], r["end_at"]
        for_times = {
            k: conv.process_result_value(r[k], conn.dialect)
            for k in ("evaluated_at", "window_start", "window_end")
        }
        running = r["state"] is None or r["state"] not in TERMINAL_STATES
        duration = None
        if start is not None:
            stop = now if running or end is None else min(end, now)
            duration = max(0, int((stop - start).total_seconds()))
        display = r["job_id"]
        if r["array_job_id"] and r["array_task_id"] is not None:
            display = f"{r['array_job_id']}_{r['array_task_id']}"
        out.append(
            {
                "job_id": display,
                "raw_job_id": r["job_id"],
                "name": r["name"],
                "user": r["user_name"],
                "account": r["account"],
                "partition": r["partition"],
                "state": r["state"],
                "gpus": r["gpus"],
                "start_at": start,
                "end_at": end,
                "duration_s": duration,
                "gpu_hours": r["gpu_hours"],
                "gpu_hours_wasted": r["gpu_hours_wasted"],
                "mean_util_ratio": r["mean_util_ratio"],
                "cause": r["cause"],
                "confidence": r["confidence"],
                "window_kind": r["window_kind"],
                **for_times,
                "summary": r["summary"],
                "fix": r["fix"],
                "verdict_id": r["id"],
            }
        )
    out.sort(key=_sort_key(f.sort))
    return out[: f.limit] if f.limit else out


# ---------------------------------------------------------------------------- one job


def job_window(conn: sa.Connection, job_id: str, now: datetime) -> tuple[Any, datetime, datetime] | None:
    """(scope, first minute, exclusive end minute) of a job's run, or None if unknown/unstarted."""
    scope = load_scope(conn, job_id)
    if scope is None or scope.start is None:
        return None
    stop = now if scope.end is None else min(scope.end, now)
    return scope, floor_minute(scope.start), floor_minute(stop) + MINUTE


def _ratio(total: Any, n: Any) -> float | None:
    return None if not n or total is None else float(total) / float(n)


def gpu_summary(conn: sa.Connection, job_id: str, now: datetime) -> list[dict[str, Any]]:
    """Per GPU of the job: node, index, mean util / SM active / tensor active, memory, power."""
    found = job_window(conn, job_id, now)
    if found is None:
        return []
    scope, start, end = found
    g = gpu_minutes.c
    out = []
    for ref in scope.gpus:
        r = (
            conn.execute(
                sa.select(
                    sa.func.sum(g.samples).label("samples"),
                    sa.func.sum(g.util_gpu_ratio_sum).label("util_s"),
                    sa.func.sum(g.util_gpu_ratio_n).label("util_n"),
                    sa.func.sum(g.sm_active_ratio_sum).label("sm_s"),
                    sa.func.sum(g.sm_active_ratio_n).label("sm_n"),
                    sa.func.sum(g.tensor_active_ratio_sum).label("tensor_s"),
                    sa.func.sum(g.tensor_active_ratio_n).label("tensor_n"),
                    sa.func.sum(g.power_watts_sum).label("power_s"),
                    sa.func.sum(g.power_watts_n).label("power_n"),
                    sa.func.max(g.memory_used_bytes_max).label("mem_max"),
                    sa.func.max(g.memory_total_bytes).label("mem_total"),
                    sa.func.max(g.power_limit_watts).label("power_limit"),
                ).where(
                    g.node_id == ref.node_id,
                    g.gpu_index == ref.gpu_index,
                    g.minute >= start,
                    g.minute < end,
                )
            )
            .mappings()
            .one()
        )
        out.append(
            {
                "node": ref.node,
                "gpu_index": ref.gpu_index,
                "samples": int(r["samples"] or 0),
                "util_gpu_mean": _ratio(r["util_s"], r["util_n"]),
                "sm_active_mean": _ratio(r["sm_s"], r["sm_n"]),
                "tensor_active_mean": _ratio(r["tensor_s"], r["tensor_n"]),
                "memory_used_bytes_max": None if r["mem_max"] is None else int(r["mem_max"]),
                "memory_total_bytes": None if r["mem_total"] is None else int(r["mem_total"]),
                "power_watts_mean": _ratio(r["power_s"], r["power_n"]),
                "power_limit_watts": r["power_limit"],
            }
        )
    return out


def gpu_timeline(
    conn: sa.Connection, job_id: str, now: datetime, columns: int | None = None
) -> tuple[datetime, datetime, dict[tuple[str, int], list[float | None]]] | None:
    """(first minute, end, {(node, index): util per minute, None where no data}) of the job.

    With ``columns``, a job longer than that many minutes gets ``columns`` values per GPU
    instead, each the :func:`downsample` of its slice, computed in the database: a week-long
    job is ~10,000 minutes per GPU, which cost ~1 s to fetch and average in Python.
    """
    found = job_window(conn, job_id, now)
    if found is None:
        return None
    scope, start, end = found
    minutes = max(1, int((end - start) / MINUTE))
    if columns is not None and minutes > columns:
        return start, end, _bucketed_timeline(conn, scope, start, end, minutes, columns)
    g = gpu_minutes.c
    series: dict[tuple[str, int], list[float | None]] = {}
    for ref in scope.gpus:
        values: list[float | None] = [None] * minutes
        rows = conn.execute(
            sa.select(g.minute, g.util_gpu_ratio_sum, g.util_gpu_ratio_n).where(
                g.node_id == ref.node_id,
                g.gpu_index == ref.gpu_index,
                g.minute >= start,
                g.minute < end,
            )
        )
        for minute, total, n in rows:
            if isinstance(minute, str):
                minute = datetime.fromisoformat(minute)
            minute = UtcDateTime().process_result_value(minute, conn.dialect)
            k = int((minute - start) / MINUTE)
            if 0 <= k < minutes:
                values[k] = _ratio(total, n)
        series[(ref.node, ref.gpu_index)] = values
    return start, end, series


def _bucketed_timeline(
    conn: sa.Connection, scope: Any, start: datetime, end: datetime, minutes: int, columns: int
) -> dict[tuple[str, int], list[float | None]]:
    """:func:`downsample` of each GPU's per-minute util, done by a GROUP BY in the database.

    Minute ``k`` of the job belongs to column ``((k + 1) * columns - 1) // minutes``: the
    column whose slice ``[c * minutes // columns, (c + 1) * minutes // columns)`` holds it.
    """
    g = gpu_minutes.c
    k = (epoch_seconds(conn, g.minute) - int(start.timestamp())) // 60
    column = ((k + 1) * columns - 1) // minutes
    per_minute = sa.case((g.util_gpu_ratio_n > 0, g.util_gpu_ratio_sum / g.util_gpu_ratio_n))
    series: dict[tuple[str, int], list[float | None]] = {}
    for ref in scope.gpus:
        values: list[float | None] = [None] * columns
        rows = conn.execute(
            sa.select(column.label("c"), sa.func.avg(per_minute))
            .where(g.node_id == ref.node_id, g.gpu_index == ref.gpu_index, g.minute >= start, g.minute < end)
            .group_by(sa.literal_column("c"))
        )
        for c, mean in rows:
            if 0 <= int(c) < columns and mean is not None:
                values[int(c)] = float(mean)
        series[(ref.node, ref.gpu_index)] = values
    return series


def downsample(values: Sequence[float | None], columns: int = 60) -> list[float | None]:
    """Mean of each of ``columns`` equal slices (fewer values: unchanged); None: slice has no data."""
    if len(values) <= columns:
        return list(values)
    out: list[float | None] = []
    for c in range(columns):
        lo, hi = c * len(values) // columns, (c + 1) * len(values) // columns
        got = [x for x in values[lo:hi] if x is not None]
        out.append(sum(got) / len(got) if got else None)
    return out


# ---------------------------------------------------------------------------- evaluation


def evaluate_jobs(
    engine: sa.Engine,
    job_ids: Iterable[str],
    now: datetime | None,
    thresholds: Thresholds = DEFAULT_THRESHOLDS,
) -> dict[str, list[Verdict]]:
    """Classify ``job_ids`` and store their verdicts, as ``evaluate_running`` does.

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
