"""Raw GPU samples, read: the one module that knows how they lie on disk.

Every reader of raw GPU samples — the rollup pass (``sql/rollups.py``), the node list's counts
(``views/nodes.py``) — asks here, never the table itself, so the storage layout (a row per node,
GPU and stamp in ``gpu_samples``) changes in one place. The writer is the daemon's store
(``daemon/store/batch_store.py``).

:func:`gpu_samples_between` is a selectable with one row per (node, GPU, stamp) and a column per
metric, named as in ``gpu_samples``; callers filter, join and aggregate it in SQL as they would
the table.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from gpuwatch.sql.schema import gpu_samples


def gpu_samples_between(
    start: datetime | None = None,
    end: datetime | None = None,
    *,
    node_id: int | None = None,
) -> sa.Subquery:
    """The GPU samples with ``start <= ts < end`` (either bound left out: unbounded), of one node
    or all, as a subquery with ``gpu_samples``' columns."""
    g = gpu_samples.c
    query = sa.select(gpu_samples)
    if start is not None:
        query = query.where(g.ts >= start)
    if end is not None:
        query = query.where(g.ts < end)
    if node_id is not None:
        query = query.where(g.node_id == node_id)
    return query.subquery("gpu_readings")


def first_gpu_sample_at(conn: sa.Connection) -> datetime | None:
    """The oldest stored GPU sample's stamp; None when there is none."""
    return conn.execute(sa.select(sa.func.min(gpu_samples.c.ts))).scalar()


def gpu_samples_per_node(conn: sa.Connection, since: datetime) -> dict[int, int]:
    """Node id -> how many GPU samples it has with ``ts >= since`` (nodes with none left out)."""
    g = gpu_samples.c
    query = sa.select(g.node_id, sa.func.count()).where(g.ts >= since).group_by(g.node_id)
    return {node_id: int(n) for node_id, n in conn.execute(query)}
