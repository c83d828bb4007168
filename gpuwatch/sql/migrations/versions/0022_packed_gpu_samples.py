"""GPU samples packed: gpu_samples -> gpu_sample_packs

One row per node and batch (within a UTC hour) with an array per field, scaled fields as
4-byte integers, instead of a row per GPU per cycle (``gpuwatch/sql/gpu_readings.py`` says
why). Existing rows are carried over, one pack per node and five minutes; the downgrade unpacks
them again (scaled fields then hold their value rounded to the scale: a ratio to 10^-6, watts
and degrees to 10^-3, clocks to a kHz; byte rates to float4 on PostgreSQL).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-07 05:30:00
"""

from __future__ import annotations

import json
import re

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import JSONB

from gpuwatch.sql.types import UtcDateTime, UtcDateTimeList

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

_DOUBLE = sa.Float(precision=53).with_variant(sa.DOUBLE_PRECISION(), "postgresql")
_JSON = sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")

#: (row column, pack column, how it is packed), frozen as of this revision
_FIELDS = (
    ("state", "state", "text"),
    ("interval_s", "interval_ms", "milli"),
    ("util_gpu_ratio", "util_gpu_ppm", "ppm"),
    ("util_memory_ratio", "util_memory_ppm", "ppm"),
    ("util_gpu_idle_fraction_ratio", "util_gpu_idle_fraction_ppm", "ppm"),
    ("util_gpu_stddev_ratio", "util_gpu_stddev_ppm", "ppm"),
    ("memory_used_bytes", "memory_used_bytes", "bigint"),
    ("memory_total_bytes", "memory_total_bytes", "bigint"),
    ("memory_reserved_bytes", "memory_reserved_bytes", "bigint"),
    ("power_watts", "power_milliwatts", "milli"),
    ("power_limit_watts", "power_limit_milliwatts", "milli"),
    ("power_default_limit_watts", "power_default_limit_milliwatts", "milli"),
    ("energy_joules", "energy_joules", "double"),
    ("sm_clock_hz", "sm_clock_khz", "khz"),
    ("sm_clock_max_hz", "sm_clock_max_khz", "khz"),
    ("memory_clock_hz", "memory_clock_khz", "khz"),
    ("memory_clock_max_hz", "memory_clock_max_khz", "khz"),
    ("temperature_celsius", "temperature_millicelsius", "milli"),
    ("throttle_reasons", "throttle_reasons", "json"),
    ("pcie_tx_bytes_per_s", "pcie_tx_bytes_per_s", "real"),
    ("pcie_rx_bytes_per_s", "pcie_rx_bytes_per_s", "real"),
    ("nvlink_tx_bytes_per_s", "nvlink_tx_bytes_per_s", "real"),
    ("nvlink_rx_bytes_per_s", "nvlink_rx_bytes_per_s", "real"),
    ("ecc_corrected_errors", "ecc_corrected_errors", "bigint"),
    ("ecc_uncorrected_errors", "ecc_uncorrected_errors", "bigint"),
    ("xid_errors", "xid_errors", "json"),
    ("frameworks", "frameworks", "json"),
    ("gr_engine_active_ratio", "gr_engine_active_ppm", "ppm"),
    ("sm_active_ratio", "sm_active_ppm", "ppm"),
    ("sm_occupancy_ratio", "sm_occupancy_ppm", "ppm"),
    ("tensor_active_ratio", "tensor_active_ppm", "ppm"),
    ("dram_active_ratio", "dram_active_ppm", "ppm"),
    ("fp32_active_ratio", "fp32_active_ppm", "ppm"),
    ("fp16_active_ratio", "fp16_active_ppm", "ppm"),
    ("fp64_active_ratio", "fp64_active_ppm", "ppm"),
    ("simulated", "simulated", "bool"),
)
#: scaled kinds: stored = round(value * factor); read = stored / factor
_FACTOR = {"ppm": 1_000_000, "milli": 1000, "khz": 0.001}
#: kind -> (pack element type, row column type)
_TYPES = {
    "text": (sa.String(8), sa.String(8)),
    "ppm": (sa.Integer(), _DOUBLE),
    "milli": (sa.Integer(), _DOUBLE),
    "khz": (sa.Integer(), _DOUBLE),
    "bigint": (sa.BigInteger(), sa.BigInteger()),
    "double": (_DOUBLE, _DOUBLE),
    "real": (sa.REAL(), _DOUBLE),
    "json": (_JSON, _JSON),
    "bool": (sa.Boolean(), sa.Boolean()),
}


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


def _packed(row_column: str, kind: str, pg: bool) -> str:
    """SQL of one row's value as its pack stores it."""
    if kind in _FACTOR:
        scaled = f"round({row_column} * {_FACTOR[kind]})"
        bounded = (
            f"LEAST(GREATEST({scaled}, -2147483648), 2147483647)"
            if pg
            else f"min(max({scaled}, -2147483648), 2147483647)"
        )
        if pg:  # PostgreSQL's LEAST and GREATEST skip a NULL: keep it NULL
            return f"CASE WHEN {row_column} IS NULL THEN NULL ELSE {bounded}::int4 END"
        return f"CAST({bounded} AS INTEGER)"
    if kind == "real" and pg:
        return f"CASE WHEN {row_column} IS NULL THEN NULL ELSE LEAST({row_column}, 3.4028234e38)::real END"
    if kind == "json" and not pg:
        return f"json({row_column})"
    return row_column


def _unpacked(element: str, kind: str) -> str:
    """SQL of one pack element as its row stored it."""
    if kind in _FACTOR:
        factor = _FACTOR[kind]
        return f"CAST({element} AS DOUBLE PRECISION) / {factor}" if factor >= 1 else f"{element} * 1000.0"
    if kind == "real":
        return f"CAST({element} AS DOUBLE PRECISION)"
    return element


def _unpack_on_sqlite(rows: str) -> None:
    """SQLite: every pack's readings as rows of ``gpu_samples``, a pack at a time."""
    bind = op.get_bind()
    columns = ", ".join(f"p.{column}" for _, column, _ in _FIELDS)
    names = ["node_id", "ts", "gpu_index", *(row for row, _, _ in _FIELDS)]
    insert = sa.text(
        f"INSERT OR IGNORE INTO gpu_samples (node_id, ts, gpu_index, {rows}) "
        f"VALUES ({', '.join(':' + name for name in names)})"
    )
    packs = bind.execute(
        sa.text(f"SELECT p.node_id, p.sample_ts, p.gpu_index, {columns} FROM gpu_sample_packs p")
    )
    for node_id, stamps, indices, *fields in packs.all():
        values = [json.loads(field) for field in fields]
        out = []
        for i, (ts, gpu_index) in enumerate(zip(json.loads(stamps), json.loads(indices), strict=True)):
            row = {"node_id": node_id, "ts": ts, "gpu_index": gpu_index}
            for (name, _, kind), field in zip(_FIELDS, values, strict=True):
                row[name] = _read_back(field[i], kind)
            out.append(row)
        bind.execute(insert, out)


def _read_back(value: object, kind: str) -> object:
    """A pack element (decoded JSON) as its row column stores it on SQLite."""
    if value is None:
        return None
    if kind in _FACTOR:
        factor = _FACTOR[kind]
        return value / factor if factor >= 1 else float(value * 1000)  # type: ignore[operator]
    if kind == "json":
        return json.dumps(value)
    return value


def upgrade() -> None:
    op.create_table(
        "gpu_sample_packs",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("ts", UtcDateTime(timezone=True), nullable=False),
        sa.Column("ts_last", UtcDateTime(timezone=True), nullable=False),
        sa.Column("sample_ts", UtcDateTimeList(), nullable=False),
        sa.Column("gpu_index", _array(sa.SmallInteger()), nullable=False),
        *(sa.Column(column, _array(_TYPES[kind][0]), nullable=False) for _, column, kind in _FIELDS),
        sa.PrimaryKeyConstraint("node_id", "ts", name=op.f("pk_gpu_sample_packs")),
        postgresql_partition_by="RANGE (ts)",
    )
    op.create_index(
        "ix_gpu_sample_packs_ts", "gpu_sample_packs", ["ts"], unique=False, postgresql_using="brin"
    )
    pg = op.get_bind().dialect.name == "postgresql"
    columns = ", ".join(column for _, column, _ in _FIELDS)
    order = "ORDER BY ts, gpu_index"
    if pg:
        _copy_partitions("gpu_samples", "gpu_sample_packs")
        aggregated = ", ".join(
            f"array_agg({value} {order})"
            for value in ("ts", "gpu_index", *(_packed(row, kind, True) for row, _, kind in _FIELDS))
        )
        period = (
            "date_trunc('hour', ts AT TIME ZONE 'UTC'), floor(extract(minute FROM ts AT TIME ZONE 'UTC') / 5)"
        )
        source = "gpu_samples"
    else:  # rows go into json_group_array in the subquery's order
        aggregated = ", ".join(
            f"json_group_array({value})"
            for value in ("ts", "gpu_index", *(_packed(row, kind, False) for row, _, kind in _FIELDS))
        )
        period = "strftime('%Y-%m-%d %H', ts), CAST(strftime('%M', ts) AS INTEGER) / 5"
        source = f"(SELECT * FROM gpu_samples {order})"
    op.execute(
        f"INSERT INTO gpu_sample_packs (node_id, ts, ts_last, sample_ts, gpu_index, {columns}) "
        f"SELECT node_id, min(ts), max(ts), {aggregated} FROM {source} AS s GROUP BY node_id, {period}"
    )
    op.drop_index("ix_gpu_samples_ts", table_name="gpu_samples", postgresql_using="brin")
    op.drop_table("gpu_samples")


def downgrade() -> None:
    op.create_table(
        "gpu_samples",
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("gpu_index", sa.SmallInteger(), nullable=False),
        sa.Column("ts", UtcDateTime(timezone=True), nullable=False),
        *(
            sa.Column(row, _TYPES[kind][1], nullable=row not in ("state", "simulated"))
            for row, _, kind in _FIELDS
        ),
        sa.PrimaryKeyConstraint("node_id", "gpu_index", "ts", name=op.f("pk_gpu_samples")),
        postgresql_partition_by="RANGE (ts)",
    )
    op.create_index("ix_gpu_samples_ts", "gpu_samples", ["ts"], unique=False, postgresql_using="brin")
    rows = ", ".join(row for row, _, _ in _FIELDS)
    if op.get_bind().dialect.name == "postgresql":
        _copy_partitions("gpu_sample_packs", "gpu_samples")
        elements = ", ".join(column for _, column, _ in _FIELDS)
        values = ", ".join(_unpacked(f"u.{column}", kind) for _, column, kind in _FIELDS)
        op.execute(
            f"INSERT INTO gpu_samples (node_id, ts, gpu_index, {rows}) SELECT p.node_id, u.ts, u.gpu_index, "
            f"{values} FROM gpu_sample_packs p, unnest(p.sample_ts, p.gpu_index, "
            f"{', '.join(f'p.{column}' for _, column, _ in _FIELDS)}) AS u(ts, gpu_index, {elements}) "
            "ON CONFLICT DO NOTHING"
        )
    else:  # SQLite: unpacked here (joining a json_each per field on its key is quadratic)
        _unpack_on_sqlite(rows)
    op.drop_index("ix_gpu_sample_packs_ts", table_name="gpu_sample_packs", postgresql_using="brin")
    op.drop_table("gpu_sample_packs")
