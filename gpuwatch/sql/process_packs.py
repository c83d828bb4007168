"""Per-process GPU readings, packed: a row per node, batch (or group) and UTC day, an array each.

Why packed: the wire sends, for every GPU sample, the compute processes on that GPU
(``wire.GpuProcess``: two for a typical job). Stored as a row each, they were half the rows
a cycle wrote (two per GPU sample), 273 of 671 bytes per GPU-sample on disk
(``bench/storage.py``) and 1.18-1.30x on the store path (``bench/process_rows.py``), for data
no view, rollup or rule reads; readers want them by node and time range, never one by one.
Packed, a batch's processes are one row (one per UTC day it spans, so a day's partition
holds exactly that day's readings), and element ``i`` of every array is one process on one
GPU at one stamp. On PostgreSQL the batches of one node stored in one group (a bundle) share
their row (:meth:`PackInsert.of`).

Writing: :func:`pack_rows` builds the packed rows from a batch's columns
(``sql/batch_columns.py``); PostgreSQL gets them as ONE ``INSERT ... VALUES`` per group, each
array in binary, in the same statement as the other tables' inserts (:class:`PackInsert`;
measured in the fifth session, with a pack per batch: ~34 µs of Python and ~8 µs of server time
per 8-GPU batch; sending flat arrays and letting the server ``GROUP BY`` + ``array_agg`` them
was 24 + 40 µs). SQLite stores the same dicts as JSON lists; the benchmarks' raw COPY uses
them too.

Duplicates: a pack's key is (node, first stamp), so a batch stored again under a new id
adds nothing (``ON CONFLICT DO NOTHING``, as for every sample table). Two packs of the same
node that overlap without starting at the same stamp (a spool copy re-batched differently)
would both be kept; :func:`read_processes` returns each (node, GPU, pid, stamp) once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timezone
from typing import Any

import sqlalchemy as sa

from gpuwatch.sql import pg_arrays
from gpuwatch.sql.batch_columns import PROCESS_FIELDS, BatchColumns
from gpuwatch.sql.partitions import utc_day
from gpuwatch.sql.schema import gpu_process_packs

#: per-element fields of a pack, in column order (``sample_ts`` is the element's stamp)
ELEMENT_FIELDS = (
    "sample_ts",
    "gpu_index",
    "pid",
    "used_memory_bytes",
    "sm_util_ratio",
    "memory_util_ratio",
    "job_id",
)


@dataclass(frozen=True)
class ProcessReading:
    """One compute process on one GPU at one stamp, as the agent sent it."""

    node_id: int
    ts: datetime
    gpu_index: int
    pid: int
    used_memory_bytes: int | None
    sm_util_ratio: float | None
    memory_util_ratio: float | None
    job_id: str | None


def pack_rows(node_id: int, columns: BatchColumns) -> list[dict[str, Any]]:
    """The batch's processes as packed rows (dicts), one per UTC day they fall on."""
    return [_pack(node_id, fields) for fields in _fields_by_day(columns).values()]


def _fields_by_day(columns: BatchColumns) -> dict[date, list[list[Any]]]:
    """UTC day -> the batch's processes on it, one new list per :data:`ELEMENT_FIELDS` field."""
    processes = columns.processes
    if processes is None:
        return {}
    gpu = columns.tables["gpu"]
    rows = processes["sample"]
    stamps = list(map(gpu["ts"].__getitem__, rows))
    indices = list(map(gpu["gpu_index"].__getitem__, rows))
    fields = [stamps, indices, *(list(processes[name]) for name in PROCESS_FIELDS)]
    # a batch has one stamp per cycle: a day per distinct stamp, once
    day_of = {ts: utc_day(ts) for ts in set(stamps)}
    days = set(day_of.values())
    if len(days) == 1:
        return {days.pop(): fields}
    by_day: dict[date, list[int]] = {}
    for i, ts in enumerate(stamps):
        by_day.setdefault(day_of[ts], []).append(i)
    return {day: [[field[i] for i in where] for field in fields] for day, where in by_day.items()}


def _pack(node_id: int, fields: list[list[Any]]) -> dict[str, Any]:
    """One packed row: ``fields`` in :data:`ELEMENT_FIELDS` order, a list each."""
    stamps = fields[0]
    row = {"node_id": node_id, "ts": min(stamps), "ts_last": max(stamps)}
    return {**row, **dict(zip(ELEMENT_FIELDS, fields, strict=True))}


#: the list class that sends each packed column in binary (``sql/pg_arrays.py``), by name, in
#: :data:`ELEMENT_FIELDS` order
_ARRAY_TYPES = {
    "sample_ts": pg_arrays.TimestamptzArray,
    "gpu_index": pg_arrays.Int2Array,
    "pid": pg_arrays.Int8Array,
    "used_memory_bytes": pg_arrays.Int8Array,
    "sm_util_ratio": pg_arrays.Float8Array,
    "memory_util_ratio": pg_arrays.Float8Array,
    "job_id": pg_arrays.TextArray,  # the column's VARCHAR(64)[] refuses a longer one on assignment
}
_COLUMNS = ", ".join(f'"{c.name}"' for c in gpu_process_packs.c)
_ROW = "(" + ", ".join(["%b"] * len(gpu_process_packs.c)) + ")"
#: packs per INSERT: 10 parameters each, well under a statement's 65,535 (a writer group holds
#: at most one pack per node and UTC day)
ROWS_PER_INSERT = 1000


@dataclass(frozen=True)
class PackInsert:
    """PostgreSQL: ONE ``INSERT ... VALUES`` of the packs of a whole group of batches, each
    array in binary; shaped like ``sql.ingest._UnnestInsert`` so the store runs it with the
    other tables' inserts in one statement."""

    sql: str
    params: list[Any]

    @property
    def sql_on_conflict(self) -> str:
        return f"{self.sql} ON CONFLICT DO NOTHING"

    @classmethod
    def of(cls, stored: Iterable[tuple[int, BatchColumns]]) -> list[PackInsert]:
        """The inserts of ``stored`` (node id, batch columns) pairs' packs, at most
        :data:`ROWS_PER_INSERT` rows each (a parameter per value); none when no process.

        The packs of one node and UTC day in the group are ONE row: a bundle of 30 one-cycle
        batches is one pack, not 30 (a thirtieth of the arrays to encode and of the rows'
        overhead on disk). A batch stored again in another group cannot add a second copy: it
        is a duplicate by its id before any of this.
        """
        merged: dict[tuple[int, date], list[list[Any]]] = {}
        for node_id, batch in stored:
            for day, fields in _fields_by_day(batch).items():
                found = merged.setdefault((node_id, day), fields)
                if found is not fields:
                    for values, more in zip(found, fields, strict=True):
                        values.extend(more)
        rows = [
            [node_id, min(fields[0]), max(fields[0])]
            + [array_type(values) for array_type, values in zip(_ARRAY_TYPES.values(), fields, strict=True)]
            for (node_id, _), fields in merged.items()
        ]
        inserts = []
        for i in range(0, len(rows), ROWS_PER_INSERT):
            chunk = rows[i : i + ROWS_PER_INSERT]
            sql = (
                f'INSERT INTO "{gpu_process_packs.name}" ({_COLUMNS}) VALUES {", ".join([_ROW] * len(chunk))}'
            )
            inserts.append(cls(sql, [value for row in chunk for value in row]))
        return inserts


def read_processes(
    conn: sa.Connection, start: datetime, end: datetime, node_id: int | None = None
) -> list[ProcessReading]:
    """Every process reading with ``start <= ts < end`` (of one node, or all), each
    (node, GPU, pid, stamp) once, ordered by node, stamp, GPU and pid."""
    p = gpu_process_packs.c
    query = sa.select(gpu_process_packs).where(p.ts < end, p.ts_last >= start)
    if node_id is not None:
        query = query.where(p.node_id == node_id)
    readings: dict[tuple[int, int, int, datetime], ProcessReading] = {}
    for row in conn.execute(query):
        for values in zip(*(getattr(row, name) for name in ELEMENT_FIELDS), strict=True):
            reading = ProcessReading(row.node_id, *values)
            if start <= reading.ts < end:
                readings.setdefault((reading.node_id, reading.gpu_index, reading.pid, reading.ts), reading)
    return sorted(readings.values(), key=lambda r: (r.node_id, r.ts, r.gpu_index, r.pid))


@dataclass(frozen=True)
class ProcessSummary:
    """One (GPU, pid, job) over a time range: when it was seen, how often, what it held."""

    gpu_index: int
    pid: int
    job_id: str | None
    first_ts: datetime
    last_ts: datetime
    readings: int
    max_used_memory_bytes: int | None
    mean_sm_util_ratio: float | None


#: PostgreSQL aggregates in SQL: unpacking in Python is ~1.2 s per node-day (138k readings)
_SUMMARY_SQL = sa.text(
    "SELECT u.gpu_index, u.pid, u.job_id, min(u.ts) AS first_ts, max(u.ts) AS last_ts, "
    "count(DISTINCT u.ts) AS readings, max(u.used) AS max_used, avg(u.sm) AS mean_sm "
    "FROM gpu_process_packs p, "
    "unnest(p.sample_ts, p.gpu_index, p.pid, p.used_memory_bytes, p.sm_util_ratio, p.job_id) "
    "AS u(ts, gpu_index, pid, used, sm, job_id) "
    "WHERE p.node_id = :node AND p.ts < :end AND p.ts_last >= :start AND u.ts >= :start AND u.ts < :end "
    "AND (CAST(:gpu AS SMALLINT) IS NULL OR u.gpu_index = :gpu) "
    "GROUP BY u.gpu_index, u.pid, u.job_id"
)


def summarize_processes(
    conn: sa.Connection, start: datetime, end: datetime, node_id: int, gpu_index: int | None = None
) -> list[ProcessSummary]:
    """One :class:`ProcessSummary` per (GPU, pid, job) of a node's readings with
    ``start <= ts < end``, ordered by GPU, first stamp and pid. PostgreSQL aggregates in SQL;
    SQLite (one machine, small) unpacks with :func:`read_processes`. A reading stored twice (two
    overlapping packs) counts once; the mean takes both copies, which hold the same value."""
    if conn.dialect.name == "postgresql":
        params = {"node": node_id, "start": start, "end": end, "gpu": gpu_index}
        found = [
            ProcessSummary(
                r.gpu_index,
                r.pid,
                r.job_id,
                r.first_ts.astimezone(timezone.utc),
                r.last_ts.astimezone(timezone.utc),
                r.readings,
                r.max_used,
                None if r.mean_sm is None else float(r.mean_sm),
            )
            for r in conn.execute(_SUMMARY_SQL, params)
        ]
        return sorted(found, key=_by_gpu_then_time)
    return summarize_readings(read_processes(conn, start, end, node_id), gpu_index)


def summarize_readings(
    readings: Iterable[ProcessReading], gpu_index: int | None = None
) -> list[ProcessSummary]:
    """:func:`summarize_processes` in Python, over readings already unpacked (and deduplicated)."""
    groups: dict[tuple[int, int, str | None], list[ProcessReading]] = {}
    for reading in readings:
        if gpu_index is None or reading.gpu_index == gpu_index:
            groups.setdefault((reading.gpu_index, reading.pid, reading.job_id), []).append(reading)
    return sorted((_summary(key, group) for key, group in groups.items()), key=_by_gpu_then_time)


def _by_gpu_then_time(summary: ProcessSummary) -> tuple[int, datetime, int]:
    return summary.gpu_index, summary.first_ts, summary.pid


def _summary(key: tuple[int, int, str | None], group: list[ProcessReading]) -> ProcessSummary:
    memory = [r.used_memory_bytes for r in group if r.used_memory_bytes is not None]
    sm = [r.sm_util_ratio for r in group if r.sm_util_ratio is not None]
    return ProcessSummary(
        *key,
        first_ts=min(r.ts for r in group),
        last_ts=max(r.ts for r in group),
        readings=len(group),
        max_used_memory_bytes=max(memory) if memory else None,
        mean_sm_util_ratio=sum(sm) / len(sm) if sm else None,
    )


def count_processes(conn: sa.Connection) -> int:
    """How many process readings are stored (elements over all packs; tests and demos)."""
    return sum(len(pids) for pids in conn.execute(sa.select(gpu_process_packs.c.pid)).scalars())
