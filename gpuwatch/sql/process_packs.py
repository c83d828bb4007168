"""Per-process GPU readings, packed: the layout and its readers.

The wire sends, for every GPU sample, the compute processes on that GPU (``wire.GpuProcess``:
two for a typical job). They are stored packed: a row per node, batch (or group of batches)
and UTC day in ``gpu_process_packs``, an array per field, element ``i`` of every array one
process on one GPU at one stamp, so a day's partition holds exactly that day's readings.
Readers want them by node and time range, never one by one, and no view, rollup or rule reads
them. A row each was half the rows a cycle wrote and 273 of 671 bytes per GPU-sample; packed,
110 of 507 (``python bench/storage.py``, ``python bench/process_rows.py``).

The daemon's store writes the packs (:mod:`gpuwatch.daemon.store.packing`). Duplicates: a
pack's key is (node, first stamp), so a batch stored again under a new id adds nothing
(``ON CONFLICT DO NOTHING``, as for every sample table). Two packs of the same node that
overlap without starting at the same stamp (a spool copy re-batched differently) are both
kept; :func:`read_processes` returns each (node, GPU, pid, stamp) once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone

import sqlalchemy as sa

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
