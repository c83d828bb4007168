"""Retention drops old raw data (whole partitions on PostgreSQL), keeps rollups longer."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from gpuwatch.sql.ingest import BatchStore, count_rows
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.partitions import list_partitions
from gpuwatch.sql.retention import apply_retention
from gpuwatch.sql.rollups import Rollup
from gpuwatch.sql.schema import gpu_minutes, gpu_samples, ingested_batches
from tests import factories


def test_old_raw_data_goes_rollups_and_recent_data_stay(engine):
    create_token(engine, "node001")
    with engine.connect() as conn:
        node_id = get_node(conn, "node001").id
    now = factories.T0 + timedelta(days=30)
    store = BatchStore(engine)
    old = factories.T0.replace(hour=6)  # 30 days before "now"
    recent = now - timedelta(days=1)
    store.store(node_id, factories.batch(start=old, cycles=3))
    store.store(node_id, factories.batch(start=recent, cycles=3))
    Rollup(engine).roll(old, old + timedelta(minutes=2))
    report = apply_retention(engine, raw_days=14, rollup_days=60, batch_record_days=40, now=now)
    with engine.connect() as conn:
        left = conn.execute(sa.select(gpu_samples.c.ts)).scalars().all()
        assert left and min(left) >= recent, "only the recent samples are left"
        assert conn.execute(sa.select(sa.func.count()).select_from(gpu_minutes)).scalar() > 0, "rollups kept"
        assert conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar() == 2
        if engine.dialect.name == "postgresql":
            assert "gpu_samples_p20261201" in report.dropped_partitions
            assert "gpu_samples_p20261201" not in list_partitions(conn, "gpu_samples")
            assert f"gpu_samples_p{recent:%Y%m%d}" in list_partitions(conn, "gpu_samples")
        else:
            assert report.deleted_rows["gpu_samples"] == 6
    # a batch replayed from an old spool after its partition went: stored again, no error
    store.partitions.forget()
    store.store(node_id, factories.batch(start=old + timedelta(hours=1), cycles=1))
    apply_retention(engine, raw_days=14, rollup_days=20, batch_record_days=20, now=now)
    with engine.connect() as conn:  # received (really) today, 29 days before this "now": past 20 days
        assert conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar() == 0
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(gpu_minutes)).scalar() == 0
        assert count_rows(conn, [gpu_samples])["gpu_samples"] == 6
