"""Host samples packed: <kind>_samples -> <kind>_sample_packs

The eight host kinds (cpu, memory, nic, infiniband, disk, job, attribution, agent) as the GPU
samples are since 0022: one row per node and batch (within a UTC hour), an array per field,
instead of a row per sample (``gpuwatch/sql/schema.py: HOST_SAMPLES`` says why). Every value
is kept as it was (float8, int8, text, JSON), so the conversion is exact both ways. Existing
rows are carried over, one pack per node and UTC hour; the downgrade unpacks them again.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07 10:30:00
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB

from gpuwatch.sql.partitions import list_partitions
from gpuwatch.sql.types import UtcDateTime, UtcDateTimeList

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_DOUBLE = sa.Float(precision=53).with_variant(sa.DOUBLE_PRECISION(), "postgresql")
_JSON = sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")
_TEXT64 = sa.String(64)


def _d(*names: str) -> list[tuple[str, object, bool]]:
    return [(name, _DOUBLE, True) for name in names]


def _i(*names: str) -> list[tuple[str, object, bool]]:
    return [(name, sa.BigInteger(), True) for name in names]


#: kind -> (its keys after node_id, before ts; its other columns (name, type, nullable)), frozen
#: as of this revision: the row tables' columns, and the packs' arrays of the same names
_KINDS: dict[str, tuple[list[tuple[str, object]], list[tuple[str, object, bool]]]] = {
    "cpu": (
        [],
        [
            ("cores", sa.Integer(), False),
            *_d("busy_ratio", "user_ratio", "system_ratio", "iowait_ratio", "steal_ratio"),
            ("per_core_busy_ratio", _JSON, True),
            *_d("load1"),
            ("threads_per_core", sa.SmallInteger(), True),
        ],
    ),
    "memory": (
        [],
        [
            *_i("total_bytes", "available_bytes", "used_bytes", "swap_total_bytes", "swap_used_bytes"),
            *_d("swap_in_bytes_per_s", "swap_out_bytes_per_s"),
        ],
    ),
    "nic": (
        [("device", _TEXT64)],
        [
            *_d("rx_bytes_per_s", "tx_bytes_per_s", "rx_packets_per_s", "tx_packets_per_s"),
            *_i("rx_errors", "tx_errors"),
        ],
    ),
    "infiniband": (
        [("device", _TEXT64), ("port", sa.SmallInteger())],
        _d(
            "rx_bytes_per_s",
            "tx_bytes_per_s",
            "rx_packets_per_s",
            "tx_packets_per_s",
            "link_rate_bytes_per_s",
        ),
    ),
    "disk": (
        [("device", _TEXT64)],
        _d("read_bytes_per_s", "write_bytes_per_s", "reads_per_s", "writes_per_s", "busy_ratio"),
    ),
    "job": (
        [("job_id", _TEXT64)],
        [
            *_d("cpu_used_cores", "cpu_allocated_cores"),
            *_i("memory_used_bytes", "memory_limit_bytes", "memory_swap_bytes", "memory_cache_bytes"),
            *_d("memory_pressure_ratio"),
            ("cgroup_version", sa.SmallInteger(), True),
        ],
    ),
    "attribution": (
        [("gpu_index", sa.SmallInteger()), ("job_id", _TEXT64)],
        [
            ("gpu_uuid", sa.String(96), True),
            ("user", _TEXT64, True),
            *_i("uid"),
            ("source", sa.String(16), False),
            ("pids", _JSON, True),
        ],
    ),
    "agent": (
        [],
        [
            *_i("spool_batches", "spool_bytes", "dropped_batches_total"),
            ("collector_errors", _JSON, True),
            ("collector_seconds", _JSON, True),
        ],
    ),
}


def _array(item: object) -> sa.types.TypeEngine:
    return sa.JSON(none_as_null=True).with_variant(postgresql.ARRAY(item, dimensions=1), "postgresql")


def _names(kind: str) -> tuple[list[str], list[str]]:
    keys, fields = _KINDS[kind]
    return [name for name, _ in keys], [name for name, _, _ in fields]


def _rows_table(kind: str, metadata: sa.MetaData) -> sa.Table:
    keys, fields = _KINDS[kind]
    return sa.Table(
        f"{kind}_samples",
        metadata,
        sa.Column("node_id", sa.Integer(), nullable=False),
        *(sa.Column(name, type_, nullable=False) for name, type_ in keys),
        sa.Column("ts", UtcDateTime(timezone=True), nullable=False),
        *(sa.Column(name, type_, nullable=nullable) for name, type_, nullable in fields),
        sa.PrimaryKeyConstraint("node_id", *(name for name, _ in keys), "ts", name=f"pk_{kind}_samples"),
        postgresql_partition_by="RANGE (ts)",
    )


def _packs_table(kind: str, metadata: sa.MetaData) -> sa.Table:
    keys, fields = _KINDS[kind]
    return sa.Table(
        f"{kind}_sample_packs",
        metadata,
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("ts", UtcDateTime(timezone=True), nullable=False),
        sa.Column("ts_last", UtcDateTime(timezone=True), nullable=False),
        sa.Column("sample_ts", UtcDateTimeList(), nullable=False),
        *(sa.Column(name, _array(type_), nullable=False) for name, type_ in keys),
        *(sa.Column(name, _array(type_), nullable=False) for name, type_, _ in fields),
        sa.PrimaryKeyConstraint("node_id", "ts", name=f"pk_{kind}_sample_packs"),
        postgresql_partition_by="RANGE (ts)",
    )


def _create(table: sa.Table) -> None:
    """Create ``table`` and its BRIN index on ``ts`` (an ordinary one on SQLite)."""
    table.create(op.get_bind())
    op.create_index(f"ix_{table.name}_ts", table.name, ["ts"], unique=False, postgresql_using="brin")


def _copy_partitions(source: str, target: str) -> None:
    """On PostgreSQL, give ``target`` a daily partition for each day ``source`` has one."""
    for name in list_partitions(op.get_bind(), source):
        day = name.removeprefix(f"{source}_p")
        if len(day) != 8 or not day.isdigit():
            continue
        first = datetime.strptime(day, "%Y%m%d").replace(tzinfo=timezone.utc)
        op.execute(
            f'CREATE TABLE "{target}_p{day}" PARTITION OF "{target}" '
            f"FOR VALUES FROM ('{first.isoformat()}') TO ('{(first + timedelta(days=1)).isoformat()}')"
        )


def _drop(table: str) -> None:
    op.drop_index(f"ix_{table}_ts", table_name=table, postgresql_using="brin")
    op.drop_table(table)


def _q(names: list[str], prefix: str = "") -> str:
    return ", ".join(f'{prefix}"{name}"' for name in names)


def _pack_on_postgresql(kind: str) -> None:
    keys, fields = _names(kind)
    order = f"ORDER BY ts{''.join(f', {_q([k])}' for k in keys)}"
    arrays = ", ".join(f'array_agg("{name}" {order})' for name in ("ts", *keys, *fields))
    op.execute(
        f"INSERT INTO {kind}_sample_packs (node_id, ts, ts_last, sample_ts, {_q(keys + fields)}) "
        f"SELECT node_id, min(ts), max(ts), {arrays} FROM {kind}_samples "
        "GROUP BY node_id, date_trunc('hour', ts AT TIME ZONE 'UTC')"
    )


def _unpack_on_postgresql(kind: str) -> None:
    keys, fields = _names(kind)
    every = keys + fields
    op.execute(
        f"INSERT INTO {kind}_samples (node_id, ts, {_q(every)}) SELECT p.node_id, u.ts, {_q(every, 'u.')} "
        f"FROM {kind}_sample_packs p, unnest(p.sample_ts, {_q(every, 'p.')}) AS u(ts, {_q(every)}) "
        "ON CONFLICT DO NOTHING"
    )


def _hour(ts: datetime) -> datetime:
    return ts.replace(minute=0, second=0, microsecond=0)


def _pack_on_sqlite(rows: sa.Table, packs: sa.Table, kind: str) -> None:
    """SQLite: the rows as one pack per node and UTC hour, in Python (values as they are)."""
    keys, fields = _names(kind)
    bind = op.get_bind()
    r = rows.c
    query = sa.select(rows).order_by(r.node_id, r.ts, *(r[k] for k in keys))
    group: list[sa.Row] = []

    def flush() -> Iterator[dict]:
        if group:
            stamps = [row.ts for row in group]
            yield {
                "node_id": group[0].node_id,
                "ts": min(stamps),
                "ts_last": max(stamps),
                "sample_ts": stamps,
                **{name: [row._mapping[name] for row in group] for name in keys + fields},
            }

    out: list[dict] = []
    for row in bind.execute(query):
        if group and (row.node_id != group[0].node_id or _hour(row.ts) != _hour(group[0].ts)):
            out += flush()
            group = []
        group.append(row)
    out += flush()
    if out:
        bind.execute(packs.insert(), out)


def _unpack_on_sqlite(rows: sa.Table, packs: sa.Table, kind: str) -> None:
    """SQLite: every pack's readings as rows, a reading stored twice once."""
    keys, fields = _names(kind)
    bind = op.get_bind()
    out = []
    for pack in bind.execute(sa.select(packs)).mappings():
        for i, ts in enumerate(pack["sample_ts"]):
            out.append(
                {"node_id": pack["node_id"], "ts": ts, **{name: pack[name][i] for name in keys + fields}}
            )
    if out:
        bind.execute(sqlite.insert(rows).on_conflict_do_nothing(), out)


def upgrade() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    for kind in _KINDS:
        metadata = sa.MetaData()
        rows, packs = _rows_table(kind, metadata), _packs_table(kind, metadata)
        _create(packs)
        if pg:
            _copy_partitions(rows.name, packs.name)
            _pack_on_postgresql(kind)
        else:
            _pack_on_sqlite(rows, packs, kind)
        _drop(rows.name)


def downgrade() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    for kind in _KINDS:
        metadata = sa.MetaData()
        rows, packs = _rows_table(kind, metadata), _packs_table(kind, metadata)
        _create(rows)
        if pg:
            _copy_partitions(packs.name, rows.name)
            _unpack_on_postgresql(kind)
        else:
            _unpack_on_sqlite(rows, packs, kind)
        _drop(packs.name)
