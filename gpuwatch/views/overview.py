"""What the cluster is doing now: every node's last hour, which GPUs are busy, idle and wasted.

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
    rows: list[str]  # node names, sorted: the heat map has a row per node (its page has a row per GPU)
    #: (row, minute) -> mean utilization (0..1) of the node's GPUs that reported that minute
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
    names = sorted({r[0] for r in rows})
    index = {name: i for i, name in enumerate(names)}
    sums: dict[tuple[int, int], list[float]] = {}
    latest: dict[tuple[str, int], tuple[datetime, float]] = {}
    simulated = False
    as_utc = UtcDateTime()
    for name, gpu, minute, total, n, sim in rows:
        if not n or total is None:
            continue
        util = float(total) / float(n)
        minute = as_utc.process_result_value(minute, dialect)
        cell = sums.setdefault((index[name], int((minute - start) / timedelta(minutes=1))), [0.0, 0.0])
        cell[0] += util
        cell[1] += 1
        simulated = simulated or bool(sim)
        if minute >= end - REPORTING and ((name, gpu) not in latest or latest[(name, gpu)][0] < minute):
            latest[(name, gpu)] = (minute, util)
    cells = {key: total / count for key, (total, count) in sums.items()}
    busy = sum(1 for _, u in latest.values() if u > low_ratio)
    return Overview(
        now=now,
        start=start,
        minutes=minutes,
        rows=names,
        cells=cells,
        gpus_reporting=len(latest),
        gpus_busy=busy,
        gpus_idle=len(latest) - busy,
        gpus_wasted=sum(int(j.gpus or 0) for j in jobs),
        simulated=simulated,
        jobs=jobs,
    )
