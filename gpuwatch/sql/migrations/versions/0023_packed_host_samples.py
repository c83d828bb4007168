"""Host samples packed: <kind>_samples -> host_sample_packs

The eight host kinds (cpu, memory, nic, infiniband, disk, job, attribution, agent) packed as the
GPU samples are since 0022, all eight in ONE table: one row per node and batch (within a UTC
hour) holding every kind's arrays, named ``<kind>_<field>`` (empty for a kind the batch did not
hold), instead of a row per sample (``gpuwatch/sql/schema.py: HOST_SAMPLES`` says why). Every
value is kept as it was (float8, int8, text, JSON), so the conversion is exact both ways.
Existing rows are carried over, one pack per node and UTC hour (PostgreSQL: in SQL, a daily
partition at a time); the downgrade unpacks them again.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-07 10:30:00
"""

from __future__ import annotations

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
#: the one table of the eight kinds' packs
PACKS = "host_sample_packs"


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


def _packs_table(metadata: sa.MetaData) -> sa.Table:
    """``host_sample_packs``: every kind's arrays, named ``<kind>_<column>``."""
    arrays = []
    for kind, (keys, fields) in _KINDS.items():
        arrays.append(sa.Column(f"{kind}_sample_ts", UtcDateTimeList(), nullable=False))
        arrays += [sa.Column(f"{kind}_{name}", _array(type_), nullable=False) for name, type_ in keys]
        arrays += [sa.Column(f"{kind}_{name}", _array(type_), nullable=False) for name, type_, _ in fields]
    return sa.Table(
        PACKS,
        metadata,
        sa.Column("node_id", sa.Integer(), nullable=False),
        sa.Column("ts", UtcDateTime(timezone=True), nullable=False),
        sa.Column("ts_last", UtcDateTime(timezone=True), nullable=False),
        *arrays,
        sa.PrimaryKeyConstraint("node_id", "ts", name=f"pk_{PACKS}"),
        postgresql_partition_by="RANGE (ts)",
    )


def _create(table: sa.Table) -> None:
    """Create ``table`` and its BRIN index on ``ts`` (an ordinary one on SQLite)."""
    table.create(op.get_bind())
    op.create_index(f"ix_{table.name}_ts", table.name, ["ts"], unique=False, postgresql_using="brin")


def _days(table: str) -> set[str]:
    """On PostgreSQL, the days (``YYYYMMDD``) ``table`` has a daily partition for."""
    days = {name.removeprefix(f"{table}_p") for name in list_partitions(op.get_bind(), table)}
    return {day for day in days if len(day) == 8 and day.isdigit()}


def _partition(table: str, day: str) -> None:
    first = datetime.strptime(day, "%Y%m%d").replace(tzinfo=timezone.utc)
    op.execute(
        f'CREATE TABLE "{table}_p{day}" PARTITION OF "{table}" '
        f"FOR VALUES FROM ('{first.isoformat()}') TO ('{(first + timedelta(days=1)).isoformat()}')"
    )


def _drop(table: str) -> None:
    op.drop_index(f"ix_{table}_ts", table_name=table, postgresql_using="brin")
    op.drop_table(table)


def _q(names: list[str], prefix: str = "") -> str:
    return ", ".join(f'{prefix}"{name}"' for name in names)


def _bounds(day: str) -> str:
    first = datetime.strptime(day, "%Y%m%d").replace(tzinfo=timezone.utc)
    return f"ts >= '{first.isoformat()}' AND ts < '{(first + timedelta(days=1)).isoformat()}'"


def _pack_on_postgresql(day: str) -> None:
    """One day of every kind's rows as one pack per node and UTC hour holding all kinds (a kind
    without rows there: empty arrays)."""
    ctes, arrays = [], []
    for kind in _KINDS:
        keys, fields = _names(kind)
        order = f"ORDER BY ts{''.join(f', {_q([k])}' for k in keys)}"
        aggregates = ", ".join(f'array_agg("{name}" {order}) AS "{name}"' for name in ("ts", *keys, *fields))
        ctes.append(
            f"{kind} AS (SELECT node_id, date_trunc('hour', ts AT TIME ZONE 'UTC') AS hour, "
            f"min(ts) AS first, max(ts) AS last, {aggregates} FROM {kind}_samples "
            f"WHERE {_bounds(day)} GROUP BY 1, 2)"
        )
        arrays += [f"COALESCE({kind}.\"{name}\", '{{}}')" for name in ("ts", *keys, *fields)]
    hours = " UNION ".join(f"SELECT node_id, hour FROM {kind}" for kind in _KINDS)
    joins = " ".join(f"LEFT JOIN {kind} USING (node_id, hour)" for kind in _KINDS)
    columns = [c.name for c in _packs_table(sa.MetaData()).c]
    op.execute(
        f"WITH {', '.join(ctes)}, hours AS ({hours}) INSERT INTO {PACKS} ({_q(columns)}) "
        f"SELECT node_id, LEAST({', '.join(f'{k}.first' for k in _KINDS)}), "
        f"GREATEST({', '.join(f'{k}.last' for k in _KINDS)}), {', '.join(arrays)} FROM hours {joins}"
    )


def _unpack_on_postgresql(kind: str) -> None:
    keys, fields = _names(kind)
    every = keys + fields
    arrays = _q([f"{kind}_{name}" for name in ("sample_ts", *every)], "p.")
    op.execute(
        f"INSERT INTO {kind}_samples (node_id, ts, {_q(every)}) SELECT p.node_id, u.ts, {_q(every, 'u.')} "
        f"FROM {PACKS} p, unnest({arrays}) AS u(ts, {_q(every)}) ON CONFLICT DO NOTHING"
    )


def _hour(ts: datetime) -> datetime:
    return ts.replace(minute=0, second=0, microsecond=0)


def _pack_on_sqlite(packs: sa.Table) -> None:
    """SQLite: every kind's rows as one pack per node and UTC hour, in Python (values as they
    are), each kind's arrays empty where it has no rows."""
    bind = op.get_bind()
    out: dict[tuple[int, datetime], dict] = {}
    for kind in _KINDS:
        keys, fields = _names(kind)
        rows = _rows_table(kind, sa.MetaData())
        r = rows.c
        for row in bind.execute(sa.select(rows).order_by(r.node_id, r.ts, *(r[k] for k in keys))):
            pack = out.get((row.node_id, _hour(row.ts)))
            if pack is None:
                pack = out[(row.node_id, _hour(row.ts))] = {
                    "node_id": row.node_id,
                    "ts": row.ts,
                    "ts_last": row.ts,
                }
                pack |= {c.name: [] for c in list(packs.c)[3:]}
            pack["ts"], pack["ts_last"] = min(pack["ts"], row.ts), max(pack["ts_last"], row.ts)
            pack[f"{kind}_sample_ts"].append(row.ts)
            for name in keys + fields:
                pack[f"{kind}_{name}"].append(row._mapping[name])
    if out:
        bind.execute(packs.insert(), list(out.values()))


def _unpack_on_sqlite(rows: sa.Table, packs: sa.Table, kind: str) -> None:
    """SQLite: every pack's ``kind`` readings as rows, a reading stored twice once."""
    keys, fields = _names(kind)
    bind = op.get_bind()
    out = []
    for pack in bind.execute(sa.select(packs)).mappings():
        for i, ts in enumerate(pack[f"{kind}_sample_ts"]):
            values = {name: pack[f"{kind}_{name}"][i] for name in keys + fields}
            out.append({"node_id": pack["node_id"], "ts": ts, **values})
    if out:
        bind.execute(sqlite.insert(rows).on_conflict_do_nothing(), out)


def upgrade() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    packs = _packs_table(sa.MetaData())
    _create(packs)
    if pg:
        days = set().union(*(_days(f"{kind}_samples") for kind in _KINDS))
        for day in sorted(days):
            _partition(PACKS, day)
            _pack_on_postgresql(day)
    else:
        _pack_on_sqlite(packs)
    for kind in _KINDS:
        _drop(f"{kind}_samples")


def downgrade() -> None:
    pg = op.get_bind().dialect.name == "postgresql"
    packs = _packs_table(sa.MetaData())
    for kind in _KINDS:
        rows = _rows_table(kind, sa.MetaData())
        _create(rows)
        if pg:
            for day in sorted(_days(PACKS)):
                _partition(rows.name, day)
            _unpack_on_postgresql(kind)
        else:
            _unpack_on_sqlite(rows, packs, kind)
    _drop(PACKS)
