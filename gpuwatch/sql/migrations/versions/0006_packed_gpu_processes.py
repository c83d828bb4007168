"""per-process GPU readings packed: gpu_process_samples -> gpu_process_packs

One row per node, batch and UTC day with an array per field, instead of a row per process
per GPU per cycle (``gpuwatch/sql/process_packs.py`` says why). Existing rows are carried
over, one pack per node and stamp; the downgrade unpacks them again.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 17:40:00
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import gpuwatch.sql.types

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_DOUBLE = sa.Float(precision=53).with_variant(sa.DOUBLE_PRECISION(), "postgresql")
_FIELDS = ("gpu_index", "pid", "used_memory_bytes", "sm_util_ratio", "memory_util_ratio", "job_id")


def _array(item: sa.types.TypeEngine) -> sa.types.TypeEngine:
    return sa.JSON(none_as_null=True).with_variant(postgresql.ARRAY(item), "postgresql")


def _copy_partitions(source: str, target: str) -> None:
    """On PostgreSQL, give ``target`` a daily partition for each day ``source`` has one."""
    bind = op.get_bind()
    names = bind.execute(
        sa.text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = :t"
        ),
        {"t": source},
    ).scalars()
    for name in names:
        match = re.fullmatch(rf"{source}_p(\d{{4}})(\d{{2}})(\d{{2}})", name)
        if match is None:
            continue
        day = "-".join(match.groups())
        op.execute(
            f'CREATE TABLE "{target}_p{"".join(match.groups())}" PARTITION OF "{target}" '
            f"FOR VALUES FROM ('{day} 00:00:00+00') TO (('{day}'::date + 1)::timestamp AT TIME ZONE 'UTC')"
        )


def upgrade() -> None:
    op.create_table(
        "gpu_process_packs",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("ts", gpuwatch.sql.types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("ts_last", gpuwatch.sql.types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("sample_ts", gpuwatch.sql.types.UtcDateTimeList(), nullable=False),
        sa.Column("gpu_index", _array(sa.SmallInteger()), nullable=False),
        sa.Column("pid", _array(sa.BigInteger()), nullable=False),
        sa.Column("used_memory_bytes", _array(sa.BigInteger()), nullable=False),
        sa.Column("sm_util_ratio", _array(_DOUBLE), nullable=False),
        sa.Column("memory_util_ratio", _array(_DOUBLE), nullable=False),
        sa.Column("job_id", _array(sa.String(length=64)), nullable=False),
        sa.PrimaryKeyConstraint("node_id", "ts", name=op.f("pk_gpu_process_packs")),
        postgresql_partition_by="RANGE (ts)",
    )
    op.create_index(
        "ix_gpu_process_packs_ts", "gpu_process_packs", ["ts"], unique=False, postgresql_using="brin"
    )
    if op.get_bind().dialect.name == "postgresql":
        _copy_partitions("gpu_process_samples", "gpu_process_packs")
        aggregated = ", ".join(f"array_agg({f} ORDER BY gpu_index, pid)" for f in ("ts", *_FIELDS))
        source = "gpu_process_samples"
    else:  # rows go into json_group_array in the subquery's order
        aggregated = ", ".join(f"json_group_array({f})" for f in ("ts", *_FIELDS))
        source = "(SELECT * FROM gpu_process_samples ORDER BY node_id, ts, gpu_index, pid)"
    op.execute(
        f"INSERT INTO gpu_process_packs (node_id, ts, ts_last, sample_ts, {', '.join(_FIELDS)}) "
        f"SELECT node_id, ts, ts, {aggregated} FROM {source} AS s GROUP BY node_id, ts"
    )
    op.drop_index("ix_gpu_process_samples_ts", table_name="gpu_process_samples", postgresql_using="brin")
    op.drop_table("gpu_process_samples")


def downgrade() -> None:
    op.create_table(
        "gpu_process_samples",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("gpu_index", sa.SmallInteger(), nullable=False),
        sa.Column("pid", sa.BigInteger(), nullable=False),
        sa.Column("ts", gpuwatch.sql.types.UtcDateTime(timezone=True), nullable=False),
        sa.Column("used_memory_bytes", sa.BigInteger(), nullable=True),
        sa.Column("sm_util_ratio", _DOUBLE, nullable=True),
        sa.Column("memory_util_ratio", _DOUBLE, nullable=True),
        sa.Column("job_id", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("node_id", "gpu_index", "pid", "ts", name=op.f("pk_gpu_process_samples")),
        postgresql_partition_by="RANGE (ts)",
    )
    op.create_index(
        "ix_gpu_process_samples_ts", "gpu_process_samples", ["ts"], unique=False, postgresql_using="brin"
    )
    columns = f"node_id, ts, {', '.join(_FIELDS)}"
    if op.get_bind().dialect.name == "postgresql":
        _copy_partitions("gpu_process_packs", "gpu_process_samples")
        op.execute(
            f"INSERT INTO gpu_process_samples ({columns}) SELECT p.node_id, u.* FROM gpu_process_packs p, "
            f"unnest(p.sample_ts, {', '.join(f'p.{f}' for f in _FIELDS)}) AS u(ts, {', '.join(_FIELDS)}) "
            "ON CONFLICT DO NOTHING"
        )
    else:
        joins = " ".join(f"JOIN json_each(p.{f}) AS e_{f} ON e_{f}.key = t.key" for f in _FIELDS)
        op.execute(
            f"INSERT OR IGNORE INTO gpu_process_samples ({columns}) "
            f"SELECT p.node_id, t.value, {', '.join(f'e_{f}.value' for f in _FIELDS)} "
            f"FROM gpu_process_packs p JOIN json_each(p.sample_ts) AS t {joins}"
        )
    op.drop_index("ix_gpu_process_packs_ts", table_name="gpu_process_packs", postgresql_using="brin")
    op.drop_table("gpu_process_packs")
