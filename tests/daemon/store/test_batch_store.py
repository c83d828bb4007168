"""BatchStore on both databases: values round-trip, batches and samples are stored once."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from gpuwatch.daemon.store.batch_store import BatchStore, IngestStatus, count_rows
from gpuwatch.sql.gpu_readings import count_gpu_samples, gpu_samples_per_node, read_gpu_samples
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.partitions import list_partitions
from gpuwatch.sql.process_packs import read_processes
from gpuwatch.sql.readings import read_samples
from gpuwatch.sql.schema import (
    HOST_SAMPLES,
    PACK_TABLES,
    gpu_process_packs,
    gpu_sample_packs,
    gpus,
    ingested_batches,
    nodes,
)
from gpuwatch.wire import v2 as wire_v2
from tests import factories


def _stored_once(conn) -> int:
    """How many GPU readings are stored, after checking that the packs hold none twice."""
    elements = sum(
        len(indices) for indices in conn.execute(sa.select(gpu_sample_packs.c.gpu_index)).scalars()
    )
    assert elements == count_gpu_samples(conn), "a GPU reading stored twice"
    return elements


def _node_id(engine, name="node001") -> int:
    create_token(engine, name)
    with engine.connect() as conn:
        return get_node(conn, name).id


def test_values_round_trip(engine):
    node_id = _node_id(engine)
    batch = factories.batch(cycles=2, gpus=2)
    result = BatchStore(engine).store(node_id, batch)
    assert result.status is IngestStatus.STORED
    assert result.samples == len(batch.samples)
    with engine.connect() as conn:
        rows = sorted(read_gpu_samples(conn), key=lambda r: (r.ts, r.gpu_index))
        assert len(rows) == 4
        sent = [s for s in batch.samples if s.kind == "gpu"]
        for row, sample in zip(rows, sorted(sent, key=lambda s: (s.ts, s.gpu_index)), strict=True):
            assert row.ts == sample.ts and row.ts.tzinfo is not None
            assert row.node_id == node_id
            assert row.util_gpu_ratio == sample.util_gpu_ratio
            assert row.memory_total_bytes == 141 * 2**30
            assert row.power_watts == 350.5
            assert row.throttle_reasons == ["sw_power_cap"]
            assert row.tensor_active_ratio == 0.0  # a zero stays a zero ...
            assert row.sm_occupancy_ratio is None  # ... and "not supported" stays absent
            assert row.simulated is True
        ident = conn.execute(sa.select(gpus).order_by(gpus.c.gpu_index)).all()
        assert [g.name for g in ident] == ["NVIDIA H200", "NVIDIA H200"]
        assert ident[1].pci_bus_id == "00000000:19:00.0"
        procs = read_processes(conn, factories.T0, factories.T0 + timedelta(days=1), node_id)
        assert [(p.ts, p.gpu_index, p.pid, p.job_id) for p in procs] == [
            (s.ts, s.gpu_index, p.pid, p.job_id) for s in sent for p in s.processes
        ]
        assert {(p.gpu_index, p.pid, p.job_id) for p in procs} == {(0, 4242, "123"), (1, 4243, "123")}
        packs = conn.execute(sa.select(gpu_process_packs).order_by(gpu_process_packs.c.ts)).all()
        # T0 is ten seconds before midnight: the batch's two cycles fall on two UTC days
        assert [(p.ts, p.ts_last, p.ts.date()) for p in packs] == [
            (t, t, t.date()) for t in sorted({s.ts for s in sent})
        ], "one pack per UTC day of the batch"
        job = read_samples(conn, "job")[0]
        assert job.cpu_used_cores == 3.5 and job.cgroup_version == 2
        counts = count_rows(conn)
        assert counts["cpu_samples"] == counts["nic_samples"] == counts["agent_samples"] == 2
        node = conn.execute(sa.select(nodes).where(nodes.c.id == node_id)).first()
        assert node.agent_version == "test" and node.last_seen_at is not None


def test_group_commit_marks_each_node_with_its_own_batch(engine):
    """One group, several nodes: each node row gets its last batch's version and sequence."""
    ids = {name: _node_id(engine, name) for name in ("node001", "node002", "node003")}
    items = [
        (
            ids[name],
            factories.batch(node=name, seq=seq, start=factories.T0 + timedelta(minutes=seq)).model_copy(
                update={"agent_version": version}
            ),
        )
        for seq, (name, version) in enumerate(
            [("node002", "a"), ("node001", "b"), ("node003", "c"), ("node002", "d")], start=1
        )
    ]
    results = BatchStore(engine).store_many(items)
    assert [r.status for r in results] == [IngestStatus.STORED] * 4
    with engine.connect() as conn:
        rows = {r.name: r for r in conn.execute(sa.select(nodes))}
    assert {n: (r.agent_version, r.last_seq) for n, r in rows.items()} == {
        "node001": ("b", 2),
        "node002": ("d", 4),  # its later batch in the group
        "node003": ("c", 3),
    }
    assert all(r.last_seen_at is not None for r in rows.values())


def test_same_samples_twice_in_one_group_are_stored_once(engine):
    """A restored spool copy can re-send samples under a new batch id in the same group as the
    original: both batches are stored (neither is a duplicate id), their samples once, and
    the rest of the group is not lost to the conflict."""
    node_id = _node_id(engine)
    other = _node_id(engine, "node002")
    first = factories.batch(cycles=3)
    copy = first.model_copy(
        update={"batch_id": factories.wire.Batch(node="x", agent_version="t", samples=[]).batch_id}
    )
    unrelated = factories.batch(node="node002", cycles=3)
    results = BatchStore(engine).store_many([(node_id, first), (node_id, copy), (other, unrelated)])
    assert [r.status for r in results] == [IngestStatus.STORED] * 3
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar() == 3
        per_node = gpu_samples_per_node(conn, None)
        _stored_once(conn)
    assert per_node == {node_id: 3 * 2, other: 3 * 2}


def test_same_batch_twice_in_one_group_is_stored_once(engine):
    node_id = _node_id(engine)
    batch = factories.batch(cycles=2)
    results = BatchStore(engine).store_many([(node_id, batch), (node_id, batch)])
    assert [r.status for r in results] == [IngestStatus.STORED, IngestStatus.DUPLICATE]
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar() == 1
        assert _stored_once(conn) == 2 * 2


def test_resent_batch_is_stored_once(engine):
    node_id = _node_id(engine)
    store = BatchStore(engine)
    batch = factories.batch()
    assert store.store(node_id, batch).status is IngestStatus.STORED
    again = store.store(node_id, batch)
    assert again.status is IngestStatus.DUPLICATE and again.samples == 0
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar() == 1
        assert _stored_once(conn) == 4


def test_same_samples_in_a_new_batch_are_not_duplicated(engine):
    """An agent restored from an old copy of its spool re-sends samples under new batch ids."""
    node_id = _node_id(engine)
    store = BatchStore(engine)
    first = factories.batch()
    copy = first.model_copy(
        update={"batch_id": factories.wire.Batch(node="x", agent_version="t", samples=[]).batch_id}
    )
    assert store.store(node_id, first).status is IngestStatus.STORED
    assert store.store(node_id, copy).status is IngestStatus.STORED
    with engine.connect() as conn:
        assert _stored_once(conn) == 4


def test_partitions_made_for_every_day_in_a_batch(engine):
    if engine.dialect.name != "postgresql":
        return
    node_id = _node_id(engine)
    store = BatchStore(engine)
    old = factories.batch(start=factories.T0 - timedelta(days=40))
    store.store(node_id, old)
    store.store(node_id, factories.batch(start=factories.T0))  # 23:59:50 + 10 s crosses midnight
    with engine.connect() as conn:
        names = list_partitions(conn, "gpu_sample_packs")
        assert {f"gpu_sample_packs_p{day}" for day in ("20261022", "20261201", "20261202")} <= set(names)
        # packs landed in the partition of their day
        day2 = conn.execute(
            sa.text("SELECT sum(cardinality(gpu_index)) FROM gpu_sample_packs_p20261202")
        ).scalar()
        assert day2 == 2


def _odd_samples(ts) -> list:
    """Samples with what a generic column reader could get wrong: NULL-only columns, JSON
    lists and objects, a lost GPU, a process with nothing but a pid."""
    return [
        factories.wire.GpuSample(ts=ts, gpu_index=11, state="lost"),
        factories.gpu_sample(
            ts,
            10,
            xid_errors=[79, 13],
            processes=[factories.wire.GpuProcess(pid=1), factories.wire.GpuProcess(pid=2)],
        ),
        factories.wire.AttributionSample(ts=ts, gpu_index=10, job_id="9.0", source="process", pids=[1, 2]),
        factories.wire.AgentSample(
            ts=ts, collector_errors={"nvml": "NVMLError_GpuIsLost"}, dropped_batches_total=3
        ),
        factories.wire.JobSample(ts=ts, job_id="9.0"),
    ]


def _all_rows(conn, start, end) -> dict[str, list[dict]]:
    out = {}
    for table in PACK_TABLES:
        query = (
            sa.select(table).where(table.c.ts >= start, table.c.ts < end).order_by(*table.primary_key.columns)
        )
        out[table.name] = [_relative(r._asdict(), start) for r in conn.execute(query)]
    return out


def _relative(row: dict, start) -> dict:
    """A row without its absolute time: stamps (every kind's ``sample_ts``) as offsets from ``start``."""
    out = {k: v for k, v in row.items() if k not in ("ts", "ts_last")}
    for name in [k for k in row if k.endswith("sample_ts")]:
        out[name] = [t - start for t in row[name]]
    if "ts_last" in row:
        out["span"] = (row["ts"] - start, row["ts_last"] - start)
    return out


def test_unnest_and_insert_store_the_same_rows(pg_engine):
    """The PostgreSQL fast path (pack INSERTs, one statement per group) stores exactly what the
    portable executemany path stores, in every table and column, and stores a sample sent twice
    once either way."""
    engine = pg_engine
    node_id = _node_id(engine)
    assert BatchStore(engine).bulk.value == "unnest"  # the default on PostgreSQL
    shift = timedelta(days=3)
    big = factories.batch(cycles=40, gpus=8)
    big = big.model_copy(update={"samples": [*big.samples, *_odd_samples(factories.T0 + timedelta(hours=1))]})
    shifted = big.model_copy(
        update={
            "batch_id": factories.wire.Batch(node="x", agent_version="t", samples=[]).batch_id,
            "samples": [s.model_copy(update={"ts": s.ts + shift}) for s in big.samples],
        }
    )
    fast_store = BatchStore(engine, bulk="unnest")
    fast_store.store(node_id, big)
    assert fast_store.conflict_retries == 0  # nothing stored twice: no second try
    BatchStore(engine, bulk="insert").store(node_id, shifted)
    with engine.connect() as conn:
        day = timedelta(days=1)
        fast = _all_rows(conn, factories.T0, factories.T0 + day)
        portable = _all_rows(conn, factories.T0 + shift, factories.T0 + shift + day)
    assert fast == portable
    assert sum(len(pack["gpu_index"]) for pack in fast["gpu_sample_packs"]) == 40 * 8 + 2
    # one batch over two UTC days (T0 is just before midnight): a pack per day, every reading in one
    assert len(fast["gpu_process_packs"]) == 2
    assert sum(len(pack["pid"]) for pack in fast["gpu_process_packs"]) == 40 * 8 + 2
    assert all(fast[name] for name in fast), "every table got rows"
    with engine.connect() as conn:
        readings = read_gpu_samples(conn, factories.T0, factories.T0 + timedelta(days=1))
    lost = next(r for r in readings if r.gpu_index == 11)
    assert lost.state == "lost" and lost.util_gpu_ratio is None and lost.throttle_reasons is None
    assert next(r for r in readings if r.gpu_index == 10 and r.xid_errors).xid_errors == [79, 13]
    assert [e for pack in fast["host_sample_packs"] for e in pack["agent_collector_errors"] if e] == [
        {"nvml": "NVMLError_GpuIsLost"}
    ]
    # idempotent per sample: the same samples again under a new batch id add nothing
    again = big.model_copy(
        update={"batch_id": factories.wire.Batch(node="x", agent_version="t", samples=[]).batch_id}
    )
    store = BatchStore(engine)
    store.store(node_id, again)
    assert store.conflict_retries == 1  # the optimistic insert met them and went again
    with engine.connect() as conn:
        assert _stored_once(conn) == 2 * (40 * 8 + 2)
    # half old, half new: only the new half is added, and the other tables of the batch too
    overlap = factories.batch(cycles=80, gpus=8)
    assert store.store(node_id, overlap).status is IngestStatus.STORED
    assert store.conflict_retries == 2
    with engine.connect() as conn:
        assert _stored_once(conn) == 2 * (40 * 8 + 2) + 40 * 8
        assert count_rows(conn)["cpu_samples"] == 40 + 40 + 40  # big, shifted, the new half of overlap
        day0 = read_gpu_samples(conn, None, factories.T0 + timedelta(days=1))
        assert len(day0) == 80 * 8 + 2  # 80 cycles x 8 GPUs + the odd two, each once


def test_a_statement_failing_at_the_pipeline_sync_is_a_sqlalchemy_error_and_rolls_back(engine):
    """On PostgreSQL the small tables' INSERTs are pipelined and a failure surfaces at the sync,
    outside SQLAlchemy's execute: it must still arrive as SQLAlchemy's exception (the ingest maps
    OperationalError to 503) and leave nothing of the transaction behind."""
    import uuid

    from gpuwatch.daemon.store.batch_store import _pipelined

    node_id = _node_id(engine)
    claim = {"node_id": node_id, "seq": 0, "received_at": factories.T0, "samples": 0}
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn, _pipelined(conn):
        conn.execute(ingested_batches.insert(), [{**claim, "batch_id": first}])
        twice = [{**claim, "batch_id": second}, {**claim, "batch_id": second}]
        conn.execute(ingested_batches.insert(), twice)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar() == 0


def test_sample_in_another_zone_is_filed_under_its_utc_day(engine):
    """01:30 at +02:00 on day D is 23:30 UTC on day D-1: it lands in D-1's partition."""
    node_id = _node_id(engine)
    local = timezone(timedelta(hours=2))
    ts = datetime(2026, 11, 20, 1, 30, tzinfo=local)
    # through JSON, as from a sender whose clock library writes local time with an offset
    batch = factories.wire.Batch.model_validate_json(
        factories.batch(cycles=1, gpus=1, start=ts).model_dump_json()
    )
    assert batch.samples[0].ts.utcoffset() == timedelta(hours=2)
    assert BatchStore(engine).store(node_id, batch).status is IngestStatus.STORED
    with engine.connect() as conn:
        (stored,) = [r.ts for r in read_gpu_samples(conn)]
    assert stored == ts and stored.astimezone(timezone.utc).day == 19


def test_unnest_refuses_a_string_longer_than_its_column(pg_engine):
    """The HTTP path validates lengths first; a direct caller with an unvalidated model gets an
    error, never a silently truncated value."""
    node_id = _node_id(pg_engine)
    cycle = factories.host_samples(factories.T0)
    nic = next(s for s in cycle if s.kind == "nic")
    too_long = nic.model_construct(**{**vars(nic), "device": "x" * 65})  # the column is VARCHAR(64)
    batch = factories.wire.Batch.model_construct(**{**vars(factories.batch(cycles=0)), "samples": [too_long]})
    with pytest.raises(sa.exc.DataError, match="too long"):
        BatchStore(pg_engine).store(node_id, batch)
    with pg_engine.connect() as conn:
        assert count_rows(conn)["nic_samples"] == 0
        assert conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar() == 0


def test_unnest_statements_are_numbered_once_for_a_raw_cursor():
    from gpuwatch.daemon.store.batch_store import _numbered

    assert (
        _numbered("SELECT * FROM unnest(%b::INT8[], %b::TEXT[])")
        == "SELECT * FROM unnest($1::INT8[], $2::TEXT[])"
    )
    assert _numbered("SAVEPOINT x") == "SAVEPOINT x"
    with pytest.raises(ValueError, match="only %b"):
        _numbered("SELECT %s, %b")  # anything else would reach PostgreSQL as it stands


def _with_new_id(batch):
    return batch.model_copy(
        update={"batch_id": factories.wire.Batch(node="x", agent_version="t", samples=[]).batch_id}
    )


@pytest.mark.parametrize("bulk", [None, "insert"])
def test_stored_count_is_the_samples_that_went_in(engine, bulk):
    """The answer's ``samples`` is what the database added, not what the batch held: a GPU
    sample repeated in a batch, a copy of stored samples under a new id, a half-new batch."""
    if bulk == "insert" and engine.dialect.name != "postgresql":
        pytest.skip("SQLite only has the insert path, run as the default")
    node_id = _node_id(engine)
    store = BatchStore(engine, bulk=bulk)
    first = factories.batch(cycles=3)  # 3 x (2 GPUs + host samples)
    repeated = first.model_copy(update={"samples": [*first.samples, first.samples[0]]})
    result = store.store(node_id, repeated)
    assert result.status is IngestStatus.STORED
    assert result.samples == len(first.samples)  # the repeat is not counted
    assert store.conflict_retries == 1
    clean = store.store(node_id, factories.batch(cycles=1, start=factories.T0 - timedelta(hours=1)))
    assert store.conflict_retries == 1  # a batch with nothing stored before goes in at the first try
    assert clean.samples == len(factories.batch(cycles=1).samples)
    copy = store.store(node_id, _with_new_id(first))
    assert (copy.status, copy.samples) == (IngestStatus.STORED, 0)
    half_new = factories.batch(cycles=6)
    assert store.store(node_id, half_new).samples == len(half_new.samples) - len(first.samples)
    with engine.connect() as conn:
        counts = count_rows(conn, [k.table for k in HOST_SAMPLES])
        stored = sum(counts[k.readings] for k in HOST_SAMPLES) + _stored_once(conn)
        assert stored == len(half_new.samples) + clean.samples


def test_stored_counts_are_per_batch_in_a_group(engine):
    """In a group the counts stay each batch's own: the original is credited, its copy not,
    a batch of another node in the same group keeps its full count."""
    node_id, other = _node_id(engine), _node_id(engine, "node002")
    first = factories.batch(cycles=2)
    unrelated = factories.batch(node="node002", cycles=4)
    results = BatchStore(engine).store_many(
        [(node_id, first), (node_id, _with_new_id(first)), (other, unrelated)]
    )
    assert [r.samples for r in results] == [len(first.samples), 0, len(unrelated.samples)]


def test_stored_count_of_a_v2_batch_with_repeats(engine):
    """The columnar form: three GPU samples of one GPU at one stamp store one row, and say so."""
    node_id = _node_id(engine)
    one = factories.gpu_sample(factories.T0, 0)
    batch = factories.wire.Batch(node="node001", agent_version="t", samples=[one, one, one])
    columnar = wire_v2.from_v1(batch)
    assert BatchStore(engine).store(node_id, columnar).samples == 1
    with engine.connect() as conn:
        assert _stored_once(conn) == 1
