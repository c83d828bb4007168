"""Raw host samples read through ``sql/readings.py``: what was sent comes back as the row tables
had it, each reading once, within bounds, of one node, across an hour's packs."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from gpuwatch import wire
from gpuwatch.daemon.store.batch_store import BatchStore, count_rows, sample_rows
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.partitions import PartitionManager
from gpuwatch.sql.readings import (
    count_samples,
    first_sample_at,
    read_samples,
    samples_between,
    samples_per_node,
    stored_keys,
)
from gpuwatch.sql.schema import HOST_SAMPLES, SAMPLE_KINDS
from tests import factories

#: ten seconds before a UTC hour: a batch of 4 cycles falls on two hours
T1 = factories.T0.replace(hour=6, minute=59, second=50, microsecond=0)


def _nodes(engine, *names: str) -> dict[str, int]:
    for name in names:
        create_token(engine, name)
    with engine.connect() as conn:
        return {name: get_node(conn, name).id for name in names}


def _odd_host_samples(ts) -> list:
    """Every host kind with values that a rounding or a lost key would change: two devices, two
    GPUs' attribution, JSON, NULLs, a float no short decimal writes."""
    third = 1 / 3
    return [
        wire.CpuSample(
            ts=ts,
            cores=2,
            busy_ratio=third,
            user_ratio=0.1 + 0.2,
            system_ratio=0.0,
            iowait_ratio=third,
            per_core_busy_ratio=[third, 0.0],
            load1=1e-7,
        ),
        wire.MemorySample(
            ts=ts, total_bytes=2**40 + 1, available_bytes=7, used_bytes=0, swap_in_bytes_per_s=12345.678901234
        ),
        *(
            wire.NicSample(**_rates("rx", "tx"), ts=ts, device=d, rx_bytes_per_s=1.5e9 + i, rx_errors=2**40)
            for i, d in enumerate("ab")
        ),
        wire.InfinibandSample(
            **_rates(), rx_bytes_per_s=1.0, ts=ts, device="mlx5_0", port=1, link_rate_bytes_per_s=third
        ),
        wire.InfinibandSample(**_rates(), rx_bytes_per_s=2.0, ts=ts, device="mlx5_0", port=2),
        wire.DiskSample(
            ts=ts,
            device="nvme0n1",
            read_bytes_per_s=third,
            write_bytes_per_s=0,
            reads_per_s=1,
            writes_per_s=2,
            busy_ratio=third,
        ),
        wire.JobSample(ts=ts, job_id="7_1", cpu_used_cores=third, memory_cache_bytes=2**33, cgroup_version=1),
        *(
            wire.AttributionSample(ts=ts, gpu_index=i, job_id=job, user="bo", source="process", pids=[4, 5])
            for i, job in ((0, "7_1"), (3, "8"))
        ),
        wire.AgentSample(ts=ts, collector_errors={"nvml": "lost"}, collector_seconds={"cpu": third}),
    ]


def _rates(*packets: str) -> dict[str, float]:
    """The rates every NIC and HCA sample must carry."""
    return {"tx_bytes_per_s": 2.5, **{f"{d}_packets_per_s": 10.0 for d in packets}}


def _batch(node: str, cycles: int, start) -> wire.Batch:
    samples = [s for c in range(cycles) for s in _odd_host_samples(start + timedelta(seconds=10 * c))]
    return wire.Batch(node=node, agent_version="test", samples=samples)


def _sent(batches: list[wire.Batch], kind: str) -> list[tuple]:
    """The batches' ``kind`` samples as the readings' columns after ``node_id``, in their order."""
    spec = SAMPLE_KINDS[kind]
    names = [*(k.name for k in spec.keys), "ts", *(f.name for f in spec.fields)]
    rows = [tuple(getattr(s, n) for n in names) for b in batches for s in b.samples if s.kind == kind]
    return sorted(rows, key=lambda r: (r[: len(spec.keys)], r[len(spec.keys)]))


def test_every_host_kind_reads_back_what_was_sent(engine):
    """Values, keys, JSON and NULLs come back exactly, under the row tables' column names, from a
    batch whose cycles fall on two UTC hours (a pack per kind and hour)."""
    (node,) = _nodes(engine, "node001").values()
    batch = _batch("node001", 4, T1)
    BatchStore(engine).store(node, batch)
    with engine.connect() as conn:
        for spec in HOST_SAMPLES:
            packs = conn.execute(sa.select(spec.table.c.ts, spec.table.c.ts_last)).all()
            assert sorted(packs) == [(T1, T1), (T1 + timedelta(seconds=10), T1 + timedelta(seconds=30))], (
                f"{spec.kind}: a pack per UTC hour"
            )
            got = [tuple(r)[1:] for r in read_samples(conn, spec.kind)]
            assert got == _sent([batch], spec.kind), spec.kind
            assert {r.node_id for r in read_samples(conn, spec.kind)} == {node}
            assert samples_between(conn, spec.kind).name == spec.readings


def test_bounds_and_one_node(engine):
    ids = _nodes(engine, "node001", "node002")
    store = BatchStore(engine)
    store.store(ids["node001"], _batch("node001", 6, T1))  # T1 .. T1+50 s, over two hours
    store.store(ids["node002"], _batch("node002", 3, T1 + timedelta(seconds=20)))
    with engine.connect() as conn:
        assert first_sample_at(conn, "cpu") == T1
        # [T1+10 s, T1+40 s): cycles 1..3 of node001, 0..1 of node002; two NICs each
        nic = samples_between(conn, "nic", T1 + timedelta(seconds=10), T1 + timedelta(seconds=40))
        rows = conn.execute(sa.select(nic.c.node_id, nic.c.device, nic.c.ts)).all()
        assert len(rows) == (3 + 2) * 2 and len(set(rows)) == len(rows)
        assert min(r.ts for r in rows) == T1 + timedelta(seconds=10)
        assert max(r.ts for r in rows) == T1 + timedelta(seconds=30), "the end is exclusive"
        one = samples_between(conn, "attribution", node_id=ids["node002"])
        got = conn.execute(sa.select(one.c.node_id, one.c.gpu_index, one.c.job_id)).all()
        assert sorted(set(got)) == [(ids["node002"], 0, "7_1"), (ids["node002"], 3, "8")]
        assert len(got) == 3 * 2
        since = T1 + timedelta(seconds=30)
        assert samples_per_node(conn, "cpu", since) == {ids["node001"]: 3, ids["node002"]: 2}
        assert samples_per_node(conn, "cpu", since + timedelta(hours=1)) == {}
        assert count_samples(conn, "infiniband") == (6 + 3) * 2
        # a few jobs over all time: picked out of the packs
        jobs = samples_between(conn, "attribution", job_ids=["8", "9"])
        got = conn.execute(sa.select(jobs.c.node_id, jobs.c.gpu_index, jobs.c.job_id)).all()
        assert len(got) == 6 + 3 and {(g, j) for _, g, j in got} == {(3, "8")}
        none = samples_between(conn, "job", T1 + timedelta(seconds=10), job_ids=["8"])
        assert conn.execute(sa.select(sa.func.count()).select_from(none)).scalar() == 0
        assert stored_keys(conn, "infiniband", ids["node002"], since, since) == {
            ("mlx5_0", 1, since),
            ("mlx5_0", 2, since),
        }


def test_kinds_stored_in_one_row_per_push_and_hour(engine):
    """The host kinds share a pack: one row per node, push and hour, its span every kind's; a kind
    a push did not hold has empty arrays there, and its first reading is its own, not the row's."""
    (node,) = _nodes(engine, "node001").values()
    store = BatchStore(engine)
    cpu_only = _batch("node001", 2, T1 + timedelta(seconds=20))  # 07:00:10 .. 07:00:20
    cpu_only = cpu_only.model_copy(update={"samples": [s for s in cpu_only.samples if s.kind == "cpu"]})
    store.store(node, cpu_only)
    later = _batch("node001", 2, T1 + timedelta(seconds=40))  # 07:00:30 .. 07:00:40, every kind
    store.store(node, later)
    table = SAMPLE_KINDS["job"].table
    assert all(spec.table is table for spec in HOST_SAMPLES)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(table).order_by(table.c.ts)).all()
        assert [(r.ts, r.ts_last) for r in rows] == [
            (T1 + timedelta(seconds=20), T1 + timedelta(seconds=30)),
            (T1 + timedelta(seconds=40), T1 + timedelta(seconds=50)),
        ]
        assert len(rows[0].cpu_sample_ts) == 2 and rows[0].job_sample_ts == [] and rows[0].nic_device == []
        assert first_sample_at(conn, "cpu") == T1 + timedelta(seconds=20)
        assert first_sample_at(conn, "job") == T1 + timedelta(seconds=40)
        assert count_samples(conn, "job") == 2 and count_samples(conn, "cpu") == 4


def test_two_kinds_in_one_query(engine):
    """Each kind is its own selectable (on SQLite its own temporary table): a reader may join
    two kinds in one statement."""
    (node,) = _nodes(engine, "node001").values()
    BatchStore(engine).store(node, _batch("node001", 3, T1))
    with engine.connect() as conn:
        cpu, memory = samples_between(conn, "cpu"), samples_between(conn, "memory")
        joined = sa.select(cpu.c.ts, cpu.c.cores, memory.c.available_bytes).join_from(
            cpu, memory, sa.and_(cpu.c.node_id == memory.c.node_id, cpu.c.ts == memory.c.ts)
        )
        assert len(conn.execute(joined).all()) == 3


def test_an_empty_store(engine):
    with engine.connect() as conn:
        for spec in HOST_SAMPLES:
            assert first_sample_at(conn, spec.kind) is None
            assert read_samples(conn, spec.kind) == []
        with pytest.raises(ValueError, match="not keyed by a job"):
            samples_between(conn, "cpu", job_ids=["7"])


def test_overlapping_packs_are_read_once(engine):
    """Two packs holding some of the same readings (written by another writer): every reader
    sees each (node, keys, stamp) once."""
    (node,) = _nodes(engine, "node001").values()
    t0 = T1.replace(minute=0, second=0)
    first = sample_rows(node, _batch("node001", 4, t0))
    later = sample_rows(node, _batch("node001", 4, t0 + timedelta(seconds=20)))
    PartitionManager(engine).ensure_days([t0.date()])
    with engine.begin() as conn:
        for table in {spec.table for spec in HOST_SAMPLES}:  # the one table of the host kinds
            conn.execute(table.insert(), [*first[table.name], *later[table.name]])
    with engine.connect() as conn:
        assert count_samples(conn, "cpu") == 6
        assert count_samples(conn, "attribution") == 6 * 2
        assert len(read_samples(conn, "disk", t0 + timedelta(seconds=20))) == 4


@pytest.mark.parametrize("bulk", [None, "insert"])
def test_samples_sent_again_are_stored_once(engine, bulk):
    """A copy of stored samples under a new batch id, and a half-new batch, add only what is new:
    the store checks each kind's readings against what is stored, and no pack holds one twice."""
    if bulk == "insert" and engine.dialect.name != "postgresql":
        pytest.skip("SQLite only has the insert path, run as the default")
    (node,) = _nodes(engine, "node001").values()
    store = BatchStore(engine, bulk=bulk)
    first = _batch("node001", 3, T1)
    assert store.store(node, first).samples == len(first.samples)
    again = _batch("node001", 3, T1)  # the same samples, a new id
    assert store.store(node, again).samples == 0
    half_new = _batch("node001", 6, T1)
    assert store.store(node, half_new).samples == len(half_new.samples) // 2
    repeated = _batch("node001", 1, T1 + timedelta(minutes=5))
    repeated = repeated.model_copy(update={"samples": [*repeated.samples, repeated.samples[0]]})
    assert store.store(node, repeated).samples == len(repeated.samples) - 1
    with engine.connect() as conn:
        counts = count_rows(conn)
        for spec in HOST_SAMPLES:
            per_cycle = sum(1 for s in _odd_host_samples(T1) if s.kind == spec.kind)
            assert counts[spec.readings] == 7 * per_cycle, spec.kind
            elements = sum(
                len(stamps) for stamps in conn.execute(sa.select(spec.table.c[spec.columns[0]])).scalars()
            )
            assert elements == counts[spec.readings], f"{spec.kind}: a reading stored twice"


@pytest.mark.parametrize("bulk", [None, "insert"])
def test_a_batch_starting_inside_a_stored_pack(engine, bulk):
    """A re-batched copy that starts inside a stored pack (no pack key in common): the portable
    path stores only its new readings; the PostgreSQL fast path meets no key and stores it whole,
    as it does GPU packs. Readers see every reading once either way."""
    if bulk == "insert" and engine.dialect.name != "postgresql":
        pytest.skip("SQLite only has the insert path, run as the default")
    (node,) = _nodes(engine, "node001").values()
    store = BatchStore(engine, bulk=bulk)
    store.store(node, _batch("node001", 6, T1))  # 06:59:50 .. 07:00:40, a pack per hour
    shifted = _batch("node001", 3, T1 + timedelta(seconds=40))  # 07:00:30 .. 07:00:50
    checked = store.bulk.value == "insert"
    assert store.store(node, shifted).samples == len(shifted.samples) // 3 * (1 if checked else 3)
    with engine.connect() as conn:
        counts = count_rows(conn)
        for spec in HOST_SAMPLES:
            per_cycle = sum(1 for s in _odd_host_samples(T1) if s.kind == spec.kind)
            assert counts[spec.readings] == 7 * per_cycle, spec.kind
            assert len(read_samples(conn, spec.kind, T1 + timedelta(seconds=40))) == 3 * per_cycle
