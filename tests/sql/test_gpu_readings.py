"""Raw GPU samples read through ``sql/gpu_readings.py``: bounds, one node, counts, the oldest."""

from __future__ import annotations

from datetime import timedelta, timezone

import pytest
import sqlalchemy as sa

from gpuwatch.daemon.store.batch_store import BatchStore, sample_rows
from gpuwatch.sql.gpu_readings import (
    count_gpu_samples,
    first_gpu_sample_at,
    gpu_samples_between,
    gpu_samples_per_node,
    read_gpu_samples,
)
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.partitions import PartitionManager
from gpuwatch.sql.schema import gpu_sample_packs
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

        everything = gpu_samples_between(conn)
        assert conn.execute(sa.select(sa.func.count()).select_from(everything)).scalar() == 6 * 2 + 3

        # [t0+10 s, t0+40 s): cycles 1..3 of node001 (2 GPUs), cycles 0..1 of node002
        window = gpu_samples_between(conn, t0 + timedelta(seconds=10), t0 + timedelta(seconds=40))
        rows = conn.execute(sa.select(window.c.node_id, window.c.gpu_index, window.c.ts)).all()
        assert len(rows) == 3 * 2 + 2
        assert min(r.ts for r in rows) == t0 + timedelta(seconds=10)
        assert max(r.ts for r in rows) == t0 + timedelta(seconds=30), "the end is exclusive"
        assert len(set(rows)) == len(rows), "each (node, GPU, stamp) once"

        one = gpu_samples_between(conn, node_id=ids["node002"])
        utils = conn.execute(sa.select(one.c.node_id, one.c.util_gpu_ratio)).all()
        assert {node for node, _ in utils} == {ids["node002"]}
        assert [round(u, 6) for _, u in utils] == [0.1] * 3, "metrics under their column names"

        since = t0 + timedelta(seconds=30)
        assert gpu_samples_per_node(conn, since) == {ids["node001"]: 3 * 2, ids["node002"]: 2}
        assert gpu_samples_per_node(conn, t0 + timedelta(hours=1)) == {}


def test_an_empty_store_has_no_oldest_sample(engine):
    with engine.connect() as conn:
        assert first_gpu_sample_at(conn) is None
        assert conn.execute(sa.select(sa.func.count()).select_from(gpu_samples_between(conn))).scalar() == 0


def test_overlapping_packs_are_read_once(engine):
    """Two packs holding some of the same readings (a spool copy re-batched, stored by another
    writer): every reader sees each (node, GPU, stamp) once."""
    (node,) = _nodes(engine, "node001").values()
    t0 = factories.T0.replace(hour=5)
    first = sample_rows(node, factories.batch(cycles=4, gpus=2, start=t0))["gpu_sample_packs"]
    later = sample_rows(node, factories.batch(cycles=4, gpus=2, start=t0 + timedelta(seconds=20)))
    PartitionManager(engine).ensure_days([t0.date()])
    with engine.begin() as conn:
        conn.execute(gpu_sample_packs.insert(), [*first, *later["gpu_sample_packs"]])
    with engine.connect() as conn:
        rows = read_gpu_samples(conn)
        assert len(rows) == 6 * 2 == count_gpu_samples(conn)
        assert len({(r.gpu_index, r.ts) for r in rows}) == len(rows)
        window = gpu_samples_between(conn, t0 + timedelta(seconds=20), t0 + timedelta(seconds=40))
        assert conn.execute(sa.select(sa.func.count()).select_from(window)).scalar() == 2 * 2


def test_scaled_fields_read_back_exactly(engine):
    """Whole percents, milliwatts and MHz, stored as scaled integers, read back as the same floats."""
    (node,) = _nodes(engine, "node001").values()
    ts = factories.T0.replace(hour=3)
    sample = factories.gpu_sample(
        ts,
        0,
        util_gpu_ratio=0.37,
        util_memory_ratio=0.1,
        power_watts=312.125,
        sm_clock_hz=1_410_000_000.0,
        sm_clock_max_hz=1_980_000_000.0,
        temperature_celsius=-4.5,
        energy_joules=123_456_789.012,
        pcie_tx_bytes_per_s=2.5e10,
        util_gpu_stddev_ratio=1e300,  # absurd but finite: saturates, is not refused
    )
    batch = factories.wire.Batch(node="node001", agent_version="t", samples=[sample])
    BatchStore(engine).store(node, batch)
    with engine.connect() as conn:
        (row,) = read_gpu_samples(conn)
    assert (row.util_gpu_ratio, row.util_memory_ratio, row.power_watts) == (0.37, 0.1, 312.125)
    assert (row.sm_clock_hz, row.sm_clock_max_hz, row.temperature_celsius) == (1.41e9, 1.98e9, -4.5)
    assert row.energy_joules == 123_456_789.012  # a counter: kept in float8
    assert row.pcie_tx_bytes_per_s == pytest.approx(2.5e10, rel=1e-7)  # kept as float4, on both databases
    assert row.util_gpu_stddev_ratio == (2**31 - 1) / 1e6


def test_a_batch_over_an_hour_is_cut_into_packs_that_never_span_one(engine):
    (node,) = _nodes(engine, "node001").values()
    start = factories.T0.replace(hour=7, minute=59, second=30)
    BatchStore(engine).store(node, factories.batch(cycles=6, gpus=1, start=start))  # 07:59:30 .. 08:00:20
    with engine.connect() as conn:
        packs = conn.execute(sa.select(gpu_sample_packs.c.ts, gpu_sample_packs.c.ts_last)).all()
        assert sorted((p.ts.hour, p.ts_last.hour) for p in packs) == [(7, 7), (8, 8)]
        after = gpu_samples_between(conn, start.replace(hour=8, minute=0, second=10))
        assert conn.execute(sa.select(sa.func.count()).select_from(after)).scalar() == 2


def test_a_start_given_in_another_zone_finds_the_packs_of_its_utc_hour(engine):
    """Packs start at most an hour before a reading of theirs, a UTC hour: a start written at
    +05:30 (05:50 UTC is 11:20 there) must not move that bound to 11:00 +05:30, 05:30 UTC, past a
    pack that started at 05:10 UTC."""
    (node,) = _nodes(engine, "node001").values()
    start = factories.T0.replace(hour=5, minute=10, second=0)
    BatchStore(engine).store(node, factories.batch(cycles=300, gpus=1, start=start))  # to 05:59:50
    india = timezone(timedelta(hours=5, minutes=30))
    since = (start + timedelta(minutes=40)).astimezone(india)  # 05:50 UTC
    with engine.connect() as conn:
        readings = gpu_samples_between(conn, since, since + timedelta(minutes=5))
        assert conn.execute(sa.select(sa.func.count()).select_from(readings)).scalar() == 30
        assert gpu_samples_per_node(conn, since) == {node: 60}
