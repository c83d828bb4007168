"""Migration 0016 fills node_minutes' GPU columns from the gpu_minutes already stored, on both
databases, and its downgrade removes the rows it added and nothing else."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch.sql import migrate
from gpuwatch.sql.buckets import as_utc
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.types import UtcDateTime

M0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
M1 = M0 + timedelta(minutes=1)

#: the tables as revision 0015 has them, only the columns these rows set
_gpu_minutes = sa.table(
    "gpu_minutes", sa.column("minute", UtcDateTime),
    *(sa.column(c) for c in ("node_id", "gpu_index", "samples", "lost_samples", "util_gpu_ratio_sum",
                             "util_gpu_ratio_n", "simulated")),
)  # fmt: skip
_node_minutes = sa.table(
    "node_minutes", sa.column("minute", UtcDateTime),
    *(sa.column(c) for c in ("node_id", "busy_ratio_sum", "busy_ratio_n")),
)  # fmt: skip


def _gpu(node: int, gpu: int, minute: datetime, util_sum: float | None, n: int, sim: bool = False) -> dict:
    return {"node_id": node, "gpu_index": gpu, "minute": minute, "samples": 6, "lost_samples": 6 - n,
            "util_gpu_ratio_sum": util_sum, "util_gpu_ratio_n": n, "simulated": sim}  # fmt: skip


def _rows(engine: sa.Engine) -> dict[tuple[int, datetime], tuple]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text(
                "SELECT node_id, minute, busy_ratio_n, gpu_util_ratio_sum, gpu_util_ratio_n, gpus_reporting, "
                "gpu_simulated FROM node_minutes"
            )
        ).all()
        return {(r[0], as_utc(conn, r[1])): (r[2], r[3], r[4], r[5], bool(r[6])) for r in rows}


def test_the_upgrade_fills_the_gpu_columns_and_the_downgrade_takes_its_rows_back(db_url) -> None:
    engine = create_engine(db_url)
    try:
        migrate.upgrade(engine, "0015")
        with engine.begin() as conn:
            conn.execute(
                _gpu_minutes.insert(),
                [_gpu(1, 0, M0, 3.0, 6), _gpu(1, 1, M0, 6.0, 6, sim=True), _gpu(1, 0, M1, None, 0),
                 _gpu(2, 0, M0, 1.5, 3)],
            )  # fmt: skip
            conn.execute(
                _node_minutes.insert(),
                [{"node_id": 1, "minute": M0, "busy_ratio_sum": 3.0, "busy_ratio_n": 6},
                 {"node_id": 3, "minute": M0, "busy_ratio_sum": 1.0, "busy_ratio_n": 6}],
            )  # fmt: skip
        migrate.upgrade(engine)
        assert _rows(engine) == {
            (1, M0): (6, 9.0, 12, 2, True),  # its host row, now with its two GPUs
            (1, M1): (0, None, 0, 0, False),  # a lost GPU's minute: a row, nothing reporting
            (2, M0): (0, 1.5, 3, 1, False),  # GPU minutes, no host samples: a row added
            (3, M0): (6, None, 0, 0, False),  # host samples, no GPUs
        }
        migrate.downgrade(engine, "0015")
        with engine.connect() as conn:
            left = conn.execute(
                sa.text("SELECT node_id, busy_ratio_n FROM node_minutes ORDER BY node_id")
            ).all()
        assert [tuple(r) for r in left] == [(1, 6), (3, 6)]
    finally:
        engine.dispose()
