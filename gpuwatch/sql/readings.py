"""Raw samples, read: the one module that knows how they lie on disk.

Every sample kind is packed (:data:`gpuwatch.sql.schema.SAMPLE_KINDS`: the GPU samples in
``gpu_sample_packs``, the eight host kinds together in ``host_sample_packs``, each kind's arrays
prefixed by its name): a row per node, UTC hour and stored batch, an array per field, scaled
fields as integers. Every reader of raw samples — the rollup pass (``sql/rollups.py``), the
job tables' attribution (``sql/jobs.py``), the views and the classifier, tests and benchmarks —
asks here, never the tables themselves. The writer is the daemon's store (``daemon/store/packing.py``).

:func:`samples_between` is a selectable with one row per reading and the columns of the row
table the kind had before it was packed (``node_id``, the kind's keys, ``ts``, then a column per
field in its wire unit: ``cpu_samples``, ``attribution_samples``, ...); callers filter, join and
aggregate it in SQL as they would that table. A reading stored twice (two packs that overlap: a
spool copy re-sent in other batches) is one row. On PostgreSQL the packs are unnested in SQL; on
SQLite (one machine, small) they are unpacked in Python into a temporary table of the
connection, so one such selectable per kind is in use per connection at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from functools import cache
from typing import Any

import sqlalchemy as sa

from gpuwatch.sql.buckets import floor_hour
from gpuwatch.sql.schema import SAMPLE_KINDS, PackedField, SampleKind
from gpuwatch.sql.types import UtcDateTime

_temporary = sa.MetaData()


@cache
def _unpacked(kind: str) -> sa.Table:
    """SQLite: the table of the unpacked readings of the connection's current
    :func:`samples_between` of ``kind``; its columns are the readings' everywhere."""
    spec = SAMPLE_KINDS[kind]
    return sa.Table(
        f"{kind}_readings_unpacked",
        _temporary,
        sa.Column("node_id", sa.Integer, nullable=False),
        *(sa.Column(k.name, k.read_as, nullable=False) for k in spec.keys),
        sa.Column("ts", UtcDateTime, nullable=False),
        *(sa.Column(f.name, f.read_as) for f in spec.fields),
        prefixes=["TEMPORARY"],
    )


def samples_between(
    conn: sa.Connection,
    kind: str,
    start: datetime | None = None,
    end: datetime | None = None,
    *,
    node_id: int | None = None,
    job_ids: Sequence[str] | None = None,
) -> sa.Subquery:
    """The ``kind`` samples with ``start <= ts < end`` (either bound left out: unbounded), of one
    node or all, as a subquery named like the kind's old row table (``cpu_samples``).

    ``job_ids`` (kinds keyed by a job: ``job``, ``attribution``): only those jobs' readings,
    picked out of the packs before they are unpacked, so a look-up of a few jobs over all time
    does not unpack every reading."""
    spec = SAMPLE_KINDS[kind]
    if job_ids is not None:
        if "job_id" not in {k.name for k in spec.keys}:
            raise ValueError(f"{kind} samples are not keyed by a job")
        job_ids = list(job_ids)
    if conn.dialect.name == "postgresql":
        return _unnested(spec, start, end, node_id, job_ids).subquery(spec.readings)
    table = _unpacked(kind)
    table.create(conn, checkfirst=True)
    conn.execute(table.delete())
    rows = list(_unpack(conn, spec, start, end, node_id, job_ids=job_ids))
    if rows:
        conn.execute(table.insert(), rows)
    return sa.select(table).subquery(spec.readings)


def read_samples(
    conn: sa.Connection,
    kind: str,
    start: datetime | None = None,
    end: datetime | None = None,
    node_id: int | None = None,
) -> list[sa.Row]:
    """The readings of :func:`samples_between` as rows, by node, keys and stamp (tests, tools)."""
    readings = samples_between(conn, kind, start, end, node_id=node_id)
    r = readings.c
    order = [r.node_id, *(r[k.name] for k in SAMPLE_KINDS[kind].keys), r.ts]
    return list(conn.execute(sa.select(readings).order_by(*order)))


def count_samples(conn: sa.Connection, kind: str) -> int:
    """How many ``kind`` samples are stored (each reading once)."""
    return sum(samples_per_node(conn, kind, None).values())


def stored_keys(conn: sa.Connection, kind: str, node_id: int, first: datetime, last: datetime) -> set[tuple]:
    """(keys..., stamp) of each ``kind`` reading of the node stored with ``first <= ts <= last``:
    what the store checks a pack against before adding to one that overlaps it."""
    spec = SAMPLE_KINDS[kind]
    after = last + timedelta(microseconds=1)  # stamps are whole microseconds on both databases
    names = [*(k.name for k in spec.keys), "ts"]
    if conn.dialect.name == "postgresql":  # rows of (node, keys..., stamp)
        return {tuple(r)[1:] for r in conn.execute(_keys(spec, first, after, node_id))}
    return {
        tuple(r[name] for name in names) for r in _unpack(conn, spec, first, after, node_id, keys_only=True)
    }


def first_sample_at(conn: sa.Connection, kind: str) -> datetime | None:
    """The oldest stored ``kind`` sample's stamp; None when there is none."""
    spec = SAMPLE_KINDS[kind]
    p = spec.table.c
    if not spec.prefix:  # the table is the kind's own: its first pack's stamp
        return conn.execute(sa.select(sa.func.min(p.ts))).scalar()
    # a shared table: the first pack holding the kind starts at or before its first reading,
    # in the same hour (a pack never spans one)
    stamps = p[spec.columns[0]]
    pg = conn.dialect.name == "postgresql"
    held = (sa.func.cardinality if pg else sa.func.json_array_length)(stamps) > 0
    first = conn.execute(sa.select(sa.func.min(p.ts)).where(held)).scalar()
    if first is None:
        return None
    after = floor_hour(first) + timedelta(hours=1)
    if pg:
        keys = _keys(spec, first, after, None).subquery()
        return conn.execute(sa.select(sa.func.min(keys.c.ts))).scalar()
    return min(r["ts"] for r in _unpack(conn, spec, first, after, None, keys_only=True))


def samples_per_node(conn: sa.Connection, kind: str, since: datetime | None) -> dict[int, int]:
    """Node id -> how many ``kind`` samples it has with ``ts >= since`` (all, for None; nodes
    with none left out)."""
    spec = SAMPLE_KINDS[kind]
    if conn.dialect.name == "postgresql":
        readings = _keys(spec, since, None, None).subquery(f"{kind}_reading_keys")
        query = sa.select(readings.c.node_id, sa.func.count()).group_by(readings.c.node_id)
        return {node_id: int(n) for node_id, n in conn.execute(query)}
    counts: dict[int, int] = {}
    for reading in _unpack(conn, spec, since, None, None, keys_only=True):
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


def _quoted(prefix: str, fields: tuple[PackedField, ...]) -> str:
    """``, u."a", u."b"``: the fields' unprefixed names, as the unnested readings (``u``) have them."""
    return "".join(f', {prefix}"{f.column}"' for f in fields)


def _arrays_of(spec: SampleKind, fields: tuple[PackedField, ...]) -> str:
    """``p."cpu_sample_ts", p."cpu_busy_ratio", ...``: the kind's stamps and ``fields`` in its pack."""
    return ", ".join(f'p."{c}"' for c in (spec.columns[0], *(spec.column(f) for f in fields)))


def _unnested(
    spec: SampleKind,
    start: datetime | None,
    end: datetime | None,
    node_id: int | None,
    job_ids: list[str] | None,
) -> sa.TextualSelect:
    """PostgreSQL: the readings of the range, every field, each (node, keys, stamp) once."""
    where, params = _where(spec, start, end, node_id, job_ids)
    key = "p.node_id" + _quoted("u.", spec.keys) + ", u.ts"
    read = "".join(f', {_read_sql(f)} AS "{f.name}"' for f in spec.fields)
    every = (*spec.keys, *spec.fields)
    sql = (
        f"SELECT DISTINCT ON ({key}) p.node_id{_quoted('u.', spec.keys)}, u.ts{read} "
        f"FROM {spec.table.name} p CROSS JOIN LATERAL unnest({_arrays_of(spec, every)}) "
        f"AS u(ts{_quoted('', every)}){where} ORDER BY {key}"
    )
    return sa.text(sql).bindparams(**params).columns(*_columns(spec))


def _keys(
    spec: SampleKind, start: datetime | None, end: datetime | None, node_id: int | None
) -> sa.TextualSelect:
    """PostgreSQL: (node, keys, stamp) of each reading of the range, once: only the arrays that
    make the key are unnested."""
    where, params = _where(spec, start, end, node_id)
    sql = (
        f"SELECT DISTINCT p.node_id{_quoted('u.', spec.keys)}, u.ts FROM {spec.table.name} p "
        f"CROSS JOIN LATERAL unnest({_arrays_of(spec, spec.keys)}) "
        f"AS u(ts{_quoted('', spec.keys)}){where}"
    )
    return sa.text(sql).bindparams(**params).columns(*_columns(spec)[: len(spec.keys) + 2])


def _columns(spec: SampleKind) -> list[sa.ColumnClause]:
    return [sa.column(c.name, c.type) for c in _unpacked(spec.kind).c]


def _where(
    spec: SampleKind,
    start: datetime | None,
    end: datetime | None,
    node_id: int | None,
    job_ids: list[str] | None = None,
) -> tuple[str, dict[str, Any]]:
    """The WHERE of a range's packs (``p``) and readings (``u``), and its parameters. A pack never
    spans an hour, so one with a reading at or after ``start`` starts at or after ``start``'s
    UTC hour: the BRIN index on ``ts`` finds them. ``job_ids``: packs holding one of the jobs
    (``&&``, before unnesting), then its readings."""
    where, params = [], {}
    if job_ids is not None:
        jobs = "CAST(:jobs AS VARCHAR(64)[])"
        where += [f'p."{spec.prefix}job_id" && {jobs}', f"u.job_id = ANY({jobs})"]
        params["jobs"] = job_ids
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
def _read_value(field: PackedField) -> Callable[[Any], Any] | None:
    """Python's twin of :func:`_read_sql`: the same arithmetic, so both give the same floats."""
    if field.scale is None:
        return None
    if field.scale >= 1:
        divisor = round(field.scale)
        return lambda v: None if v is None else v / divisor
    factor = round(1 / field.scale)
    return lambda v: None if v is None else float(v * factor)


@cache
def _readers(kind: str) -> list[tuple[str, Callable[[Any], Any] | None]]:
    return [(f.name, _read_value(f)) for f in SAMPLE_KINDS[kind].fields]


def _unpack(
    conn: sa.Connection,
    spec: SampleKind,
    start: datetime | None,
    end: datetime | None,
    node_id: int | None,
    *,
    keys_only: bool = False,
    job_ids: list[str] | None = None,
) -> Iterator[dict[str, Any]]:
    """SQLite: the readings of the range (of ``job_ids`` only, if given) as dicts, each (node,
    keys, stamp) once, in the order the packs were stored."""
    p = spec.table.c
    keys = [k.name for k in spec.keys]
    arrays = spec.columns[: 1 + len(keys)] if keys_only else spec.columns
    columns = [p.node_id, *(p[name] for name in arrays)]
    query = sa.select(*columns)
    if start is not None:
        query = query.where(p.ts >= floor_hour(start), p.ts_last >= start)
    if end is not None:
        query = query.where(p.ts < end)
    if node_id is not None:
        query = query.where(p.node_id == node_id)
    readers = _readers(spec.kind)
    jobs = None if job_ids is None else (keys.index("job_id"), set(job_ids))
    seen: set[tuple] = set()
    for pack in conn.execute(query.order_by(p.node_id, p.ts)):
        node, stamps, *arrays = pack
        key_arrays, fields = arrays[: len(keys)], arrays[len(keys) :]
        for i, ts in enumerate(stamps):
            if (start is not None and ts < start) or (end is not None and ts >= end):
                continue
            if jobs is not None and key_arrays[jobs[0]][i] not in jobs[1]:
                continue
            key = (node, *(values[i] for values in key_arrays), ts)
            if key in seen:
                continue
            seen.add(key)
            reading = {
                "node_id": node,
                **{name: values[i] for name, values in zip(keys, key_arrays, strict=True)},
                "ts": ts,
            }
            if not keys_only:
                for (name, read), values in zip(readers, fields, strict=True):
                    value = values[i]
                    reading[name] = value if read is None else read(value)
            yield reading
