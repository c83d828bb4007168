"""The overview's heat-map cells are the node-minutes read row by row, on both databases.

PostgreSQL hands them over as arrays (``views/overview._node_cells``) and SQLite row by row;
either way ``cluster_overview`` must give the cells, rows and simulated flag that the plain
per-row read of ``node_minutes`` gives. The rows here cover what that read skips or keeps:
minutes before and at the span's ends, a node-minute with no GPU reading (``n = 0``), one
whose sum is missing, a node whose every minute misses it (a row with no cell), a node with
no minute in the span (no row), a simulated node, and utilizations off the 0..1 range as stored.
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch.sql.schema import node_minutes, nodes
from gpuwatch.views import cluster_overview

NOW = datetime(2026, 12, 6, 12, 0, 30, tzinfo=timezone.utc)
END = NOW.replace(second=0)
START = END - timedelta(minutes=60)


def _fill(engine: sa.Engine) -> None:
    rng = random.Random(21)
    names = ["n10", "n02", "sim1", "quiet", "n03", "blank"]  # ids in this order: rows sort by name
    rows = []
    for node_id, name in enumerate(names, start=1):
        if name == "quiet":  # only minutes outside the span
            minutes = [START - timedelta(minutes=1), END]
        else:
            minutes = [START + timedelta(minutes=k) for k in range(-3, 63) if rng.random() < 0.8]
        for minute in minutes:
            n = 8 if name == "blank" else rng.choice([0, 1, 4, 8])
            total = None if name == "blank" or rng.random() < 0.05 else rng.uniform(-0.1, 1.1) * n
            rows.append(
                {
                    "node_id": node_id,
                    "minute": minute,
                    "gpu_util_ratio_sum": total,
                    "gpu_util_ratio_n": n,
                    "gpus_reporting": n,
                    "gpu_simulated": name == "sim1",
                }
            )
    with engine.begin() as conn:
        conn.execute(
            nodes.insert(), [{"id": i, "name": name, "created_at": NOW} for i, name in enumerate(names, 1)]
        )
        conn.execute(node_minutes.insert(), rows)


def _per_row(engine: sa.Engine) -> tuple[list[str], dict[tuple[int, int], float], bool]:
    """(rows, cells, simulated) as the straightforward read: a result row per node-minute."""
    n = node_minutes.c
    with engine.connect() as conn:
        read = conn.execute(
            sa.select(nodes.c.name, n.minute, n.gpu_util_ratio_sum, n.gpu_util_ratio_n, n.gpu_simulated)
            .join(nodes, nodes.c.id == n.node_id)
            .where(n.minute >= START, n.minute < END, n.gpu_util_ratio_n > 0)
        ).all()
    names = sorted({r.name for r in read})
    cells = {
        (names.index(r.name), round((r.minute - START) / timedelta(minutes=1))): r.gpu_util_ratio_sum
        / r.gpu_util_ratio_n
        for r in read
        if r.gpu_util_ratio_sum is not None
    }
    return names, cells, any(r.gpu_simulated for r in read)


def test_the_cells_are_the_per_row_read(engine) -> None:
    _fill(engine)
    rows, cells, simulated = _per_row(engine)
    assert rows == ["blank", "n02", "n03", "n10", "sim1"] and simulated  # "quiet": no minute in the span
    assert len(cells) > 100 and {m for _, m in cells} <= set(range(60))
    ov = cluster_overview(engine, NOW)
    assert (ov.rows, ov.simulated, ov.start, ov.minutes) == (rows, simulated, START, 60)
    assert ov.cells == cells  # exactly: a sum over a count divides to the same double in SQL
    assert all(type(k[1]) is int and type(v) is float for k, v in ov.cells.items())


def test_no_cells_in_the_span(engine) -> None:
    ov = cluster_overview(engine, NOW)
    assert (ov.rows, ov.cells, ov.simulated) == ([], {}, False)
