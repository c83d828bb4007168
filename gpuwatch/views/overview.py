"""What the cluster is doing now: every node's last hour, which GPUs are busy, idle and wasted,
and which faulted.

The web view's front page. The wasting jobs are :func:`gpuwatch.views.lowutil.low_util_jobs`
of the jobs still holding their GPUs, so the page lists what every other surface lists.

GPUs are counted as cards. A card split into MIG instances is one GPU reporting, not one per
instance plus the card: its instances carry the activity (a busy instance counts its share of
the card, ``card_fraction_ratio``, as busy), the card's own row only power and temperature. So
``gpus_busy``, ``gpus_idle`` and ``gpus_wasted`` may hold fractions of a card; the heat map's
cells count the split card once too (``node_minutes``, :func:`gpuwatch.sql.rollups`).
"""

from __future__ import annotations

import math
import sys
from array import array
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import NamedTuple

import sqlalchemy as sa

from gpuwatch.sql.resolution import tier_for
from gpuwatch.sql.schema import gpus, nodes
from gpuwatch.views.faults import NodeGpuFault, faults_by_node
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
    #: cards with a utilization signal in the last :data:`REPORTING` (a MIG-split card once)
    gpus_reporting: int = 0
    #: of those, busy at their latest minute, in cards (a busy MIG instance: its share)
    gpus_busy: float = 0.0
    gpus_idle: float = 0.0
    #: cards held by running jobs that waste them (the listed jobs' GPUs; an instance its share)
    gpus_wasted: float = 0.0
    simulated: bool = False
    jobs: list[LowUtilJob] = field(default_factory=list)
    #: node name -> its GPUs that faulted in the span (``gpuwatch nodes --faulty``'s list)
    faults: dict[str, tuple[NodeGpuFault, ...]] = field(default_factory=dict)


def cluster_overview(
    engine: sa.Engine, now: datetime, *, low_ratio: float = 0.15, minutes: int = 60
) -> Overview:
    """The last ``minutes`` of every node; which GPUs are busy (util above ``low_ratio``), idle,
    wasted, faulted. Read from ``node_minutes`` (the rollup sums each node's GPUs per minute), so the
    cost grows with nodes x minutes, not with every GPU-minute."""
    end = now.replace(second=0, microsecond=0)
    start = end - timedelta(minutes=minutes)
    with engine.connect() as conn:
        found = _node_cells(conn, start, end)
        names_of = dict(conn.execute(sa.select(nodes.c.id, nodes.c.name)).all())
        reporting, busy = _reporting(conn, end, low_ratio)
        jobs = low_util_jobs(conn, LowUtilFilters(running=True), now=now)
        faults = faults_by_node(conn, start)
    names = sorted(names_of[node_id] for node_id in {*found.node_ids, *found.blank})
    index = {name: i for i, name in enumerate(names)}
    row_of = {node_id: index[name] for node_id, name in names_of.items() if name in index}
    cells = {
        (row_of[node_id], m): util
        for node_id, m, util in zip(found.node_ids, found.offsets, found.utils, strict=True)
    }
    return Overview(
        now=now,
        start=start,
        minutes=minutes,
        rows=names,
        cells=cells,
        gpus_reporting=reporting,
        gpus_busy=busy,
        gpus_idle=reporting - busy,
        gpus_wasted=math.fsum(cards_held(j) for j in jobs),
        simulated=found.simulated,
        jobs=jobs,
        faults=faults,
    )


class _NodeCells(NamedTuple):
    """The heat map's node-minutes of a span, as lists in step (one entry per cell)."""

    node_ids: list[int]
    offsets: list[int]  # minutes from the span's start
    utils: list[float]  # mean utilization of the node's GPUs that minute
    #: nodes with a node-minute in the span whose sum is missing (no cell, but a row of grey)
    blank: list[int]
    simulated: bool  # whether any node-minute of the span is simulated


def _node_cells(conn: sa.Connection, start: datetime, end: datetime) -> _NodeCells:
    """Every node-minute with a GPU utilization in [start, end).

    On PostgreSQL they come in one row, aggregated over one pass, which feeds every aggregate
    the rows in the same order (a parallel plan combines each worker's states together), so
    the lists stay in step without a sort: ids and offsets as arrays, the utilizations as one
    ``bytea`` of big-endian doubles (``float8send``: the exact values, without parsing 60,000
    floats from text). That replaces a result row per node-minute (60,000 at 1,000 nodes),
    which was most of the overview's time. SQLite, the one-machine default, reads them row
    by row."""
    tier = tier_for(conn, start, end)  # a span older than the minutes kept: a cell per node-hour
    n = tier.node.c
    offset = tier.minute_of(conn, tier.node, start)
    util = n.gpu_util_ratio_sum / n.gpu_util_ratio_n
    span = (*tier.within(tier.node, start, end), n.gpu_util_ratio_n > 0)
    if conn.dialect.name == "postgresql":
        has_util = n.gpu_util_ratio_sum.is_not(None)
        doubles = sa.func.string_agg(sa.func.float8send(util), sa.cast(b"", sa.LargeBinary))
        ids, offsets, packed, blank, simulated = conn.execute(
            sa.select(
                sa.func.array_agg(n.node_id).filter(has_util),
                sa.func.array_agg(offset).filter(has_util),
                sa.type_coerce(doubles.filter(has_util), sa.LargeBinary),
                sa.func.array_agg(n.node_id).filter(sa.not_(has_util)),
                sa.func.bool_or(n.gpu_simulated),
            ).where(*span)
        ).one()
        utils = array("d", packed or b"")
        if sys.byteorder == "little":
            utils.byteswap()
        return _NodeCells(ids or [], offsets or [], utils.tolist(), blank or [], bool(simulated))
    rows = conn.execute(sa.select(n.node_id, offset, util, n.gpu_simulated).where(*span)).all()
    cells = [r for r in rows if r[2] is not None]
    return _NodeCells(
        [r[0] for r in cells],
        [int(r[1]) for r in cells],
        [float(r[2]) for r in cells],
        [r[0] for r in rows if r[2] is None],
        any(r[3] for r in rows),
    )


def cards_held(job: LowUtilJob) -> float:
    """The cards a job's shown verdict counts: its whole GPUs, and its MIG instances' shares
    (the verdict's ``mig`` evidence, ``cards``)."""
    held = float(job.gpus or 0)
    mig = job.verdict.evidence.get("mig")
    if isinstance(mig, dict) and isinstance(mig.get("instances"), list):
        held += float(mig.get("cards") or 0.0) - len(mig["instances"])
    return max(held, 0.0)


def _reporting(conn: sa.Connection, end: datetime, low_ratio: float) -> tuple[int, float]:
    """(cards with a rolled-up minute with utilization in the last :data:`REPORTING`, of those
    busy at their latest minute), counted in SQL for whole cards. Both sides of the join name
    the span, so the planner reads the span's minutes through the minute index instead of
    every GPU-minute kept. MIG instances and their cards (only on MIG nodes: few rows) are
    read row by row: an instance adds its card once to the count and its share to the busy
    ones, and such a card's own reading is taken out of the SQL count."""
    tier = tier_for(conn, end - REPORTING, end)
    g, at = tier.gpu.c, tier.time(tier.gpu)
    in_span = (*tier.within(tier.gpu, end - REPORTING, end), g.util_gpu_ratio_n > 0)
    latest = (
        sa.select(g.node_id, g.gpu_index, sa.func.max(at).label("at"))
        .where(*in_span)
        .group_by(g.node_id, g.gpu_index)
        .subquery()
    )
    util = g.util_gpu_ratio_sum / g.util_gpu_ratio_n
    same = (g.node_id == latest.c.node_id, g.gpu_index == latest.c.gpu_index, at == latest.c.at)
    at_latest = tier.gpu.join(latest, sa.and_(*same))
    gpu = sa.and_(gpus.c.node_id == g.node_id, gpus.c.gpu_index == g.gpu_index)
    count, busy = conn.execute(
        sa.select(sa.func.count(), sa.func.sum(sa.case((util > low_ratio, 1), else_=0)))
        .select_from(at_latest.outerjoin(gpus, gpu))
        .where(*in_span, gpus.c.parent_gpu_index.is_(None))
    ).one()
    reporting, busy_cards = int(count or 0), float(busy or 0)
    instances = conn.execute(
        sa.select(g.node_id, gpus.c.parent_gpu_index, gpus.c.card_fraction_ratio, util)
        .select_from(at_latest.join(gpus, gpu))
        .where(*in_span, gpus.c.parent_gpu_index.is_not(None))
    ).all()
    if not instances:
        return reporting, busy_cards
    split = {(nid, int(parent)) for nid, parent, _, _ in instances}
    reporting += len(split)
    busy_cards += sum(
        1.0 if f is None else float(f) for *_, f, u in instances if u is not None and u > low_ratio
    )
    inst = gpus.alias("inst")
    is_card = sa.exists().where(inst.c.node_id == g.node_id, inst.c.parent_gpu_index == g.gpu_index)
    for nid, index, u in conn.execute(
        sa.select(g.node_id, g.gpu_index, util)
        .select_from(at_latest.outerjoin(gpus, gpu))
        .where(*in_span, gpus.c.parent_gpu_index.is_(None), is_card)
    ):
        if (nid, int(index)) in split:  # the split card's own reading: counted through its instances
            reporting -= 1
            busy_cards -= 1.0 if u is not None and u > low_ratio else 0.0
    return reporting, busy_cards
