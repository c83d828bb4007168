"""Per-process GPU readings stored packed (a row per node, batch or group, and day) read back as sent."""

from __future__ import annotations

import uuid
from datetime import timedelta

import sqlalchemy as sa

from gpuwatch import wire
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.process_packs import (
    ProcessReading,
    count_processes,
    read_processes,
    summarize_processes,
    summarize_readings,
)
from gpuwatch.sql.schema import gpu_process_packs
from tests import factories

NOON = factories.T0 + timedelta(hours=12, seconds=10)  # far from midnight: one pack per batch
DAY = timedelta(days=1)


def _node(engine: sa.Engine, name: str) -> int:
    create_token(engine, name)
    with engine.connect() as conn:
        return get_node(conn, name).id


def _two_processes(batch: wire.Batch) -> wire.Batch:
    """Each GPU sample with a second process, no job and nothing but its pid known."""
    samples = [
        s.model_copy(update={"processes": [*s.processes, wire.GpuProcess(pid=7000 + s.gpu_index)]})
        if isinstance(s, wire.GpuSample)
        else s
        for s in batch.samples
    ]
    return batch.model_copy(update={"samples": samples})


def _expected(node_id: int, *batches: wire.Batch) -> list[ProcessReading]:
    readings = {
        (s.ts, s.gpu_index, p.pid): ProcessReading(
            node_id,
            s.ts,
            s.gpu_index,
            p.pid,
            p.used_memory_bytes,
            p.sm_util_ratio,
            p.memory_util_ratio,
            p.job_id,
        )
        for b in batches
        for s in b.samples
        if isinstance(s, wire.GpuSample)
        for p in s.processes or ()
    }
    return [readings[k] for k in sorted(readings)]


def test_readings_come_back_once_per_process_and_stamp(engine):
    a, b = _node(engine, "node001"), _node(engine, "node002")
    store = BatchStore(engine)
    first = _two_processes(factories.batch(start=NOON, cycles=3, gpus=2))
    # the same node's next batch overlaps the last cycle of the first one (a spool copy
    # re-batched): its pack starts at another stamp, so both packs are kept
    overlap = _two_processes(factories.batch(start=NOON + timedelta(seconds=20), cycles=3, gpus=2))
    other = factories.batch(node="node002", start=NOON, cycles=1, gpus=1)
    for node_id, batch in ((a, first), (a, overlap), (b, other)):
        store.store(node_id, batch)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(gpu_process_packs)).scalar_one() == 3
        assert count_processes(conn) == 3 * 2 * 2 + 3 * 2 * 2 + 1
        got = read_processes(conn, NOON - DAY, NOON + DAY, node_id=a)
        assert got == _expected(a, first, overlap)
        assert len(got) == 5 * 2 * 2, "the shared cycle once"
        assert any(r.job_id is None and r.used_memory_bytes is None for r in got), "absent stays absent"
        # the range is of stamps, not packs: half-open, inside a pack
        window = read_processes(conn, NOON + timedelta(seconds=10), NOON + timedelta(seconds=30), node_id=a)
        assert {r.ts for r in window} == {NOON + timedelta(seconds=10), NOON + timedelta(seconds=20)}
        everyone = read_processes(conn, NOON - DAY, NOON + DAY)
        assert [r for r in everyone if r.node_id == b] == _expected(b, other)


def test_a_batch_sent_again_under_a_new_id_adds_no_pack(engine):
    node_id = _node(engine, "node001")
    store = BatchStore(engine)
    batch = factories.batch(start=NOON, cycles=2, gpus=2)
    store.store(node_id, batch)
    store.store(node_id, batch.model_copy(update={"batch_id": uuid.uuid4()}))
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(gpu_process_packs)).scalar_one() == 1
        assert read_processes(conn, NOON - DAY, NOON + DAY) == _expected(node_id, batch)


def test_the_migration_packs_existing_rows_and_unpacks_them_on_downgrade(db_url):
    engine = create_engine(db_url)
    migrate.upgrade(engine, "0005")
    node_id = _node(engine, "node001")
    old = sa.table(
        "gpu_process_samples",
        *(sa.column(c) for c in ("node_id", "gpu_index", "pid", "ts", "used_memory_bytes", "sm_util_ratio")),
        sa.column("memory_util_ratio"),
        sa.column("job_id"),
    )
    stamps = [NOON, NOON + timedelta(seconds=10), NOON + DAY]  # two days
    rows = [
        {
            "node_id": node_id,
            "gpu_index": gpu,
            "pid": 100 + gpu,
            # the raw table, written as the 0005 daemon wrote it (SQLite: naive UTC text)
            "ts": t
            if engine.dialect.name == "postgresql"
            else t.replace(tzinfo=None).isoformat(" ", "microseconds"),
            "used_memory_bytes": None if gpu else 2**34,
            "sm_util_ratio": 0.25 * gpu,
            "memory_util_ratio": None,
            "job_id": "42" if gpu else None,
        }
        for t in stamps
        for gpu in (1, 0)
    ]
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            for t in stamps:  # the daemon made partitions; here, by hand
                day = t.date()
                conn.execute(
                    sa.text(
                        f'CREATE TABLE IF NOT EXISTS "gpu_process_samples_p{day:%Y%m%d}" PARTITION OF '
                        f"gpu_process_samples FOR VALUES FROM ('{day}') TO ('{day + DAY}')"
                    )
                )
        conn.execute(old.insert(), rows)
    migrate.upgrade(engine)
    expected = [
        ProcessReading(
            node_id, t, gpu, 100 + gpu, None if gpu else 2**34, 0.25 * gpu, None, "42" if gpu else None
        )
        for t in stamps
        for gpu in (0, 1)
    ]
    with engine.connect() as conn:
        assert read_processes(conn, NOON - DAY, NOON + 2 * DAY) == expected
        assert conn.execute(sa.select(sa.func.count()).select_from(gpu_process_packs)).scalar_one() == 3
    migrate.downgrade(engine, "0005")
    with engine.connect() as conn:
        back = conn.execute(sa.select(old).order_by(old.c.ts, old.c.gpu_index)).all()
    assert len(back) == len(rows)
    assert [(r.gpu_index, r.pid, r.used_memory_bytes, r.sm_util_ratio, r.job_id) for r in back] == [
        (e.gpu_index, e.pid, e.used_memory_bytes, e.sm_util_ratio, e.job_id) for e in expected
    ]
    engine.dispose()


def test_a_group_too_big_for_one_statement_is_stored_whole(pg_url, monkeypatch):
    """PostgreSQL takes at most 65,535 parameters per statement and a pack costs 10; over the
    limit psycopg fails without a SQLSTATE, which the writer would take for an outage (503
    forever). A group's packs therefore go ``ROWS_PER_INSERT`` per INSERT, and the store splits
    a group's statements at the limit, in one transaction. Both limits are lowered here so
    that a small group (40 nodes: 40 packs) needs several statements."""
    from gpuwatch.daemon.store import batch_store, packing

    monkeypatch.setattr(packing, "ROWS_PER_INSERT", 3)
    monkeypatch.setattr(batch_store, "MAX_STATEMENT_PARAMETERS", 200)
    engine = create_engine(pg_url)
    migrate.upgrade(engine)
    node_ids = [_node(engine, f"node{i:03d}") for i in range(40)]
    batches = [
        (
            node_id,
            wire.Batch(
                node=f"node{i:03d}",
                agent_version="t",
                samples=[factories.gpu_sample(NOON, 0, processes=[wire.GpuProcess(pid=i + 1)])],
            ),
        )
        for i, node_id in enumerate(node_ids)
    ]
    statements = list(
        batch_store._by_parameter_limit(
            list(BatchStore._unnest_statements([(n, batch_store._columns(b)) for n, b in batches]))
        )
    )
    assert len(statements) > 1  # the limit splits this group
    store = BatchStore(engine)
    results = store.store_many(batches)
    assert {r.status.value for r in results} == {"stored"}
    # the same readings again under new ids: the ON CONFLICT pass runs in several statements too
    again = [(n, b.model_copy(update={"batch_id": uuid.uuid4()})) for n, b in batches[:10]]
    store.store_many(again)
    assert store.conflict_retries == 1
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(gpu_process_packs)).scalar_one() == 40
        assert count_processes(conn) == 40
    engine.dispose()


def test_a_bundle_of_one_node_is_one_pack_per_day(pg_url):
    """PostgreSQL: the packs of one node and UTC day in a group are one row; every reading
    is still read back once, in order."""
    engine = create_engine(pg_url)
    migrate.upgrade(engine)
    node_id = _node(engine, "node001")
    bundle = [
        factories.batch(cycles=1, gpus=2, start=factories.T0 + timedelta(seconds=10 * i)) for i in range(4)
    ]
    BatchStore(engine).store_many([(node_id, b) for b in bundle])  # stamps 23:59:50, then the next day
    with engine.connect() as conn:
        packs = conn.execute(sa.select(gpu_process_packs).order_by(gpu_process_packs.c.ts)).all()
        readings = read_processes(conn, factories.T0, factories.T0 + DAY, node_id)
    assert [len(p.pid) for p in packs] == [2, 6]  # one day's pack, then the next day's three cycles
    assert [(r.ts, r.gpu_index) for r in readings] == [
        (s.ts, s.gpu_index) for b in bundle for s in b.samples if s.kind == "gpu"
    ]
    engine.dispose()


def test_summaries_in_sql_match_the_readings(engine):
    """PostgreSQL sums up in SQL (unnest, GROUP BY); it must say what the readings say,
    overlapping packs and the GPU filter included. On SQLite both are the Python path."""
    node_id = _node(engine, "node001")
    store = BatchStore(engine)
    first = _two_processes(factories.batch(start=NOON, cycles=3, gpus=2))
    overlap = _two_processes(factories.batch(start=NOON + timedelta(seconds=20), cycles=3, gpus=2))
    for batch in (first, overlap):
        store.store(node_id, batch)
    with engine.connect() as conn:
        readings = read_processes(conn, NOON - DAY, NOON + DAY, node_id)
        for gpu in (None, 1):
            got = summarize_processes(conn, NOON - DAY, NOON + DAY, node_id, gpu)
            assert got == summarize_readings(readings, gpu)
        everything = summarize_processes(conn, NOON - DAY, NOON + DAY, node_id)
        window = summarize_processes(
            conn, NOON + timedelta(seconds=10), NOON + timedelta(seconds=30), node_id, 0
        )
    assert [(x.gpu_index, x.pid, x.readings) for x in everything] == [
        (0, 4242, 5),
        (0, 7000, 5),
        (1, 4243, 5),
        (1, 7001, 5),
    ], "five cycles each: the one both packs hold counted once"
    assert everything[0].max_used_memory_bytes == 39 * 2**30 and everything[1].max_used_memory_bytes is None
    assert [(x.pid, x.readings, x.first_ts) for x in window] == [
        (4242, 2, NOON + timedelta(seconds=10)),
        (7000, 2, NOON + timedelta(seconds=10)),
    ]
