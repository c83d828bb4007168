"""Storing one batch: all of it or none of it, and never twice.

The batch id goes into ``ingested_batches`` in the same transaction as the samples. A
batch seen before inserts nothing there (``ON CONFLICT DO NOTHING``), and then the
transaction stores nothing else and reports ``duplicate``. A daemon killed mid-batch
rolls back, and the agent, which never got a 200, sends it again. Every sample table
also has a primary key ending in ``ts`` with ``ON CONFLICT DO NOTHING``, so a sample
that arrives in two different batches (an agent restored from an old spool copy) is
still stored once.

Rows go in with an ``INSERT ... ON CONFLICT DO NOTHING`` executemany per table; on
PostgreSQL psycopg sends those one statement per row, so they run in pipeline mode (one
sync for all of them, :func:`_pipelined`). With ``bulk="copy"`` (the PostgreSQL default), a
table with at least ``_COPY_MIN_ROWS`` rows in the group is instead streamed with ``COPY``
straight into the table inside a savepoint; only when that meets a sample already stored (a
unique violation: the restored-spool case above, rare) does it roll back to the savepoint
and load that table through a session temp table and one ``INSERT ... SELECT ... ON
CONFLICT DO NOTHING``. ``bench/ingest.py`` measures the paths side by side (figures in
``bench/README.md``).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date
from enum import Enum
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from gpuwatch.sql.partitions import PartitionManager
from gpuwatch.sql.schema import (
    GPU_IDENTITY_FIELDS,
    SAMPLE_TABLES,
    gpu_process_samples,
    gpus,
    ingested_batches,
    nodes,
)
from gpuwatch.wire import Batch, GpuSample, utcnow


class IngestStatus(str, Enum):
    STORED = "stored"
    DUPLICATE = "duplicate"


@dataclass(frozen=True)
class IngestResult:
    status: IngestStatus
    samples: int


def _insert(conn: sa.Connection, table: sa.Table) -> Any:
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(table)


def sample_rows(node_id: int, batch: Batch) -> tuple[dict[str, list[dict]], dict[int, dict]]:
    """Rows per table name, and the GPU identities seen (index -> uuid/name/bus)."""
    rows: dict[str, list[dict]] = defaultdict(list)
    identities: dict[int, dict] = {}
    for sample in batch.samples:
        kind = sample.kind
        if isinstance(sample, GpuSample):
            row = sample.model_dump(exclude={"kind", "processes", *GPU_IDENTITY_FIELDS})
            identities[sample.gpu_index] = {f: getattr(sample, f) for f in GPU_IDENTITY_FIELDS}
            for proc in sample.processes or ():
                rows[gpu_process_samples.name].append(
                    {"node_id": node_id, "ts": sample.ts, "gpu_index": sample.gpu_index, **proc.model_dump()}
                )
        else:
            row = sample.model_dump(exclude={"kind"})
        row["node_id"] = node_id
        rows[SAMPLE_TABLES[kind].name].append(row)
    return rows, identities


def days_of(batch: Batch) -> set[date]:
    return {s.ts.date() for s in batch.samples}


class BulkMode(str, Enum):
    INSERT = "insert"
    COPY = "copy"


#: below this many rows a table's plain INSERT beats setting up a COPY
_COPY_MIN_ROWS = 64

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
        self._tables = {t.name: t for t in (*SAMPLE_TABLES.values(), gpu_process_samples)}
        is_pg = engine.dialect.name == "postgresql"
        # PostgreSQL: COPY for tables with many rows in the batch (a replayed spool, big
        # nodes), measured 1.2x INSERT at 240 rows/table; small tables always INSERT
        self.bulk = BulkMode(bulk) if bulk else (BulkMode.COPY if is_pg else BulkMode.INSERT)
        # (node_id, gpu_index) -> (identity, monotonic time of the last upsert): the upsert
        # is ~20 % of a small batch's cost and almost always a no-op
        self._gpu_seen: dict[tuple[int, int], tuple[tuple, float]] = {}
        if self.bulk is BulkMode.COPY and not is_pg:
            raise ValueError("bulk='copy' needs PostgreSQL")

    def store(self, node_id: int, batch: Batch) -> IngestResult:
        return self.store_many([(node_id, batch)])[0]

    def store_many(self, items: list[tuple[int, Batch]]) -> list[IngestResult]:
        """Store several batches in ONE transaction (group commit); a result per item, in order.

        The daemon's writer groups concurrent requests this way: one statement per table
        for the whole group instead of one per batch. Each batch is still all-or-nothing
        and once-only: the group commits or rolls back whole, and a batch id already stored
        (or twice in the group) reports ``duplicate`` and adds no rows.
        """
        if not items:
            return []
        self.partitions.ensure_days(day for _, batch in items for day in days_of(batch))
        now = utcnow()
        claims = [
            {
                "node_id": node_id,
                "batch_id": str(batch.batch_id),
                "seq": batch.seq,
                "received_at": now,
                "samples": len(batch.samples),
                "min_ts": min((x.ts for x in batch.samples), default=None),
                "max_ts": max((x.ts for x in batch.samples), default=None),
            }
            for node_id, batch in items
        ]
        changed: dict[int, dict[int, dict]] = {}
        with self.engine.begin() as conn:
            new = {
                (r.node_id, r.batch_id)
                for r in conn.execute(
                    _insert(conn, ingested_batches)
                    .on_conflict_do_nothing()
                    .returning(ingested_batches.c.node_id, ingested_batches.c.batch_id),
                    claims,
                )
            }
            results: list[IngestResult] = []
            all_rows: dict[str, list[dict]] = defaultdict(list)
            last_batch: dict[int, Batch] = {}
            for node_id, batch in items:
                key = (node_id, str(batch.batch_id))
                if key not in new:
                    results.append(IngestResult(IngestStatus.DUPLICATE, 0))
                    continue
                new.discard(key)  # the same batch twice in one group: the second is a duplicate
                rows, identities = sample_rows(node_id, batch)
                for name, table_rows in rows.items():
                    all_rows[name].extend(table_rows)
                node_changed = self._changed_identities(node_id, identities)
                if node_changed:
                    changed.setdefault(node_id, {}).update(node_changed)
                last_batch[node_id] = batch
                results.append(IngestResult(IngestStatus.STORED, len(batch.samples)))
            copied = {
                name
                for name, table_rows in all_rows.items()
                if self.bulk is BulkMode.COPY and len(table_rows) >= _COPY_MIN_ROWS
            }
            for name in copied:
                _copy_rows(conn, self._tables[name], all_rows[name])
            with _pipelined(conn):
                for name, table_rows in all_rows.items():
                    if name not in copied:
                        conn.execute(_insert(conn, self._tables[name]).on_conflict_do_nothing(), table_rows)
                for node_id, node_changed in changed.items():
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
        for node_id, node_changed in changed.items():
            self._remember_identities(node_id, node_changed)
        return results

    def _changed_identities(self, node_id: int, identities: dict[int, dict]) -> dict[int, dict]:
        now = time.monotonic()
        out = {}
        for index, ident in identities.items():
            seen = self._gpu_seen.get((node_id, index))
            key = tuple(ident[f] for f in GPU_IDENTITY_FIELDS)
            if seen is None or seen[0] != key or now - seen[1] > GPU_IDENTITY_REFRESH_S:
                out[index] = ident
        return out

    def _remember_identities(self, node_id: int, stored: dict[int, dict]) -> None:
        """Only after the commit: a rolled-back upsert must be retried by the next batch."""
        now = time.monotonic()
        for index, ident in stored.items():
            self._gpu_seen[(node_id, index)] = (tuple(ident[f] for f in GPU_IDENTITY_FIELDS), now)

    @staticmethod
    def _upsert_gpus(conn: sa.Connection, node_id: int, identities: dict[int, dict], now: Any) -> None:
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
                {"node_id": node_id, "gpu_index": i, **ident, "first_seen_at": now, "last_seen_at": now}
                for i, ident in sorted(identities.items())
            ],
        )


@contextlib.contextmanager
def _pipelined(conn: sa.Connection) -> Iterator[None]:
    """On PostgreSQL, send the statements inside without waiting for each one's result.

    A one-cycle batch is a dozen small statements; one after the other they are a dozen round
    trips. psycopg's pipeline mode sends them all and syncs once at the end (results of
    statements that need none are read then; errors surface at the sync, inside the
    transaction, so the batch still stores whole or not at all). COPY cannot run in a
    pipeline, so COPYed tables go before it. Statements inside must not need their results
    (no RETURNING, no single-row INSERT into a table with an autoincrement key): SQLAlchemy
    cannot read a result there and fails loudly (ResourceClosedError).
    """
    if conn.dialect.name != "postgresql":
        yield
        return
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None
    try:
        with dbapi.pipeline():
            yield
    except psycopg.Error as exc:
        # raised at the sync, outside SQLAlchemy's execute: wrap it as SQLAlchemy would, so
        # callers see one exception family (the ingest answers 503 to OperationalError)
        raise sa.exc.DBAPIError.instance(None, None, exc, psycopg.Error) from exc


def _copy_rows(conn: sa.Connection, table: sa.Table, rows: list[dict]) -> None:
    """COPY ``rows`` into ``table``, storing a sample already there once, not twice.

    Optimistic: COPY straight into the table in a savepoint (half the server work of going
    through a temp table, measured by ``bench/ingest.py``). A unique violation means some
    samples were stored before under another batch id: roll back to the savepoint and take
    the idempotent path for this table.
    """
    columns = list(table.c.keys())
    json_cols = {c.name for c in table.c if isinstance(c.type, sa.JSON) or "JSON" in type(c.type).__name__}
    values = [
        [json.dumps(row[c]) if c in json_cols and row.get(c) is not None else row.get(c) for c in columns]
        for row in rows
    ]
    quoted = ", ".join(f'"{c}"' for c in columns)
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None
    try:
        with conn.begin_nested(), dbapi.cursor() as cur:
            _copy_values(cur, f'"{table.name}"', quoted, values)
        return
    except psycopg.errors.UniqueViolation:
        pass  # the savepoint is rolled back: nothing of this table's rows was kept
    temp = f"_gw_load_{table.name}"
    with dbapi.cursor() as cur:
        cur.execute(
            f'CREATE TEMP TABLE IF NOT EXISTS "{temp}" (LIKE "{table.name}" INCLUDING DEFAULTS) '
            "ON COMMIT DELETE ROWS"
        )
        _copy_values(cur, f'"{temp}"', quoted, values)
        cur.execute(
            f'INSERT INTO "{table.name}" ({quoted}) SELECT {quoted} FROM "{temp}" ON CONFLICT DO NOTHING'
        )


def _copy_values(cur: Any, target: str, quoted_columns: str, values: list[list[Any]]) -> None:
    with cur.copy(f"COPY {target} ({quoted_columns}) FROM STDIN") as copy:
        for row in values:
            copy.write_row(row)


def count_rows(conn: sa.Connection, tables: Iterable[sa.Table] | None = None) -> dict[str, int]:
    """Row count per table (tests and ``gpuwatch nodes``' totals)."""
    tables = tables or (*SAMPLE_TABLES.values(), gpu_process_samples)
    return {t.name: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one() for t in tables}
