"""Migration 0027 adds the memory-health arrays to ``gpu_sample_packs`` on both databases: packs
stored before read back with NULL health (not read then, never 0) and their readings intact,
new packs keep what they were given, and down/up again leaves every pack readable."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.gpu_readings import read_gpu_samples
from gpuwatch.sql.schema import GPU_SAMPLE_FIELDS, gpu_sample_packs
from tests.factories import MEMORY_HEALTH as HEALTH

BEFORE = "0026"
T0 = datetime(2026, 12, 1, 9, 59, 10, tzinfo=timezone.utc)


def _pack(node: int, start: datetime, health: dict[str, list] | None) -> dict:
    """Two GPUs' readings at one stamp, every field NULL but state, simulated and utilization."""
    row = {
        "node_id": node,
        "ts": start,
        "ts_last": start,
        "sample_ts": [start, start],
        "gpu_index": [0, 1],
    }
    for field in GPU_SAMPLE_FIELDS:
        if field.name not in HEALTH:
            row[field.column] = [None, None]
    row |= {"state": ["ok", "ok"], "simulated": [False, False], "util_gpu_ppm": [500_000, 250_000]}
    return row | (health or {})


def _partition(conn: sa.Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(
            sa.text(
                'CREATE TABLE "gpu_sample_packs_p20261201" PARTITION OF "gpu_sample_packs" '
                "FOR VALUES FROM ('2026-12-01 00:00:00+00') TO ('2026-12-02 00:00:00+00')"
            )
        )


def _health(conn: sa.Connection) -> dict[tuple[int, datetime, int], tuple]:
    return {
        (r.node_id, r.ts, r.gpu_index): (r.util_gpu_ratio, *(getattr(r, name) for name in HEALTH))
        for r in read_gpu_samples(conn)
    }


def test_old_packs_read_null_health_and_new_packs_keep_theirs(db_url):
    engine = create_engine(db_url)
    old = _pack(1, T0, None)
    new = _pack(
        2,
        T0 + timedelta(seconds=30),
        {
            "remapped_rows_correctable": [3, None],
            "remapped_rows_uncorrectable": [1, None],
            "row_remap_pending": [True, None],
            "row_remap_failed": [False, None],
            "retired_pages_sbe": [None, 2],
            "retired_pages_dbe": [None, 0],
            "retired_pages_pending": [None, False],
            "pcie_replay_errors": [2**32 - 1, 0],
        },
    )
    nothing = (None,) * len(HEALTH)
    try:
        migrate.upgrade(engine, BEFORE)
        with engine.begin() as conn:
            _partition(conn)
            conn.execute(sa.insert(gpu_sample_packs), [old])  # only the columns 0025 has
        migrate.upgrade(engine)
        with engine.begin() as conn:
            conn.execute(sa.insert(gpu_sample_packs), [new])
        t1 = T0 + timedelta(seconds=30)
        with engine.connect() as conn:
            assert _health(conn) == {
                (1, T0, 0): (0.5, *nothing),
                (1, T0, 1): (0.25, *nothing),
                (2, t1, 0): (0.5, 3, 1, True, False, None, None, None, 2**32 - 1),
                (2, t1, 1): (0.25, None, None, None, None, 2, 0, False, 0),
            }
        migrate.downgrade(engine, BEFORE)
        with engine.connect() as conn:
            columns = {c["name"] for c in sa.inspect(conn).get_columns("gpu_sample_packs")}
            assert not columns & set(HEALTH)
            assert conn.execute(sa.text("SELECT count(*) FROM gpu_sample_packs")).scalar() == 2
        migrate.upgrade(engine)
        with engine.connect() as conn:
            # the health the downgrade dropped reads NULL again; every reading is still there
            assert _health(conn) == {
                (1, T0, 0): (0.5, *nothing),
                (1, T0, 1): (0.25, *nothing),
                (2, t1, 0): (0.5, *nothing),
                (2, t1, 1): (0.25, *nothing),
            }
    finally:
        engine.dispose()
