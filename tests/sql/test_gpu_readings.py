"""Raw GPU samples read through ``sql/gpu_readings.py``: bounds, one node, counts, the oldest."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql.gpu_readings import first_gpu_sample_at, gpu_samples_between, gpu_samples_per_node
from gpuwatch.sql.nodes import create_token, get_node
from tests import factories


def _nodes(engine, *names: str) -> dict[str, int]:
    for name in names:
        create_token(engine, name)
    with engine.connect() as conn:
        return {name: get_node(conn, name).id for name in names}


def test_reads_each_sample_once_within_bounds_and_of_one_node(engine):
    ids = _nodes(engine, "node001", "node002")
    store = BatchStore(engine)
    t0 = factories.T0
    store.store(ids["node001"], factories.batch("node001", cycles=6, gpus=2, start=t0))  # t0 .. t0+50 s
    store.store(
        ids["node002"], factories.batch("node002", cycles=3, gpus=1, start=t0 + timedelta(seconds=20))
    )
    with engine.connect() as conn:
        assert first_gpu_sample_at(conn) == t0

        everything = gpu_samples_between()
        assert conn.execute(sa.select(sa.func.count()).select_from(everything)).scalar() == 6 * 2 + 3

        # [t0+10 s, t0+40 s): cycles 1..3 of node001 (2 GPUs), cycles 0..1 of node002
        window = gpu_samples_between(t0 + timedelta(seconds=10), t0 + timedelta(seconds=40))
        rows = conn.execute(sa.select(window.c.node_id, window.c.gpu_index, window.c.ts)).all()
        assert len(rows) == 3 * 2 + 2
        assert min(r.ts for r in rows) == t0 + timedelta(seconds=10)
        assert max(r.ts for r in rows) == t0 + timedelta(seconds=30), "the end is exclusive"
        assert len(set(rows)) == len(rows), "each (node, GPU, stamp) once"

        one = gpu_samples_between(node_id=ids["node002"])
        utils = conn.execute(sa.select(one.c.node_id, one.c.util_gpu_ratio)).all()
        assert {node for node, _ in utils} == {ids["node002"]}
        assert [round(u, 6) for _, u in utils] == [0.1] * 3, "metrics under their column names"

        since = t0 + timedelta(seconds=30)
        assert gpu_samples_per_node(conn, since) == {ids["node001"]: 3 * 2, ids["node002"]: 2}
        assert gpu_samples_per_node(conn, t0 + timedelta(hours=1)) == {}


def test_an_empty_store_has_no_oldest_sample(engine):
    with engine.connect() as conn:
        assert first_gpu_sample_at(conn) is None
        assert conn.execute(sa.select(sa.func.count()).select_from(gpu_samples_between())).scalar() == 0
