"""Writing the packed per-process readings (layout: :mod:`gpuwatch.sql.process_packs`).

:func:`pack_rows` builds a batch's packed rows (dicts; SQLite stores the lists as JSON, the
benchmarks' raw COPY uses them too). On PostgreSQL :class:`PackInsert` makes ONE
``INSERT ... VALUES`` per group, each array in binary, run in the same statement as the other
tables' inserts; the batches of one node stored in one group share their row. Measured with a
pack per batch: ~34 µs of Python and ~8 µs of server time per 8-GPU batch, against 24 + 40 µs
for sending flat arrays and letting the server ``GROUP BY`` + ``array_agg`` them
(``python bench/packed_layout.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from typing import Any

from gpuwatch.daemon.store import pg_arrays
from gpuwatch.daemon.store.columns import PROCESS_FIELDS, BatchColumns
from gpuwatch.sql.partitions import utc_day
from gpuwatch.sql.process_packs import ELEMENT_FIELDS
from gpuwatch.sql.schema import gpu_process_packs


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


#: the list class that sends each packed column in binary (``daemon/store/pg_arrays.py``), by name, in
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
    array in binary; shaped like ``daemon.store.batch_store._UnnestInsert`` so the store runs it with the
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
