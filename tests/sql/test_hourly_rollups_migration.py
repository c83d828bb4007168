"""Migration 0024 makes gpu_hours and node_hours and fills them from the minutes stored, the
complete hours alone, on both databases; its downgrade takes them away and leaves the minutes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch.sql import migrate
from gpuwatch.sql.buckets import as_utc
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.rollups import xid_codes
from gpuwatch.sql.types import UtcDateTime

H0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)

#: the tables as revision 0022 has them, only the columns these rows set
_gpu_minutes = sa.table(
    "gpu_minutes", sa.column("minute", UtcDateTime),
    *(sa.column(c) for c in ("node_id", "gpu_index", "samples", "lost_samples", "util_gpu_ratio_sum",
                             "util_gpu_ratio_n", "memory_used_bytes_max", "xid_codes", "simulated")),
)  # fmt: skip
_node_minutes = sa.table(
    "node_minutes", sa.column("minute", UtcDateTime),
    *(sa.column(c) for c in ("node_id", "busy_ratio_sum", "busy_ratio_n", "available_bytes_min")),
)  # fmt: skip
_state = sa.table("rollup_state", sa.column("name"), sa.column("done_until", UtcDateTime))


def _gpu(minute: int, util: float, memory: int, xid: str | None = None) -> dict:
    return {"node_id": 1, "gpu_index": 0, "minute": H0 + timedelta(minutes=minute), "samples": 6,
            "lost_samples": 0, "util_gpu_ratio_sum": util, "util_gpu_ratio_n": 6,
            "memory_used_bytes_max": memory, "xid_codes": xid, "simulated": False}  # fmt: skip


def _tables(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def test_the_upgrade_folds_the_complete_hours_and_the_downgrade_drops_them(db_url) -> None:
    engine = create_engine(db_url)
    try:
        migrate.upgrade(engine, "0022")
        with engine.begin() as conn:
            conn.execute(
                _gpu_minutes.insert(),
                [_gpu(0, 3.0, 10, "[31]"), _gpu(59, 6.0, 30, "[43, 45]"), _gpu(61, 1.0, 5)],
            )
            conn.execute(
                _node_minutes.insert(),
                [{"node_id": 1, "minute": H0 + timedelta(minutes=m), "busy_ratio_sum": 1.5, "busy_ratio_n": 6,
                  "available_bytes_min": 100 - m} for m in (0, 1, 61)],
            )  # fmt: skip
            conn.execute(_state.insert().values(name="minutes", done_until=H0 + timedelta(minutes=62)))
        migrate.upgrade(engine, "0024")
        with engine.connect() as conn:
            gpu = conn.execute(
                sa.text("SELECT hour, minutes, samples, util_gpu_ratio_sum, util_gpu_ratio_n, "
                        "memory_used_bytes_max, xid_codes FROM gpu_hours")
            ).all()  # fmt: skip
            assert [(as_utc(conn, r[0]), *r[1:6]) for r in gpu] == [(H0, 2, 12, 9.0, 12, 30)], (
                "13:00 not complete"
            )
            assert xid_codes(gpu[0][6]) == (31, 43, 45)
            node = conn.execute(
                sa.text("SELECT hour, minutes, busy_ratio_sum, available_bytes_min FROM node_hours")
            ).all()
            assert [(as_utc(conn, r[0]), *r[1:]) for r in node] == [(H0, 2, 3.0, 99)]
            hours = conn.execute(sa.select(_state.c.done_until).where(_state.c.name == "hours")).scalar()
            assert as_utc(conn, hours) == H0 + timedelta(hours=1)
        migrate.downgrade(engine, "-1")
        assert not {"gpu_hours", "node_hours"} & _tables(engine)
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(_gpu_minutes)).scalar() == 3
            names = conn.execute(sa.select(_state.c.name)).scalars().all()
            assert names == ["minutes"]
        migrate.upgrade(engine, "0024")
        assert {"gpu_hours", "node_hours"} <= _tables(engine)
    finally:
        engine.dispose()
