"""What the web view (and ``gpuwatch demo``) reads: rollups, Slurm jobs and verdicts.

Only the per-minute rollup tables are read for charts (never raw samples), so a page costs
the same on a day-old job as on a new one. The same SQLAlchemy Core serves PostgreSQL and
SQLite.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from gpuwatch.classify.engine import latest_verdicts
from gpuwatch.classify.features import JobScope, load_scope
from gpuwatch.sql.schema import gpu_minutes, job_minutes, node_minutes, nodes, slurm_jobs

RUNNING_STATES = ("RUNNING", "COMPLETING", "SUSPENDED")
#: at most this much of a job is charted (its last day)
MAX_JOB_SPAN = timedelta(hours=24)


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _mean(total: float | None, n: int | None) -> float | None:
    return None if not n or total is None else total / n


# ---------------------------------------------------------------------------- low-util jobs


def low_util_rows(
    engine: sa.Engine | sa.Connection, job_ids: Sequence[str] | None = None, *, running_only: bool = False
) -> list[dict[str, Any]]:
    """The leading recent-window verdict of every low-utilization job, most GPU-hours wasted first."""
    best: dict[str, dict[str, Any]] = {}
    for row in latest_verdicts(engine, window_kind="recent"):  # best first per job already
        if job_ids is None or row["job_id"] in job_ids:
            best.setdefault(row["job_id"], row)
    jobs: dict[str, Any] = {}
    if best:
        query = sa.select(
            slurm_jobs.c.job_id,
            slurm_jobs.c.user_name,
            slurm_jobs.c.name,
            slurm_jobs.c.nodes,
            slurm_jobs.c.state,
        ).where(slurm_jobs.c.job_id.in_(list(best)))
        conn_cm = engine.connect() if isinstance(engine, sa.Engine) else _nullcm(engine)
        with conn_cm as conn:
            jobs = {r.job_id: r for r in conn.execute(query)}
    rows = []
    for jid, v in best.items():
        job = jobs.get(jid)
        if running_only and job is not None and job.state not in RUNNING_STATES:
            continue
        summary, prefix = v["summary"], f"job {jid}: "
        rows.append(
            {
                "job_id": jid,
                "node": ",".join(job.nodes or []) if job else "",
                "user": job.user_name if job else None,
                "name": job.name if job else None,
                "state": job.state if job else None,
                "cause": v["cause"],
                "confidence": round(v["confidence"], 2),
                "gpus": v["gpus"],
                "util": None if v["mean_util_ratio"] is None else f"{100 * v['mean_util_ratio']:.0f}%",
                "mean_util_ratio": v["mean_util_ratio"],
                "gpu_hours_wasted": v["gpu_hours_wasted"],
                "evaluated_at": v["evaluated_at"],
                "evidence": summary[len(prefix) :] if summary.startswith(prefix) else summary,
                "fix": v["fix"],
            }
        )
    rows.sort(key=lambda r: (-(r["gpu_hours_wasted"] or 0.0), r["job_id"]))
    return rows


class _nullcm:
    def __init__(self, conn: sa.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> sa.Connection:
        return self.conn

    def __exit__(self, *exc: object) -> None:
        return None


# ---------------------------------------------------------------------------- overview


@dataclass
class Overview:
    now: datetime
    start: datetime  # first minute of the heat map
    minutes: int
    rows: list[str]  # "node/gpuN", sorted
    cells: dict[tuple[int, int], float]
    gpus_reporting: int = 0
    gpus_busy: int = 0
    gpus_idle: int = 0
    gpus_wasted: int = 0  # GPUs of running jobs whose latest verdict is a waste cause
    simulated: bool = False
    jobs: list[dict[str, Any]] = field(default_factory=list)


def overview(engine: sa.Engine, now: datetime, *, low_ratio: float = 0.15, minutes: int = 60) -> Overview:
    """The last ``minutes`` of every GPU, and who is busy, idle and wasting GPUs now."""
    end = now.replace(second=0, microsecond=0)
    start = end - timedelta(minutes=minutes)
    g = gpu_minutes.c
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                nodes.c.name, g.gpu_index, g.minute, g.util_gpu_ratio_sum, g.util_gpu_ratio_n, g.simulated
            )
            .join(nodes, nodes.c.id == g.node_id)
            .where(g.minute >= start, g.minute < end)
        ).all()
        jobs = low_util_rows(conn, running_only=True)
    labels = sorted({(r[0], r[1]) for r in rows})
    index = {key: i for i, key in enumerate(labels)}
    cells: dict[tuple[int, int], float] = {}
    latest: dict[int, tuple[datetime, float]] = {}
    simulated = False
    for name, gpu, minute, total, n, sim in rows:
        util = _mean(total, n)
        if util is None:
            continue
        minute = _utc(minute)
        i, m = index[(name, gpu)], int((minute - start) / timedelta(minutes=1))
        cells[(i, m)] = util
        simulated = simulated or bool(sim)
        if minute >= end - timedelta(minutes=10) and (i not in latest or latest[i][0] < minute):
            latest[i] = (minute, util)
    busy = sum(1 for _, u in latest.values() if u > low_ratio)
    return Overview(
        now=now,
        start=start,
        minutes=minutes,
        rows=[f"{name}/gpu{gpu}" for name, gpu in labels],
        cells=cells,
        gpus_reporting=len(latest),
        gpus_busy=busy,
        gpus_idle=len(latest) - busy,
        gpus_wasted=sum(int(j["gpus"] or 0) for j in jobs),
        simulated=simulated,
        jobs=jobs,
    )


# ---------------------------------------------------------------------------- one job


@dataclass
class JobView:
    scope: JobScope
    slurm: dict[str, Any] | None
    start: datetime
    end: datetime
    #: metric -> GPU label -> [(minute, value)]
    gpu_series: dict[str, dict[str, list[tuple[datetime, float | None]]]]
    cpu: dict[str, list[tuple[datetime, float | None]]]
    network: dict[str, list[tuple[datetime, float | None]]]
    verdicts: list[dict[str, Any]]
    simulated: bool


GPU_METRICS = ("util", "sm", "tensor", "memory", "power")


def job_view(engine: sa.Engine, job_id: str, now: datetime) -> JobView | None:
    """Everything the job page shows; None for a job nothing is known about."""
    with engine.connect() as conn:
        scope = load_scope(conn, job_id)
        if scope is None:
            return None
        slurm = conn.execute(sa.select(slurm_jobs).where(slurm_jobs.c.job_id == job_id)).mappings().first()
        end = _utc(scope.end) if scope.end is not None else now
        start = _utc(scope.start) if scope.start is not None else end - timedelta(hours=1)
        start = max(start, end - MAX_JOB_SPAN)
        lo, hi = start.replace(second=0, microsecond=0), end
        g = gpu_minutes.c
        wanted = {(ref.node_id, ref.gpu_index): ref.label for ref in scope.gpus}
        node_ids = sorted({ref.node_id for ref in scope.gpus})
        gpu_rows = (
            conn.execute(
                sa.select(gpu_minutes)
                # only the job's GPUs: a 1-GPU job on an 8-GPU node reads 1/8 of the node's rows
                .where(sa.tuple_(g.node_id, g.gpu_index).in_(sorted(wanted)), g.minute >= lo, g.minute <= hi)
                .order_by(g.minute)
            )
            .mappings()
            .all()
            if node_ids
            else []
        )
        j = job_minutes.c
        job_rows = (
            conn.execute(
                sa.select(job_minutes)
                .where(j.job_id == job_id, j.minute >= lo, j.minute <= hi)
                .order_by(j.minute)
            )
            .mappings()
            .all()
        )
        n = node_minutes.c
        node_rows = (
            conn.execute(
                sa.select(node_minutes, nodes.c.name)
                .join(nodes, nodes.c.id == n.node_id)
                .where(n.node_id.in_(node_ids), n.minute >= lo, n.minute <= hi)
                .order_by(n.minute)
            )
            .mappings()
            .all()
            if node_ids
            else []
        )
        found = latest_verdicts(conn, job_id, include_healthy=True)
    series: dict[str, dict[str, list]] = {m: defaultdict(list) for m in GPU_METRICS}
    simulated = False
    for r in gpu_rows:
        label = wanted[(r["node_id"], r["gpu_index"])]  # the query read only the job's GPUs
        t = _utc(r["minute"])
        simulated = simulated or bool(r["simulated"])
        series["util"][label].append((t, _mean(r["util_gpu_ratio_sum"], r["util_gpu_ratio_n"])))
        series["sm"][label].append((t, _mean(r["sm_active_ratio_sum"], r["sm_active_ratio_n"])))
        series["tensor"][label].append((t, _mean(r["tensor_active_ratio_sum"], r["tensor_active_ratio_n"])))
        total = r["memory_total_bytes"]
        used = r["memory_used_bytes_max"]
        series["memory"][label].append((t, used / total if used is not None and total else None))
        watts, limit = _mean(r["power_watts_sum"], r["power_watts_n"]), r["power_limit_watts"]
        series["power"][label].append((t, watts / limit if watts is not None and limit else None))
    # CPU as ratios: the job's cgroup against its allocation, the node's busy and iowait
    cpu: dict[str, list] = defaultdict(list)
    for r in job_rows:
        used, alloc = _mean(r["cpu_used_cores_sum"], r["cpu_used_cores_n"]), r["cpu_allocated_cores"]
        cpu["job CPU of allocated"].append(
            (_utc(r["minute"]), used / alloc if used is not None and alloc else None)
        )
    network: dict[str, list] = defaultdict(list)
    for r in node_rows:
        t, name = _utc(r["minute"]), r["name"]
        cpu[f"{name} busy"].append((t, _mean(r["busy_ratio_sum"], r["busy_ratio_n"])))
        cpu[f"{name} iowait"].append((t, _mean(r["iowait_ratio_sum"], r["iowait_ratio_n"])))
        network[f"{name} NIC"].append((t, _mean(r["nic_bytes_per_s_sum"], r["nic_bytes_per_s_n"])))
        if r["ib_bytes_per_s_n"]:
            network[f"{name} IB"].append((t, _mean(r["ib_bytes_per_s_sum"], r["ib_bytes_per_s_n"])))
    return JobView(
        scope=scope,
        slurm=dict(slurm) if slurm else None,
        start=start,
        end=end,
        gpu_series={m: dict(v) for m, v in series.items()},
        cpu=dict(cpu),
        network=dict(network),
        verdicts=found,
        simulated=simulated,
    )
