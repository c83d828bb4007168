"""Group commit: concurrent batches share transactions; one refused batch fails only itself."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from gpuwatch.daemon.store.batch_store import BatchStore, IngestStatus, count_rows
from gpuwatch.daemon.writer import IngestWriter
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.schema import ingested_batches
from tests import factories, refusals


def _node_ids(engine, n: int) -> list[int]:
    ids = []
    for i in range(n):
        create_token(engine, f"node{i:03d}")
        with engine.connect() as conn:
            ids.append(get_node(conn, f"node{i:03d}").id)
    return ids


def test_queued_batches_are_stored_in_groups(engine):
    ids = _node_ids(engine, 10)
    writer = IngestWriter(BatchStore(engine), max_group_batches=16)
    batches = [
        (ids[i % 10], factories.batch(node=f"node{i % 10:03d}", start=factories.T0, seq=i)) for i in range(40)
    ]
    # queued before the writer starts, so they are waiting together like concurrent requests
    futures = [writer.submit(node_id, b) for node_id, b in batches]
    duplicate = writer.submit(batches[0][0], batches[0][1])  # the same batch again, in the same rush
    writer.start()
    results = [f.result(timeout=30) for f in futures]
    writer.stop()
    assert all(r.status is IngestStatus.STORED for r in results)
    assert duplicate.result().status is IngestStatus.DUPLICATE
    assert writer.groups <= 4, "40 waiting batches in groups of up to 16"
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar() == 40
        # 10 nodes x 2 GPUs x 2 timestamps: the repeated timestamps per node are stored once
        assert count_rows(conn)["gpu_samples"] == 10 * 2 * 2


def test_one_refused_batch_fails_alone(engine):
    (node_id,) = _node_ids(engine, 1)
    writer = IngestWriter(BatchStore(engine))
    good = [writer.submit(node_id, factories.batch(start=factories.T0.replace(hour=h))) for h in (1, 2)]
    # a node id that does not exist: the database refuses it (foreign key), a real refusal
    bad = writer.submit(987654, factories.batch(start=factories.T0.replace(hour=3)))
    more = writer.submit(node_id, factories.batch(start=factories.T0.replace(hour=4)))
    writer.start()
    for f in (*good, more):
        assert f.result(timeout=30).status is IngestStatus.STORED
    refused = bad.result(timeout=30)
    assert refused.status is IngestStatus.REFUSED and refused.samples == 0
    assert "the database refused this batch" in refused.detail and "foreign key" in refused.detail.lower()
    writer.stop()
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar() == 3


def test_a_bundle_is_stored_in_one_group_and_fails_only_itself(engine):
    ids = _node_ids(engine, 2)
    # two threads and small groups: still, a bundle is never split between transactions
    writer = IngestWriter(BatchStore(engine), threads=2, max_group_batches=4)
    single = writer.submit(ids[0], factories.batch(node="node000", start=factories.T0, seq=0))
    bundle = [factories.batch(node="node001", start=factories.T0.replace(hour=h), seq=h) for h in (1, 2, 3)]
    good = writer.submit_many(ids[1], bundle)
    # the same shape for a node id that does not exist: the database refuses every batch of it
    bad = writer.submit_many(987654, [factories.batch(start=factories.T0.replace(hour=h)) for h in (4, 5)])
    writer.start()
    assert single.result(timeout=30).status is IngestStatus.STORED
    results = good.result(timeout=30)
    assert [r.status for r in results] == [IngestStatus.STORED] * 3
    assert [r.status for r in bad.result(timeout=30)] == [IngestStatus.REFUSED] * 2
    again = writer.submit_many(ids[1], bundle)
    assert [r.status for r in again.result(timeout=30)] == [IngestStatus.DUPLICATE] * 3
    writer.stop()
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar() == 4


def test_a_poison_batch_in_a_bundle_is_refused_and_the_rest_stored(engine):
    refusals.refuse_seq(engine, 666)
    (node_id,) = _node_ids(engine, 1)
    writer = IngestWriter(BatchStore(engine))
    bundle = [
        factories.batch(node="node000", start=factories.T0.replace(hour=h), seq=seq)
        for h, seq in ((1, 1), (2, 666), (3, 3))
    ]
    writer.start()
    results = writer.submit_many(node_id, bundle).result(timeout=30)
    assert [r.status for r in results] == [IngestStatus.STORED, IngestStatus.REFUSED, IngestStatus.STORED]
    assert "poison batch seq 666" in results[1].detail
    again = writer.submit_many(node_id, bundle).result(timeout=30)
    assert [r.status for r in again] == [IngestStatus.DUPLICATE, IngestStatus.REFUSED, IngestStatus.DUPLICATE]
    writer.stop()
    with engine.connect() as conn:
        assert sorted(conn.execute(sa.select(ingested_batches.c.seq)).scalars()) == [1, 3]


@pytest.mark.postgres
def test_an_integrity_error_that_passes_is_not_a_refusal(pg_url):
    """The first insert fails (as in a race between two daemons); the second try stores it."""
    engine = create_engine(pg_url)
    migrate.upgrade(engine)
    refusals.refuse_first_insert(engine)
    (node_id,) = _node_ids(engine, 1)
    writer = IngestWriter(BatchStore(engine))
    writer.start()
    result = writer.submit(node_id, factories.batch(node="node000", seq=7)).result(timeout=30)
    writer.stop()
    assert result.status is IngestStatus.STORED
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.nextval("refusals"))).scalar() == 3  # tried twice
    engine.dispose()


@pytest.mark.postgres
def test_a_partition_dropped_under_the_cache_is_made_again_not_a_refusal(pg_url):
    """Retention (or an admin) drops a day's partition after the writer cached it: PostgreSQL
    then finds no partition for the rows, an integrity error, and the retry makes it again."""
    engine = create_engine(pg_url)
    migrate.upgrade(engine)
    (node_id,) = _node_ids(engine, 1)
    start = factories.T0.replace(hour=3)
    writer = IngestWriter(BatchStore(engine))
    writer.start()
    first = writer.submit(node_id, factories.batch(node="node000", start=start, seq=1)).result(timeout=30)
    with engine.begin() as conn:
        conn.execute(sa.text(f"DROP TABLE gpu_sample_packs_p{start:%Y%m%d}"))
    again = writer.submit(node_id, factories.batch(node="node000", start=start, seq=2)).result(timeout=30)
    writer.stop()
    assert (first.status, again.status) == (IngestStatus.STORED, IngestStatus.STORED)
    with engine.connect() as conn:
        assert count_rows(conn)["gpu_samples"] == 2 * 2  # the second batch's, in the new partition
    engine.dispose()


def test_a_group_failing_for_an_outage_is_not_retried_batch_by_batch(tmp_path):
    """No server on the port: the group's one try fails, and every batch gets the error at
    once, instead of a connection attempt per batch (each up to the connect timeout)."""
    import socket

    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engine = create_engine(f"postgresql+psycopg://gpuwatch@127.0.0.1:{port}/gpuwatch")
    store = BatchStore(engine)
    calls: list[int] = []
    real_store_many = store.store_many

    def counting_store_many(items):  # the real method, counted
        calls.append(len(items))
        return real_store_many(items)

    store.store_many = counting_store_many  # type: ignore[method-assign]
    writer = IngestWriter(store)
    futures = [writer.submit(node_id, factories.batch(seq=node_id)) for node_id in (1, 2, 3)]
    writer.start()
    for future in futures:
        with pytest.raises(sa.exc.OperationalError):
            future.result(timeout=30)
    writer.stop()
    engine.dispose()
    assert calls == [3], "one try for the group, none per batch"


def test_what_counts_as_an_outage():
    import psycopg

    def wrapped(orig: Exception) -> sa.exc.DBAPIError:
        return sa.exc.OperationalError("INSERT ...", {}, orig)

    from gpuwatch.daemon.writer import is_outage

    assert is_outage(wrapped(psycopg.OperationalError("connection failed")))  # no SQLSTATE
    assert is_outage(wrapped(psycopg.errors.AdminShutdown("terminating connection")))  # 57P01
    assert is_outage(wrapped(psycopg.errors.DiskFull("could not extend file")))  # 53100
    assert not is_outage(wrapped(psycopg.errors.DeadlockDetected("deadlock detected")))  # 40P01
    assert not is_outage(sa.exc.IntegrityError("INSERT ...", {}, psycopg.errors.CheckViolation("x")))


def test_an_error_without_sqlstate_while_the_database_answers_is_the_batch_own(engine):
    """A store bug (here the one fuzzing found: SQLite failing an INSERT of no rows, 'near
    "ON": syntax error') raises an error without SQLSTATE, the kind an outage raises. The
    database still answers, so the batch is refused alone and its group is stored; before,
    it was answered 503 forever, and its node's newer batches waited behind it."""
    import sqlite3

    (node_id,) = _node_ids(engine, 1)
    store = BatchStore(engine)
    real_store_many = store.store_many

    def store_many_with_a_bug(items):
        if any(batch.seq == 13 for _, batch in items):
            raise sa.exc.OperationalError(
                "INSERT ...", {}, sqlite3.OperationalError('near "ON": syntax error')
            )
        return real_store_many(items)

    store.store_many = store_many_with_a_bug  # type: ignore[method-assign]
    writer = IngestWriter(store)
    bundle = [
        factories.batch(node="node000", start=factories.T0.replace(hour=h), seq=h) for h in (12, 13, 14)
    ]
    writer.start()
    results = writer.submit_many(node_id, bundle).result(timeout=30)
    alone = writer.submit(node_id, bundle[1]).result(timeout=30)
    writer.stop()
    assert [r.status for r in results] == [IngestStatus.STORED, IngestStatus.REFUSED, IngestStatus.STORED]
    assert 'near "ON": syntax error' in results[1].detail
    assert alone.status is IngestStatus.REFUSED
    with engine.connect() as conn:
        assert sorted(conn.execute(sa.select(ingested_batches.c.seq)).scalars()) == [12, 14]
