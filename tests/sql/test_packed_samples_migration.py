"""Migration 0022 carries GPU sample rows into packs and back, on both databases, with real rows:
every field, NULLs, JSON lists, a lost GPU, samples over a five-minute and an hour boundary."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.gpu_readings import read_gpu_samples
from gpuwatch.sql.schema import gpu_sample_packs

BEFORE = "0021"
#: six readings 90 s apart, 09:54:30 .. 10:02:00: over a five-minute and an hour boundary
T0 = datetime(2026, 12, 1, 9, 54, 30, tzinfo=timezone.utc)


def _row(node_id: int, gpu_index: int, k: int) -> dict:
    lost = gpu_index == 1 and k == 3
    values = {
        "node_id": node_id,
        "gpu_index": gpu_index,
        "ts": T0 + timedelta(seconds=90 * k),
        "state": "lost" if lost else "ok",
        "simulated": k % 2 == 0,
    }
    if lost:
        return values
    return values | {
        "interval_s": 10.0,
        "util_gpu_ratio": [0.37, 0.0, 1.0, 0.5, 0.99, 0.1][k],
        "util_memory_ratio": 0.25,
        "util_gpu_idle_fraction_ratio": [0.0, 0.1, 0.2, 0.3, 0.4, 0.5][k],
        "util_gpu_stddev_ratio": None,
        "memory_used_bytes": 40 * 2**30 + k,
        "memory_total_bytes": 141 * 2**30,
        "memory_reserved_bytes": None,
        "power_watts": 312.125 + k,
        "power_limit_watts": 700.0,
        "power_default_limit_watts": 700.0,
        "energy_joules": 123_456_789.012 + 3_000 * k,
        "sm_clock_hz": 1_410_000_000.0,
        "sm_clock_max_hz": 1_980_000_000.0,
        "memory_clock_hz": 2_619_000_000.0,
        "memory_clock_max_hz": 2_619_000_000.0,
        "temperature_celsius": 61.5,
        "throttle_reasons": ["sw_power_cap", "gpu_idle"] if k == 2 else [],
        "pcie_tx_bytes_per_s": 2.5e10,
        "pcie_rx_bytes_per_s": 1_000.0,
        "nvlink_tx_bytes_per_s": None,
        "nvlink_rx_bytes_per_s": 0.0,
        "ecc_corrected_errors": 2,
        "ecc_uncorrected_errors": 0,
        "xid_errors": [79, 13] if k == 4 else None,
        "frameworks": ["torch"],
        "gr_engine_active_ratio": None,
        "sm_active_ratio": 0.45,
        "sm_occupancy_ratio": 0.123456,
        "tensor_active_ratio": 0.0,
        "dram_active_ratio": 0.3,
        "fp32_active_ratio": 0.01,
        "fp16_active_ratio": 0.2,
        "fp64_active_ratio": 0.0,
    }


ROWS = [_row(node, gpu, k) for node in (1, 2) for gpu in (0, 1) for k in range(6)]
#: float4 on PostgreSQL: equal to 7 digits, not exactly
APPROX = {"pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s", "nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s"}


def _same(found: dict, sent: dict) -> None:
    for name, value in sent.items():
        got = found[name]
        if name == "ts":
            assert got == value
        elif name in APPROX and value is not None:
            assert got == pytest.approx(value, rel=1e-7), name
        elif name == "simulated":
            assert bool(got) is value
        else:
            assert got == value, name


def _partition(conn: sa.Connection, table: str) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(
            sa.text(
                f'CREATE TABLE "{table}_p20261201" PARTITION OF "{table}" '
                "FOR VALUES FROM ('2026-12-01 00:00:00+00') TO ('2026-12-02 00:00:00+00')"
            )
        )


def test_rows_become_packs_and_packs_rows_again(db_url):
    engine = create_engine(db_url)
    try:
        migrate.upgrade(engine, BEFORE)
        rows_table = sa.Table("gpu_samples", sa.MetaData(), autoload_with=engine)
        with engine.begin() as conn:
            _partition(conn, "gpu_samples")
            full = [{c.name: None for c in rows_table.c} | row for row in ROWS]
            conn.execute(rows_table.insert(), full)
        migrate.upgrade(engine)
        with engine.connect() as conn:
            readings = read_gpu_samples(conn)
            packs = conn.execute(sa.select(gpu_sample_packs.c.ts, gpu_sample_packs.c.ts_last)).all()
        assert len(readings) == len(ROWS)
        by_key = {(r.node_id, r.gpu_index, r.ts): r._asdict() for r in readings}
        for row in ROWS:
            _same(by_key[(row["node_id"], row["gpu_index"], row["ts"])], row)
        # a pack per node and five minutes, never over an hour: 09:54:30, 09:55-09:59, 10:00-
        assert sorted({(p.ts.hour, p.ts.minute // 5) for p in packs}) == [(9, 10), (9, 11), (10, 0)]
        assert all(p.ts.hour == p.ts_last.hour for p in packs)

        migrate.downgrade(engine, BEFORE)
        rows_table = sa.Table("gpu_samples", sa.MetaData(), autoload_with=engine)
        with engine.connect() as conn:
            back = {}
            for r in conn.execute(sa.select(rows_table)):
                found = r._asdict()
                ts = found["ts"]  # a reflected SQLite DATETIME comes back naive, in UTC
                found["ts"] = (
                    ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)
                )
                back[(r.node_id, r.gpu_index, found["ts"])] = found
        assert len(back) == len(ROWS)
        for row in ROWS:
            _same(back[(row["node_id"], row["gpu_index"], row["ts"])], row)
    finally:
        engine.dispose()
