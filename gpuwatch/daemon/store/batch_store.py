"""Storing one batch: all of it or none of it, and never twice.

The batch id goes into ``ingested_batches`` in the same transaction as the samples. A
batch seen before inserts nothing there (``ON CONFLICT DO NOTHING``), and then the
transaction stores nothing else and reports ``duplicate``. A daemon killed mid-batch
rolls back, and the agent, which never got a 200, sends it again. Samples of every kind are
packed (``daemon/store/packing.py``; the eight host kinds share one row per node, group and
hour), and a sample that arrives in two different batches (an agent restored from an old
spool copy) is still stored once: a pack that meets one stored before (the same key: node,
first stamp), or a reading twice in one group, sends the group a
batch at a time, and each batch's readings are checked against what is stored
(``sql.readings.stored_keys``, kind by kind); only new ones go in, appended to the node's pack
of that table that starts at their first stamp if there is one.

How rows go in depends on the database (``BulkMode``):

* ``unnest`` (the PostgreSQL default): ONE statement for the whole group, an
  ``INSERT INTO t (...) VALUES`` of packs per table as data-modifying CTEs, each array in binary
  (``daemon/store/pg_arrays.py``) from the batches' columns (``daemon/store/columns.py``: a v2
  batch's own lists, a v1 batch's models transposed; no dict per row). It runs without
  ``ON CONFLICT`` inside a savepoint and, only if it meets a sample stored before, again a
  batch at a time (:meth:`BatchStore._write_unnest`); the batch claim is an
  ``INSERT ... SELECT * FROM unnest(%b::type[], ...)`` with ``RETURNING``. Why not ``COPY`` per table:
  COPY cannot pipeline, needs a savepoint round trip per table, and building its rows in
  Python cost more than the insert saves (``bench/store_ab.py``, figures in
  ``bench/README.md``).
* ``insert`` (SQLite, and a portable reference on PostgreSQL): SQLAlchemy inserts of dict rows
  (packs) per table, not pipelined. One query reads the spans of the stored packs the group's
  may meet; a pack that meets none (nor another of the group) and holds no reading twice goes
  in as it is, the others reading by reading against what is stored (:func:`_apart`). Measured
  on SQLite, one-cycle batches of 8 GPUs: 3.4 ms each, 2.3 when the host kinds were rows.

The answer's ``samples`` is what the database added: all of the batch when nothing in it was
stored before, else the group goes again from a savepoint a batch at a time and each batch is
credited with the rows it added (a sample repeated in a batch, or stored before under another
batch id, counts once). ``ingested_batches.samples`` is what the batch held.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from enum import Enum
from typing import Any, ClassVar

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from gpuwatch.clock import utcnow
from gpuwatch.daemon.store import packing, pg_arrays
from gpuwatch.daemon.store.columns import BatchColumns, columns_of
from gpuwatch.sql import readings
from gpuwatch.sql.buckets import floor_hour
from gpuwatch.sql.partitions import PartitionManager, utc_day
from gpuwatch.sql.schema import (
    GPU_IDENTITY_FIELDS,
    PACK_TABLES,
    SAMPLE_KINDS,
    gpus,
    ingested_batches,
    nodes,
)
from gpuwatch.wire import Batch
from gpuwatch.wire import v2 as wire_v2
from gpuwatch.wire.v2 import ColumnarBatch


class IngestStatus(str, Enum):
    STORED = "stored"
    DUPLICATE = "duplicate"
    REFUSED = "refused"  # the database itself refused the batch (daemon/writer.py), nothing stored


@dataclass(frozen=True)
class IngestResult:
    status: IngestStatus
    samples: int
    detail: str = ""  # why, for REFUSED


def _insert(conn: sa.Connection, table: sa.Table) -> Any:
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(table)


def sample_rows(node_id: int, batch: AnyBatch) -> dict[str, list[dict]]:
    """Rows (dicts) per table name: the ``insert`` path's rows, and the benchmarks' raw COPY.

    Every kind's samples and the GPU processes become packed rows (``daemon/store/packing.py``),
    one per UTC hour (processes: day) of the batch.
    """
    return packing.pack_rows(node_id, _columns(batch))


def gpu_identities(batch: AnyBatch) -> dict[int, tuple]:
    """GPU index -> identity (:data:`GPU_IDENTITY_FIELDS`: uuid, name, bus) as last seen in
    the batch."""
    return _columns(batch).gpu_identities()


def days_of(batch: AnyBatch) -> set[date]:
    """The UTC days (daily partitions) the batch's samples fall on, whatever zone they came in."""
    return {utc_day(t) for t in _columns(batch).stamps}


#: what the store takes: either wire format, or a batch already in columns
AnyBatch = Batch | ColumnarBatch | BatchColumns


def sample_count(batch: AnyBatch) -> int:
    """How many samples the batch holds, whatever its form."""
    if isinstance(batch, Batch):
        return len(batch.samples)
    if isinstance(batch, BatchColumns):
        return batch.samples
    return wire_v2.sample_count(batch)


def _columns(batch: AnyBatch) -> BatchColumns:
    return batch if isinstance(batch, BatchColumns) else columns_of(batch)


class BulkMode(str, Enum):
    INSERT = "insert"
    UNNEST = "unnest"


#: ``gpus.last_seen_at`` is refreshed at most this often per GPU when its identity is unchanged
GPU_IDENTITY_REFRESH_S = 600.0


#: a node's ``last_seen_at``/version/sequence after a stored batch, one parameter set per node
_NODE_SEEN = (
    nodes.update()
    .where(nodes.c.id == sa.bindparam("node"))
    .values(
        last_seen_at=sa.bindparam("seen"), agent_version=sa.bindparam("version"), last_seq=sa.bindparam("seq")
    )
)


class BatchStore:
    """Writes batches; owns the partition cache so DDL runs once per new day."""

    def __init__(self, engine: sa.Engine, bulk: BulkMode | str | None = None) -> None:
        self.engine = engine
        self.partitions = PartitionManager(engine)
        self._tables = {t.name: t for t in PACK_TABLES}
        is_pg = engine.dialect.name == "postgresql"
        self.bulk = BulkMode(bulk) if bulk else (BulkMode.UNNEST if is_pg else BulkMode.INSERT)
        # (node_id, gpu_index) -> (identity, monotonic time of the last upsert): the upsert
        # is ~20 % of a small batch's cost and almost always a no-op
        self._gpu_seen: dict[tuple[int, int], tuple[tuple, float]] = {}
        #: groups that met a sample already stored (or one sent twice) and went again, a batch
        #: at a time, to count what each added
        self.conflict_retries = 0
        if self.bulk is BulkMode.UNNEST and not is_pg:
            raise ValueError("bulk='unnest' needs PostgreSQL")

    def store(self, node_id: int, batch: AnyBatch) -> IngestResult:
        return self.store_many([(node_id, batch)])[0]

    def store_many(self, batches: list[tuple[int, AnyBatch]]) -> list[IngestResult]:
        """Store several batches in ONE transaction (group commit); a result per item, in order.

        The daemon's writer groups concurrent requests this way: one statement per table
        for the whole group instead of one per batch. Each batch is still all-or-nothing
        and once-only: the group commits or rolls back whole, and a batch id already stored
        (or twice in the group) reports ``duplicate`` and adds no rows.
        """
        if not batches:
            return []
        items = [(node_id, _columns(batch)) for node_id, batch in batches]
        self.partitions.ensure_days(day for _, batch in items for day in days_of(batch))
        now = utcnow()
        changed: dict[int, dict[int, tuple]] = {}
        with self.engine.begin() as conn:
            new = self._claim(conn, items, now)
            results: list[IngestResult] = []
            stored: list[tuple[int, BatchColumns]] = []
            last_batch: dict[int, BatchColumns] = {}
            for node_id, batch in items:
                key = (node_id, batch.batch_id)
                if key not in new:
                    results.append(IngestResult(IngestStatus.DUPLICATE, 0))
                    continue
                new.discard(key)  # the same batch twice in one group: the second is a duplicate
                stored.append((node_id, batch))
                node_changed = self._changed_identities(node_id, gpu_identities(batch))
                if node_changed:
                    changed.setdefault(node_id, {}).update(node_changed)
                last_batch[node_id] = batch
                results.append(IngestResult(IngestStatus.STORED, batch.samples))
            if self.bulk is BulkMode.UNNEST:
                kept = self._write_unnest(
                    conn, stored, lambda: self._write_small(conn, changed, last_batch, now)
                )
            else:
                kept = self._write_rows(conn, stored)
                with _pipelined(conn):
                    self._write_small(conn, changed, last_batch, now)
        for node_id, node_changed in changed.items():
            self._remember_identities(node_id, node_changed)
        return _with_stored_counts(results, kept)

    def _claim(
        self, conn: sa.Connection, items: list[tuple[int, BatchColumns]], now: Any
    ) -> set[tuple[int, str]]:
        """Record every batch id; the (node, batch id) pairs that were not there before."""
        claims = []
        for node_id, batch in items:
            stamps = batch.stamps
            claims.append(
                {
                    "node_id": node_id,
                    "batch_id": batch.batch_id,
                    "seq": batch.seq,
                    "received_at": now,
                    "samples": batch.samples,
                    "min_ts": min(stamps, default=None),
                    "max_ts": max(stamps, default=None),
                }
            )
        if self.bulk is BulkMode.UNNEST:  # the same unnest insert as the samples, + RETURNING
            insert = _UnnestInsert.of(ingested_batches)
            columns = {name: [claim[name] for claim in claims] for name in insert.names}
            with _sa_errors(), psycopg.RawCursor(_dbapi(conn)) as cur:
                pg_arrays.register(cur)
                cur.execute(
                    _numbered(f"{insert.sql_on_conflict} RETURNING node_id, batch_id"),
                    insert.arrays(columns),
                )
                return set(cur.fetchall())
        return {
            (r.node_id, r.batch_id)
            for r in conn.execute(
                _insert(conn, ingested_batches)
                .on_conflict_do_nothing()
                .returning(ingested_batches.c.node_id, ingested_batches.c.batch_id),
                claims,
            )
        }

    def _write_rows(self, conn: sa.Connection, stored: list[tuple[int, BatchColumns]]) -> list[int] | None:
        """``insert``: rows as dicts, one SQLAlchemy executemany per table for the whole group.

        None when every sample went in; else (a sample stored before, or sent twice) the group
        goes again from a savepoint one batch at a time, and the result is how many samples
        each batch really added (:func:`_with_stored_counts`).
        """
        all_rows: dict[str, list[dict]] = defaultdict(list)
        per_batch = [sample_rows(node_id, batch) for node_id, batch in stored]
        for rows in per_batch:
            for name, table_rows in rows.items():
                all_rows[name].extend(table_rows)
        savepoint = conn.begin_nested()
        # not pipelined: SQLAlchemy closes an insert's cursor before a pipeline's sync would
        # give it its row count
        if self._insert_rows(conn, all_rows) == sum(batch.samples for _, batch in stored):
            savepoint.commit()
            return None
        savepoint.rollback()
        self.conflict_retries += 1
        return [self._insert_rows(conn, rows) for rows in per_batch]

    def _insert_rows(self, conn: sa.Connection, rows: dict[str, list[dict]]) -> int:
        """Insert ``rows`` (per table name) skipping any already there; how many samples that
        added (a sample pack counts its new readings; process packs are not samples)."""
        added = 0
        packs = {name: table_rows for name, table_rows in rows.items() if packing.holds_samples(name)}
        spans = _stored_spans(conn, [self._tables[name] for name in packs], packs)
        for name, table_rows in rows.items():
            if name not in packs:  # the processes' packs
                conn.execute(_insert(conn, self._tables[name]).on_conflict_do_nothing(), table_rows)
                continue
            clean, overlapping = _apart(spans[name], table_rows, name)
            if clean:  # the common case: one statement for the table
                conn.execute(self._tables[name].insert(), clean)
                added += sum(packing.readings_in(name, packing.pack_fields(name, row)) for row in clean)
            added += sum(_add_new_readings(conn, self._tables[name], row) for row in overlapping)
        return added

    def _write_unnest(
        self, conn: sa.Connection, stored: list[tuple[int, BatchColumns]], then: Callable[[], None]
    ) -> list[int] | None:
        """``unnest``: per table ONE ``INSERT ... SELECT FROM unnest(<one array per column>)``.

        The batches' columns (``daemon/store/columns.py``) are concatenated per table; no per-row
        dicts. The tables' inserts go as ONE statement (data-modifying CTEs, :func:`_as_one`): its
        text depends only on which tables have rows, so psycopg prepares it, and per-statement
        overhead (a tenth of a millisecond each in psycopg) is paid once. Everything, ``then``
        included, goes in one pipeline sync.
        Optimistic: the rows first go without ``ON CONFLICT`` inside a savepoint, a quarter less
        server CPU (``bench/README.md``); a sample already stored (a restored spool copy re-sent
        under new batch ids, or twice in one group) is a unique violation, and then all of it runs
        again from the savepoint as ``unnest`` inserts with ``ON CONFLICT DO NOTHING``, one batch
        at a time so that each batch's added samples are counted.

        None when every sample went in; else the samples each batch added.
        """
        try:
            statements = list(self._unnest_statements(stored))
        except packing.RepeatedReadings:
            statements = None
        with psycopg.RawCursor(_dbapi(conn)) as cur:
            pg_arrays.register(cur)
            try:
                if statements is None:  # a GPU reading twice in the group: a batch at a time
                    raise _Repeated
                with _pipelined(conn):
                    cur.execute("SAVEPOINT gpuwatch_rows")
                    for inserts, params in _chunks(statements):
                        cur.execute(_numbered(_as_one([insert.sql for insert, _ in inserts])), params)
                    then()
                    cur.execute("RELEASE SAVEPOINT gpuwatch_rows")
                return None
            except sa.exc.IntegrityError as exc:
                if not isinstance(exc.orig, psycopg.errors.UniqueViolation):
                    raise
                with _sa_errors():
                    cur.execute("ROLLBACK TO SAVEPOINT gpuwatch_rows")
            except _Repeated:
                pass
            self.conflict_retries += 1
            # rare (a restored spool, a buggy agent): a statement per batch and table, each
            # waiting for its row count, outside the pipeline
            added = []
            with _sa_errors():
                for one in stored:
                    count = 0
                    for insert, params in self._unnest_statements([one], samples=False):
                        cur.execute(_numbered(insert.sql_on_conflict), params)
                    node_id, batch = one
                    for table, fields in packing.sample_fields(batch):
                        new = packing.new_readings(table, fields, _stored_keys(conn, node_id))
                        if packing.readings_in(table, new):
                            appending = packing.PackInsert.appending(table, node_id, new)
                            cur.execute(_numbered(appending.sql), appending.params)
                            count += packing.readings_in(table, new)
                    added.append(count)
            with _pipelined(conn):
                then()
            return added

    @staticmethod
    def _unnest_statements(
        stored: list[tuple[int, BatchColumns]], *, samples: bool = True
    ) -> Iterator[tuple[Any, list]]:
        """(insert, its parameters) per pack table that has rows in ``stored``; the processes'
        only for ``samples=False``. Raises ``packing.RepeatedReadings`` for a reading twice in
        the group."""
        for packs in packing.PackInsert.of(stored, samples=samples):
            yield packs, packs.params

    def _write_small(
        self,
        conn: sa.Connection,
        changed: dict[int, dict[int, tuple]],
        last_batch: dict[int, BatchColumns],
        now: Any,
    ) -> None:
        """GPU identities that changed, and each node's last-seen mark."""
        # sorted: one lock order for every writer (two groups upserting the same nodes' GPUs
        # in opposite orders would deadlock, and fall back to a transaction per batch)
        for node_id, node_changed in sorted(changed.items()):
            self._upsert_gpus(conn, node_id, node_changed, now)
        if last_batch:  # one executemany, not a statement per node
            conn.execute(
                _NODE_SEEN,
                [
                    {"node": node_id, "seen": now, "version": batch.agent_version, "seq": batch.seq}
                    # sorted: a fixed lock order between concurrent writers
                    for node_id, batch in sorted(last_batch.items())
                ],
            )

    def _changed_identities(self, node_id: int, identities: dict[int, tuple]) -> dict[int, tuple]:
        now = time.monotonic()
        out = {}
        for index, ident in identities.items():
            seen = self._gpu_seen.get((node_id, index))
            if seen is None or seen[0] != ident or now - seen[1] > GPU_IDENTITY_REFRESH_S:
                out[index] = ident
        return out

    def _remember_identities(self, node_id: int, stored: dict[int, tuple]) -> None:
        """Only after the commit: a rolled-back upsert must be retried by the next batch."""
        now = time.monotonic()
        for index, ident in stored.items():
            self._gpu_seen[(node_id, index)] = (ident, now)

    @staticmethod
    def _upsert_gpus(conn: sa.Connection, node_id: int, identities: dict[int, tuple], now: Any) -> None:
        if not identities:
            return
        stmt = _insert(conn, gpus)
        stmt = stmt.on_conflict_do_update(
            index_elements=[gpus.c.node_id, gpus.c.gpu_index],
            set_={
                # keep a known identity when a lost GPU reports none
                **{f: sa.func.coalesce(stmt.excluded[f], gpus.c[f]) for f in GPU_IDENTITY_FIELDS},
                "last_seen_at": stmt.excluded.last_seen_at,
            },
        )
        conn.execute(
            stmt,
            [
                {
                    "node_id": node_id,
                    "gpu_index": i,
                    **dict(zip(GPU_IDENTITY_FIELDS, ident, strict=True)),
                    "first_seen_at": now,
                    "last_seen_at": now,
                }
                for i, ident in sorted(identities.items())
            ],
        )


class _Repeated(Exception):
    """The group holds a GPU reading twice: store it a batch at a time."""


def _stored_keys(conn: sa.Connection, node_id: int) -> Callable[[str, list[Any]], set[tuple]]:
    """(kind, stamps) -> (keys..., stamp) of the node's ``kind`` readings already stored over
    the stamps' span: what ``packing.new_readings`` checks a pack's readings against."""
    return lambda kind, stamps: readings.stored_keys(conn, kind, node_id, min(stamps), max(stamps))


#: the stored packs' spans per table name, node id: [(first stamp, last stamp), ...]
_Spans = dict[str, dict[int, list[tuple[Any, Any]]]]


def _stored_spans(conn: sa.Connection, tables: list[sa.Table], packs: dict[str, list[dict]]) -> _Spans:
    """The portable path: the span of every stored pack of ``tables`` that may meet one of
    ``packs`` (rows per table name), in ONE query for the group. A pack never spans an hour,
    so one that reaches the earliest stamp starts in its hour or later."""
    spans: _Spans = {t.name: defaultdict(list) for t in tables}
    every = [row for rows in packs.values() for row in rows]
    if not every:
        return spans
    first, last = min(row["ts"] for row in every), max(row["ts_last"] for row in every)
    node_ids = sorted({row["node_id"] for row in every})
    selects = [
        sa.select(sa.literal(t.name).label("name"), t.c.node_id, t.c.ts, t.c.ts_last).where(
            t.c.node_id.in_(node_ids), t.c.ts >= floor_hour(first), t.c.ts <= last, t.c.ts_last >= first
        )
        for t in tables
    ]
    for name, node_id, ts, ts_last in conn.execute(sa.union_all(*selects)):
        spans[name][node_id].append((ts, ts_last))
    return spans


def _apart(
    stored: dict[int, list[tuple[Any, Any]]], packs: list[dict[str, Any]], table: str
) -> tuple[list[dict], list[dict]]:
    """The portable path: sample ``packs`` of ``table`` split into those whose span meets no ``stored``
    pack of their node nor another of ``packs`` and that hold no reading twice (inserted as
    they are), and the others (checked reading by reading, in order: :func:`_add_new_readings`)."""
    spans = defaultdict(list, {node_id: list(found) for node_id, found in stored.items()})
    for row in packs:
        spans[row["node_id"]].append((row["ts"], row["ts_last"]))
    clean, overlapping = [], []
    for row in packs:  # a pack meets its own span once
        met = sum(ts <= row["ts_last"] and row["ts"] <= ts_last for ts, ts_last in spans[row["node_id"]])
        (clean if met == 1 and not packing.holds_repeats(table, row) else overlapping).append(row)
    return clean, overlapping


def _add_new_readings(conn: sa.Connection, table: sa.Table, row: dict[str, Any]) -> int:
    """The portable path: store the readings of a sample pack row (dict) of ``table`` not stored
    yet, each once, as a pack of their own or, where a pack of the node starts at their first
    stamp, appended to it; how many went in."""
    fields = packing.pack_fields(table.name, row)
    new = packing.new_readings(table.name, fields, _stored_keys(conn, row["node_id"]))
    added = packing.readings_in(table.name, new)
    if not added:
        return 0
    pack = packing.pack_row(table.name, row["node_id"], new)
    key = (table.c.node_id == pack["node_id"]) & (table.c.ts == pack["ts"])
    there = conn.execute(sa.select(table).where(key)).first()
    if there is None:
        conn.execute(table.insert(), pack)
    else:  # rare (an overlapping re-send): this pack's readings join that one's
        columns = packing.element_columns(table.name)
        joined = {name: list(getattr(there, name)) + list(pack[name]) for name in columns}
        conn.execute(table.update().where(key).values(ts_last=max(there.ts_last, pack["ts_last"]), **joined))
    return added


def _with_stored_counts(results: list[IngestResult], added: list[int] | None) -> list[IngestResult]:
    """The results with each stored batch's sample count replaced by what it really added
    (``added``: one count per stored batch, in order; None when every sample went in)."""
    if added is None:
        return results
    counts = iter(added)
    return [IngestResult(r.status, next(counts)) if r.status is IngestStatus.STORED else r for r in results]


@contextlib.contextmanager
def _pipelined(conn: sa.Connection) -> Iterator[None]:
    """On PostgreSQL, send the statements inside without waiting for each one's result.

    A one-cycle batch is a dozen small statements; one after the other they are a dozen round
    trips. psycopg's pipeline mode sends them all and syncs once at the end (results of
    statements that need none are read then; errors surface at the sync, inside the
    transaction, so the batch still stores whole or not at all). Statements inside must not
    need their results (no RETURNING, no single-row INSERT into a table with an autoincrement
    key): SQLAlchemy cannot read a result there and fails loudly (ResourceClosedError).
    """
    if conn.dialect.name != "postgresql":
        yield
        return
    with _sa_errors(), _dbapi(conn).pipeline():
        yield


@contextlib.contextmanager
def _sa_errors() -> Iterator[None]:
    """psycopg errors raised outside SQLAlchemy's execute (raw cursors, a pipeline's sync),
    wrapped as SQLAlchemy would wrap them: callers see one exception family (the ingest
    answers 503 to OperationalError, the store retries on IntegrityError)."""
    try:
        yield
    except psycopg.Error as exc:
        raise sa.exc.DBAPIError.instance(None, None, exc, psycopg.Error) from exc


#: most parameters one PostgreSQL statement can carry (the protocol's 16-bit count)
MAX_STATEMENT_PARAMETERS = 65_535


def _chunks(statements: list[tuple[Any, list]]) -> list[tuple[list[tuple[Any, list]], list]]:
    """(inserts, their parameters) per statement: one, unless the parameter limit splits it."""
    return [
        (inserts, [value for _, values in inserts for value in values])
        for inserts in _by_parameter_limit(statements)
    ]


def _by_parameter_limit(statements: list[tuple[Any, list]]) -> Iterator[list[tuple[Any, list]]]:
    """The group's inserts in as few statements as the parameter limit allows: one, unless a
    huge group's packs (``PackInsert``, a parameter per value) need more. psycopg fails a
    statement over the limit with an error without SQLSTATE, which the writer would take for
    a database outage and answer 503 forever."""
    chunk: list[tuple[Any, list]] = []
    count = 0
    for insert, values in statements:
        if chunk and count + len(values) > MAX_STATEMENT_PARAMETERS:
            yield chunk
            chunk, count = [], 0
        chunk.append((insert, values))
        count += len(values)
    if chunk:
        yield chunk


def _as_one(inserts: list[str]) -> str:
    """Several INSERTs as one statement: ``WITH w0 AS (INSERT ...), w1 AS (...) INSERT ...``.

    PostgreSQL runs every data-modifying CTE exactly once, referenced or not, in the same
    snapshot; a unique violation in any of them fails the statement as it would alone.
    """
    if len(inserts) == 1:
        return inserts[0]
    ctes = ", ".join(f"w{i} AS ({sql})" for i, sql in enumerate(inserts[:-1]))
    return f"WITH {ctes} {inserts[-1]}"


@functools.lru_cache(maxsize=128)
def _numbered(sql: str) -> str:
    """``sql``'s ``%b`` placeholders as PostgreSQL's own ``$1 .. $n``, for a ``RawCursor``.

    psycopg converts ``%b`` to ``$n`` on every execute, and caches that only for statements
    under 4 KiB and 50 parameters; a group's unnest statement is longer, so the conversion
    (a regex split of the whole text) ran for every group: ~4 % of the daemon's GIL time
    (py-spy). The statements hold no other ``%``.
    """
    parts = sql.split("%b")
    if any("%" in part for part in parts):
        raise ValueError("only %b placeholders may appear in an unnest statement")
    out = [parts[0]]
    for n, part in enumerate(parts[1:], start=1):
        out.append(f"${n}{part}")
    return "".join(out)


def _dbapi(conn: sa.Connection) -> Any:
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None
    return dbapi


@dataclass(frozen=True)
class _UnnestInsert:
    """``INSERT INTO t (cols) SELECT * FROM unnest(%b::type[], ...) [ON CONFLICT DO NOTHING]``."""

    sql: str
    table: sa.Table
    names: tuple[str, ...]  # every column, in order
    #: column -> the list class that sends it in binary (``pg_arrays.array_type``)
    array_types: dict[str, type[list]]

    _cache: ClassVar[dict[str, _UnnestInsert]] = {}

    @property
    def sql_on_conflict(self) -> str:
        return f"{self.sql} ON CONFLICT DO NOTHING"

    @classmethod
    def of(cls, table: sa.Table) -> _UnnestInsert:
        found = cls._cache.get(table.name)
        if found is None:
            pg = postgresql.dialect()
            types = {c.name: c.type.compile(dialect=pg) for c in table.c}
            quoted = ", ".join(f'"{name}"' for name in types)
            # strings go as text[]: the INSERT's assignment cast to VARCHAR(n) refuses an
            # over-long value, where an explicit ::VARCHAR(n)[] would silently truncate it
            arrays = ", ".join(
                f"%b::{'TEXT' if sql_type.startswith('VARCHAR') else sql_type}[]"
                for sql_type in types.values()
            )
            found = cls._cache[table.name] = cls(
                sql=f'INSERT INTO "{table.name}" ({quoted}) SELECT * FROM unnest({arrays})',
                table=table,
                names=tuple(types),
                array_types={name: pg_arrays.array_type(sql_type) for name, sql_type in types.items()},
            )
        return found

    def arrays(self, columns: dict[str, Any]) -> list[list[Any]]:
        """The statement's parameters: each column of ``columns`` in its binary array class."""
        return [self.array_types[name](columns[name]) for name in self.names]


def count_rows(conn: sa.Connection, tables: Iterable[sa.Table] | None = None) -> dict[str, int]:
    """Row count per table, what the store tests check a write by; for the packed tables, packs,
    not what they hold (``sql.process_packs.count_processes``), and with a sample kind's pack
    table the readings it holds, each once, under the kind's readings name (``cpu_samples``,
    ``gpu_samples``: ``sql.readings.count_samples``)."""
    tables = list(tables or PACK_TABLES)
    counts = {t.name: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one() for t in tables}
    for spec in SAMPLE_KINDS.values():
        if spec.table in tables:
            counts[spec.readings] = readings.count_samples(conn, spec.kind)
    return counts
