"""What the cluster is doing now: every GPU's last hour, who is busy, idle and wasting GPUs.

The web view's front page. The wasting jobs are :func:`gpuwatch.views.lowutil.low_util_jobs`
of the jobs still holding their GPUs, so the page lists what every other surface lists.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa

from gpuwatch.sql.schema import gpu_minutes, nodes
from gpuwatch.sql.types import UtcDateTime
from gpuwatch.views.lowutil import LowUtilFilters, LowUtilJob, low_util_jobs

#: a GPU counts as reporting when it has a rolled-up minute this recent
REPORTING = timedelta(minutes=10)


@dataclass(frozen=True)
class Overview:
    now: datetime
    start: datetime  # first minute of the heat map
    minutes: int
    rows: list[str]  # "node/gpuN", sorted
    #: (row, minute) -> mean utilization (0..1)
    cells: dict[tuple[int, int], float]
    gpus_reporting: int = 0
    gpus_busy: int = 0
    gpus_idle: int = 0
    #: GPUs of running jobs that waste them (the listed jobs' GPUs)
    gpus_wasted: int = 0
    simulated: bool = False
    jobs: list[LowUtilJob] = field(default_factory=list)


def cluster_overview(
    engine: sa.Engine, now: datetime, *, low_ratio: float = 0.15, minutes: int = 60
) -> Overview:
    """The last ``minutes`` of every GPU; who is busy (util above ``low_ratio``), idle, wasting GPUs."""
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
        jobs = low_util_jobs(conn, LowUtilFilters(running=True), now=now)
        dialect = conn.dialect
    labels = sorted({(r[0], r[1]) for r in rows})
    index = {key: i for i, key in enumerate(labels)}
    cells: dict[tuple[int, int], float] = {}
    latest: dict[int, tuple[datetime, float]] = {}
    simulated = False
    as_utc = UtcDateTime()
    for name, gpu, minute, total, n, sim in rows:
        if not n or total is None:
            continue
        util = float(total) / float(n)
        minute = as_utc.process_result_value(minute, dialect)
        i, m = index[(name, gpu)], int((minute - start) / timedelta(minutes=1))
        cells[(i, m)] = util
        simulated = simulated or bool(sim)
        if minute >= end - REPORTING and (i not in latest or latest[i][0] < minute):
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
        gpus_wasted=sum(int(j.gpus or 0) for j in jobs),
        simulated=simulated,
        jobs=jobs,
    )
