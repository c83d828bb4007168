"""Raw GPU samples, read: the one module that knows how they lie on disk.

They are packed (``gpu_sample_packs``, :data:`gpuwatch.sql.schema.GPU_SAMPLE_FIELDS`): a row
per node, UTC hour and stored batch, an array per field, scaled fields as integers. Every
reader of raw GPU samples — the rollup pass (``sql/rollups.py``), the node list's counts
(``views/nodes.py``), tests and benchmarks — asks here, never the table itself. The writer is
the daemon's store (``daemon/store/packing.py``).

:func:`gpu_samples_between` is a selectable with one row per (node, GPU, stamp) and a column per
field in its wire unit (``node_id``, ``gpu_index``, ``ts``, then the fields); callers filter,
join and aggregate it in SQL as they would a table. A reading stored twice (two packs that
overlap: a spool copy re-sent in other batches) is one row. On PostgreSQL the packs are
unnested in SQL; on SQLite (one machine, small) they are unpacked in Python into a temporary
table of the connection, so one such selectable is in use per connection at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from gpuwatch.sql.buckets import floor_hour
from gpuwatch.sql.schema import GPU_SAMPLE_FIELDS, PackedField, gpu_sample_packs
from gpuwatch.sql.types import UtcDateTime

_temporary = sa.MetaData()
#: SQLite: the unpacked readings of the connection's current :func:`gpu_samples_between`
_unpacked = sa.Table(
    "gpu_readings_unpacked",
    _temporary,
    sa.Column("node_id", sa.Integer, nullable=False),
    sa.Column("gpu_index", sa.SmallInteger, nullable=False),
    sa.Column("ts", UtcDateTime, nullable=False),
    *(sa.Column(f.name, f.read_as) for f in GPU_SAMPLE_FIELDS),
    prefixes=["TEMPORARY"],
)


def gpu_samples_between(
    conn: sa.Connection,
    start: datetime | None = None,
    end: datetime | None = None,
    *,
    node_id: int | None = None,
) -> sa.Subquery:
    """The GPU samples with ``start <= ts < end`` (either bound left out: unbounded), of one node
    or all, as a subquery: ``node_id``, ``gpu_index``, ``ts`` and a column per field."""
    if conn.dialect.name == "postgresql":
        return _unnested(start, end, node_id).subquery("gpu_readings")
    _unpacked.create(conn, checkfirst=True)
    conn.execute(_unpacked.delete())
    rows = list(_unpack(conn, start, end, node_id))
    if rows:
        conn.execute(_unpacked.insert(), rows)
    return sa.select(_unpacked).subquery("gpu_readings")


def read_gpu_samples(
    conn: sa.Connection,
    start: datetime | None = None,
    end: datetime | None = None,
    node_id: int | None = None,
) -> list[sa.Row]:
    """The readings of :func:`gpu_samples_between` as rows, by node, GPU and stamp (tests, tools)."""
    readings = gpu_samples_between(conn, start, end, node_id=node_id)
    r = readings.c
    return list(conn.execute(sa.select(readings).order_by(r.node_id, r.gpu_index, r.ts)))


def count_gpu_samples(conn: sa.Connection) -> int:
    """How many GPU samples are stored (each reading once)."""
    return sum(gpu_samples_per_node(conn, None).values())


def stored_reading_keys(
    conn: sa.Connection, node_id: int, first: datetime, last: datetime
) -> set[tuple[int, datetime]]:
    """(GPU index, stamp) of each reading of the node stored with ``first <= ts <= last``: what
    the store checks a pack against before adding to one that overlaps it."""
    after = last + timedelta(microseconds=1)  # stamps are whole microseconds on both databases
    if conn.dialect.name == "postgresql":
        return {(r.gpu_index, r.ts) for r in conn.execute(_keys(first, after, node_id))}
    return {(r["gpu_index"], r["ts"]) for r in _unpack(conn, first, after, node_id, keys_only=True)}


def first_gpu_sample_at(conn: sa.Connection) -> datetime | None:
    """The oldest stored GPU sample's stamp; None when there is none."""
    return conn.execute(sa.select(sa.func.min(gpu_sample_packs.c.ts))).scalar()


def gpu_samples_per_node(conn: sa.Connection, since: datetime | None) -> dict[int, int]:
    """Node id -> how many GPU samples it has with ``ts >= since`` (all, for None; nodes with
    none left out)."""
    if conn.dialect.name == "postgresql":
        readings = _keys(since, None, None).subquery("gpu_reading_keys")
        query = sa.select(readings.c.node_id, sa.func.count()).group_by(readings.c.node_id)
        return {node_id: int(n) for node_id, n in conn.execute(query)}
    counts: dict[int, int] = {}
    for reading in _unpack(conn, since, None, None, keys_only=True):
        counts[reading["node_id"]] = counts.get(reading["node_id"], 0) + 1
    return counts


# ----------------------------------------------------------------------------- PostgreSQL
def _read_sql(field: PackedField) -> str:
    """The SQL that reads one unnested element back in the field's wire unit."""
    column = f'u."{field.column}"'
    if field.scale is None:
        return f"{column}::float8" if field.element is sa.REAL else column
    if field.scale >= 1:
        return f"{column}::float8 / {round(field.scale)}"
    return f"{column}::float8 * {round(1 / field.scale)}"


_ELEMENTS = ", ".join(f'"{f.column}"' for f in GPU_SAMPLE_FIELDS)
_UNNESTED = ", ".join(f'p."{f.column}"' for f in GPU_SAMPLE_FIELDS)
_READ = ", ".join(f'{_read_sql(f)} AS "{f.name}"' for f in GPU_SAMPLE_FIELDS)


def _unnested(start: datetime | None, end: datetime | None, node_id: int | None) -> sa.TextualSelect:
    """PostgreSQL: the readings of the range, every field, each (node, GPU, stamp) once."""
    where, params = _where(start, end, node_id)
    sql = (
        "SELECT DISTINCT ON (p.node_id, u.gpu_index, u.ts) p.node_id, u.gpu_index, u.ts, "
        f"{_READ} FROM gpu_sample_packs p CROSS JOIN LATERAL "
        f"unnest(p.sample_ts, p.gpu_index, {_UNNESTED}) AS u(ts, gpu_index, {_ELEMENTS}){where} "
        "ORDER BY p.node_id, u.gpu_index, u.ts"
    )
    return sa.text(sql).bindparams(**params).columns(*(sa.column(c.name, c.type) for c in _unpacked.c))


def _keys(start: datetime | None, end: datetime | None, node_id: int | None) -> sa.TextualSelect:
    """PostgreSQL: (node, GPU, stamp) of each reading of the range, once: only the two arrays
    that make the key are unnested."""
    where, params = _where(start, end, node_id)
    sql = (
        "SELECT DISTINCT p.node_id, u.gpu_index, u.ts FROM gpu_sample_packs p CROSS JOIN LATERAL "
        f"unnest(p.sample_ts, p.gpu_index) AS u(ts, gpu_index){where}"
    )
    return (
        sa.text(sql).bindparams(**params).columns(*(sa.column(c.name, c.type) for c in list(_unpacked.c)[:3]))
    )


def _where(start: datetime | None, end: datetime | None, node_id: int | None) -> tuple[str, dict[str, Any]]:
    """The WHERE of a range's packs (``p``) and readings (``u``), and its parameters. A pack never
    spans an hour, so one with a reading at or after ``start`` starts at or after ``start``'s
    UTC hour: the BRIN index on ``ts`` finds them."""
    where, params = [], {}
    if start is not None:
        where += ["p.ts >= :hour", "p.ts_last >= :start", "u.ts >= :start"]
        params |= {"hour": floor_hour(start), "start": start}
    if end is not None:
        where += ["p.ts < :end", "u.ts < :end"]
        params["end"] = end
    if node_id is not None:
        where.append("p.node_id = :node")
        params["node"] = node_id
    return (f" WHERE {' AND '.join(where)}" if where else ""), params


# ----------------------------------------------------------------------------- SQLite
def _read_value(field: PackedField) -> Any:
    """Python's twin of :func:`_read_sql`: the same arithmetic, so both give the same floats."""
    if field.scale is None:
        return None
    if field.scale >= 1:
        divisor = round(field.scale)
        return lambda v: None if v is None else v / divisor
    factor = round(1 / field.scale)
    return lambda v: None if v is None else float(v * factor)


_READERS = [(f.name, _read_value(f)) for f in GPU_SAMPLE_FIELDS]


def _unpack(
    conn: sa.Connection,
    start: datetime | None,
    end: datetime | None,
    node_id: int | None,
    *,
    keys_only: bool = False,
) -> Iterator[dict[str, Any]]:
    """SQLite: the readings of the range as dicts, each (node, GPU, stamp) once, in the order the
    packs were stored."""
    p = gpu_sample_packs.c
    columns = [p.node_id, p.sample_ts, p.gpu_index] + (
        [] if keys_only else [p[f.column] for f in GPU_SAMPLE_FIELDS]
    )
    query = sa.select(*columns)
    if start is not None:
        query = query.where(p.ts >= floor_hour(start), p.ts_last >= start)
    if end is not None:
        query = query.where(p.ts < end)
    if node_id is not None:
        query = query.where(p.node_id == node_id)
    seen: set[tuple[int, int, datetime]] = set()
    for pack in conn.execute(query.order_by(p.node_id, p.ts)):
        node, stamps, indices, *fields = pack
        for i, (ts, gpu_index) in enumerate(zip(stamps, indices, strict=True)):
            if (start is not None and ts < start) or (end is not None and ts >= end):
                continue
            key = (node, gpu_index, ts)
            if key in seen:
                continue
            seen.add(key)
            reading = {"node_id": node, "gpu_index": gpu_index, "ts": ts}
            if not keys_only:
                for (name, read), values in zip(_READERS, fields, strict=True):
                    value = values[i]
                    reading[name] = value if read is None else read(value)
            yield reading
