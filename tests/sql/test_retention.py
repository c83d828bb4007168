"""Retention drops old raw data (whole partitions on PostgreSQL), keeps rollups longer."""

from __future__ import annotations

import uuid
from datetime import timedelta

import sqlalchemy as sa

from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql.gpu_readings import count_gpu_samples, read_gpu_samples
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.partitions import list_partitions
from gpuwatch.sql.process_packs import read_processes
from gpuwatch.sql.retention import apply_retention
from gpuwatch.sql.rollups import Rollup
from gpuwatch.sql.schema import gpu_minutes, gpu_process_packs, ingested_batches
from tests import factories


def _node_id(engine) -> int:
    create_token(engine, "node001")
    with engine.connect() as conn:
        return get_node(conn, "node001").id


def test_old_raw_data_goes_rollups_and_recent_data_stay(engine):
    node_id = _node_id(engine)
    now = factories.T0 + timedelta(days=30)
    store = BatchStore(engine)
    old = factories.T0.replace(hour=6)  # 30 days before "now"
    recent = now - timedelta(days=1)
    store.store(node_id, factories.batch(start=old, cycles=3))
    store.store(node_id, factories.batch(start=recent, cycles=3))
    Rollup(engine).roll(old, old + timedelta(minutes=2))
    report = apply_retention(engine, raw_days=14, rollup_days=60, batch_record_days=40, now=now)
    with engine.connect() as conn:
        left = [r.ts for r in read_gpu_samples(conn)]
        assert left and min(left) >= recent, "only the recent samples are left"
        assert conn.execute(sa.select(sa.func.count()).select_from(gpu_minutes)).scalar() > 0, "rollups kept"
        assert conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar() == 2
        if engine.dialect.name == "postgresql":
            assert "gpu_sample_packs_p20261201" in report.dropped_partitions
            assert "gpu_sample_packs_p20261201" not in list_partitions(conn, "gpu_sample_packs")
            assert f"gpu_sample_packs_p{recent:%Y%m%d}" in list_partitions(conn, "gpu_sample_packs")
        else:
            # the old batch's packs: its cycles (06:59:50 .. 07:00:10) cross an hour
            assert report.deleted_rows["gpu_sample_packs"] == 2
    # a batch replayed from an old spool after its partition went: stored again, no error
    store.partitions.forget()
    store.store(node_id, factories.batch(start=old + timedelta(hours=1), cycles=1))
    apply_retention(engine, raw_days=14, rollup_days=20, batch_record_days=20, now=now)
    with engine.connect() as conn:  # received (really) today, 29 days before this "now": past 20 days
        assert conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar() == 0
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(gpu_minutes)).scalar() == 0
        assert count_gpu_samples(conn) == 6


def test_late_batches_older_than_raw_retention_leave_rollups_alone(engine):
    """A spool copy restored weeks later: its samples are older than the raw horizon, so the
    minutes they touch (and every minute between them) no longer have their raw samples. The
    late re-roll must not delete rollups it cannot rebuild."""
    node_id = _node_id(engine)
    store = BatchStore(engine)
    old = factories.T0.replace(hour=6)
    now = old + timedelta(days=30)
    on_time = [factories.batch(start=old + timedelta(minutes=m), cycles=6) for m in range(0, 60, 5)]
    for b in on_time:
        store.store(node_id, b)
    rollup = Rollup(engine, chunk_minutes=60 * 24 * 31, raw_days=14)
    rollup.run_once(now=old + timedelta(hours=2))
    with engine.connect() as conn:
        before = conn.execute(sa.select(gpu_minutes).order_by(gpu_minutes.c.minute)).all()
    assert len(before) >= 12 * 2  # at least 12 minutes x 2 GPUs
    rollup.run_once(now=now)  # rolled up to now, so what follows is only the late re-roll
    apply_retention(engine, raw_days=14, rollup_days=60, batch_record_days=40, now=now)
    # two batches of that hour come back under new batch ids (a restored copy of the spool)
    for b in (on_time[0], on_time[-1]):
        store.partitions.forget()
        store.store(node_id, b.model_copy(update={"batch_id": uuid.uuid4()}))
    report = rollup.run_once(now=now + timedelta(minutes=1))
    assert report.late_ranges == 0 and report.late_too_old == 1
    with engine.connect() as conn:
        after = conn.execute(sa.select(gpu_minutes).order_by(gpu_minutes.c.minute)).all()
    assert after == before, "rollups of minutes whose raw samples are gone are kept as they were"


def test_process_rows_can_go_before_the_other_raw_samples(engine):
    node_id = _node_id(engine)
    now = factories.T0 + timedelta(days=20)
    store = BatchStore(engine)
    for days_ago in (10, 5, 1):
        store.store(node_id, factories.batch(start=now - timedelta(days=days_ago), cycles=2))
    report = apply_retention(
        engine, raw_days=14, rollup_days=60, batch_record_days=40, process_days=3, now=now
    )
    with engine.connect() as conn:
        gpu_ts = [r.ts for r in read_gpu_samples(conn)]
        process_ts = [p.ts for p in read_processes(conn, now - timedelta(days=30), now)]
        packs = conn.execute(sa.select(gpu_process_packs.c.ts)).scalars().all()
    assert len(gpu_ts) == 3 * 2 * 2, "GPU samples are kept for raw_days"
    assert len(process_ts) == 2 * 2 and min(process_ts) >= now - timedelta(days=1, minutes=1)
    assert len(packs) == 2, "the last batch's pack per UTC day (it starts 10 s before midnight)"
    if engine.dialect.name == "postgresql":
        assert {name.rpartition("_p")[0] for name in report.dropped_partitions} == {"gpu_process_packs"}
    else:
        assert report.deleted_rows == {"gpu_process_packs": 2 * 2}
