"""Writing the packed samples of every kind and the GPU processes (layouts:
:mod:`gpuwatch.sql.readings`, :mod:`gpuwatch.sql.process_packs`).

:func:`pack_rows` builds a batch's packed rows (dicts; SQLite stores the lists as JSON, the
benchmarks' raw COPY uses them too). On PostgreSQL :class:`PackInsert` makes ONE
``INSERT ... VALUES`` per table and group, each array in binary, run in the same statement as
the other tables' inserts; the batches of one node stored in one group share their row. Measured
for the processes with a pack per batch: ~34 µs of Python and ~8 µs of server time per 8-GPU
batch, against 24 + 40 µs for sending flat arrays and letting the server ``GROUP BY`` +
``array_agg`` them (``python bench/packed_layout.py``).

Samples are split by UTC hour (a reader of a time range then knows where a pack can start),
processes by UTC day; fields with a scale (:class:`gpuwatch.sql.schema.PackedField`) are stored
as integers, saturated to the column's range.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from gpuwatch.daemon.store import pg_arrays
from gpuwatch.daemon.store.columns import PROCESS_FIELDS, BatchColumns
from gpuwatch.sql.buckets import floor_hour
from gpuwatch.sql.partitions import utc_day
from gpuwatch.sql.process_packs import ELEMENT_FIELDS
from gpuwatch.sql.schema import SAMPLE_KINDS, PackedField, SampleKind, gpu_process_packs

#: the range of the integer a scaled field is stored in (``INTEGER``)
INT4_MIN, INT4_MAX = -(2**31), 2**31 - 1
#: the largest finite float4 (``REAL``)
FLOAT4_MAX = 3.4028234663852886e38


def pack_rows(node_id: int, columns: BatchColumns) -> dict[str, list[dict[str, Any]]]:
    """The batch's packed rows (dicts) per table name: its samples of each kind, one per UTC hour
    they fall on, and its processes, one per UTC day; a table with nothing to pack left out."""
    out: dict[str, list[dict[str, Any]]] = {}
    for layout in _LAYOUTS:
        rows = [layout.row(node_id, fields) for fields in layout.split(columns).values()]
        if rows:
            out[layout.table.name] = rows
    return out


def stored_values(field: PackedField, values: Sequence[Any]) -> list[Any]:
    """A field's values as its pack column holds them: scaled to integers, or float4 saturated,
    or as they are."""
    if field.scale is not None:
        return _scaled(values, field.scale)
    if field.element is sa.REAL:
        return _float4(values)
    return list(values)


def _float4(values: Sequence[Any]) -> list[Any]:
    """Each value as the float4 the column keeps, saturated to its range: on every database the
    same value, where PostgreSQL would round it and SQLite (whose REAL is 8 bytes) would not."""
    present = _saturated([v for v in values if v is not None], -FLOAT4_MAX, FLOAT4_MAX)
    rounded = iter(array("f", present))  # double -> float in C, to the nearest
    return [None if v is None else next(rounded) for v in values]


def _scaled(values: Sequence[Any], scale: float) -> list[Any]:
    """``round(v * scale)`` of each value (None kept), saturated to ``INTEGER``'s range."""
    try:
        if None not in values:
            out = [round(v * scale) for v in values]
            present = out
        else:
            out = [None if v is None else round(v * scale) for v in values]
            present = [v for v in out if v is not None]
    except OverflowError:  # a finite value whose product is not (the wire bounds no NonNeg)
        bounded = _saturated(values, INT4_MIN, INT4_MAX)  # |v * scale| now finite
        return _saturated([None if v is None else round(v * scale) for v in bounded], INT4_MIN, INT4_MAX)
    if present and (max(present) > INT4_MAX or min(present) < INT4_MIN):
        return _saturated(out, INT4_MIN, INT4_MAX)
    return out


def _saturated(values: Sequence[Any], low: float, high: float) -> list[Any]:
    return [None if v is None else max(low, min(high, v)) for v in values]


@dataclass(frozen=True)
class _Layout:
    """How one packed table is cut and laid out: which samples go together, and its columns."""

    table: sa.Table
    #: the batch's elements, one list per column after (node_id, ts, ts_last), keyed by the
    #: period a row must not cross
    split: Callable[[BatchColumns], dict[Hashable, list[list[Any]]]]
    #: the list class that sends each of those columns in binary, in order
    array_types: tuple[type[list], ...]
    #: a sample kind's: its readings' key is the stamp and the next ``keys`` columns (a reading
    #: twice in one pack is refused, :class:`RepeatedReadings`); None for the processes
    keys: int | None = None

    def row(self, node_id: int, fields: list[list[Any]]) -> dict[str, Any]:
        stamps = fields[0]
        row = {"node_id": node_id, "ts": min(stamps), "ts_last": max(stamps)}
        return {**row, **dict(zip(self.element_columns, fields, strict=True))}

    @property
    def element_columns(self) -> list[str]:
        return [c.name for c in self.table.c][3:]

    def key_of(self, fields: list[list[Any]]) -> Iterable[tuple]:
        """Each element's reading key, (keys..., stamp), as ``sql.readings.stored_keys`` gives it."""
        assert self.keys is not None
        return zip(*fields[1 : 1 + self.keys], fields[0], strict=True)


def _split(
    stamps: list[datetime], fields: list[list[Any]], period: Callable[[datetime], Hashable]
) -> dict[Hashable, list[list[Any]]]:
    """``fields`` (element lists, ``stamps`` among them) cut by ``period`` of each element's stamp."""
    # a batch has one stamp per cycle: a period per distinct stamp, once
    period_of = {ts: period(ts) for ts in set(stamps)}
    periods = set(period_of.values())
    if len(periods) == 1:
        return {periods.pop(): fields}
    by_period: dict[Hashable, list[int]] = {}
    for i, ts in enumerate(stamps):
        by_period.setdefault(period_of[ts], []).append(i)
    return {key: [[field[i] for i in where] for field in fields] for key, where in by_period.items()}


def _sample_fields(spec: SampleKind) -> Callable[[BatchColumns], dict[Hashable, list[list[Any]]]]:
    """UTC hour -> the batch's ``spec`` samples in it: stamps, keys, then each packed field."""
    kind = spec.kind

    def split(columns: BatchColumns) -> dict[Hashable, list[list[Any]]]:
        if kind not in columns.tables or not len(columns.tables[kind]["ts"]):
            return {}
        stamps = list(columns.column(kind, "ts"))
        fields = [
            stamps,
            *(list(columns.column(kind, k.name)) for k in spec.keys),
            *(stored_values(f, columns.column(kind, f.name)) for f in spec.fields),
        ]
        return _split(stamps, fields, floor_hour)

    return split


def _process_fields(columns: BatchColumns) -> dict[Hashable, list[list[Any]]]:
    """UTC day -> the batch's processes on it, one new list per :data:`ELEMENT_FIELDS` field."""
    processes = columns.processes
    if processes is None:
        return {}
    gpu = columns.tables["gpu"]
    rows = processes["sample"]
    stamps = list(map(gpu["ts"].__getitem__, rows))
    indices = list(map(gpu["gpu_index"].__getitem__, rows))
    return _split(stamps, [stamps, indices, *(list(processes[name]) for name in PROCESS_FIELDS)], utc_day)


def _array_types(table: sa.Table) -> tuple[type[list], ...]:
    """The binary list class of each element column (element type as PostgreSQL compiles it)."""
    pg = postgresql.dialect()
    out = []
    for column in list(table.c)[3:]:
        sql_type = column.type.compile(dialect=pg)
        # VARCHAR(n)[] columns take text[], whose assignment cast refuses an over-long value
        out.append(pg_arrays.array_type(sql_type.removesuffix("[]")))
    return tuple(out)


assert [c.name for c in gpu_process_packs.c][3:] == list(ELEMENT_FIELDS)
#: sample kind -> its layout
_SAMPLES = {
    kind: _Layout(spec.table, _sample_fields(spec), _array_types(spec.table), len(spec.keys))
    for kind, spec in SAMPLE_KINDS.items()
}
_PROCESSES = _Layout(gpu_process_packs, _process_fields, _array_types(gpu_process_packs))
_LAYOUTS = (*_SAMPLES.values(), _PROCESSES)

#: packs per INSERT: a parameter per value, well under a statement's 65,535 (a writer group
#: holds at most one pack per node and hour or day)
ROWS_PER_INSERT = 1000


@dataclass(frozen=True)
class PackInsert:
    """PostgreSQL: ONE ``INSERT ... VALUES`` of one table's packs of a whole group of batches,
    each array in binary; shaped like ``daemon.store.batch_store._UnnestInsert`` so the store runs
    it with the other tables' inserts in one statement."""

    sql: str
    params: list[Any]
    table: sa.Table

    @property
    def sql_on_conflict(self) -> str:
        return f"{self.sql} ON CONFLICT DO NOTHING"

    @classmethod
    def of(cls, stored: Iterable[tuple[int, BatchColumns]], *, samples: bool = True) -> list[PackInsert]:
        """The inserts of ``stored`` (node id, batch columns) pairs' packs, at most
        :data:`ROWS_PER_INSERT` rows each; none for a table with nothing to pack.

        The packs of one node and period in the group are ONE row: a bundle of 30 one-cycle
        batches is one pack, not 30 (a thirtieth of the arrays to encode and of the rows'
        overhead on disk). A batch stored again in another group cannot add a second copy: it
        is a duplicate by its id before any of this. A reading twice in one pack (a batch
        repeating a sample, or a copy of a batch in the same group) raises
        :class:`RepeatedReadings`: the store then goes a batch at a time, keeping each once.
        ``samples=False``: the processes' packs only.
        """
        stored = list(stored)
        inserts = []
        for layout in _LAYOUTS if samples else (_PROCESSES,):
            merged: dict[tuple[int, Hashable], list[list[Any]]] = {}
            for node_id, batch in stored:
                for period, fields in layout.split(batch).items():
                    found = merged.setdefault((node_id, period), fields)
                    if found is not fields:
                        for values, more in zip(found, fields, strict=True):
                            values.extend(more)
            if layout.keys is not None:
                for fields in merged.values():
                    if len(set(layout.key_of(fields))) != len(fields[0]):
                        raise RepeatedReadings
            inserts += cls._of_rows(layout, [(node_id, fields) for (node_id, _), fields in merged.items()])
        return inserts

    @classmethod
    def appending(cls, kind: str, node_id: int, fields: list[list[Any]]) -> PackInsert:
        """The insert of one ``kind`` sample pack (``fields``, as :func:`sample_fields` gives
        them) that, where a pack of the node already starts at its first stamp, appends its
        readings to that pack instead: for readings known not to be stored yet."""
        layout = _SAMPLES[kind]
        (insert,) = cls._of_rows(layout, [(node_id, fields)])
        table = layout.table.name
        appended = ", ".join(f'"{c}" = "{table}"."{c}" || EXCLUDED."{c}"' for c in layout.element_columns)
        sql = (
            f"{insert.sql} ON CONFLICT (node_id, ts) DO UPDATE SET {appended}, "
            f'ts_last = GREATEST("{table}".ts_last, EXCLUDED.ts_last)'
        )
        return cls(sql, insert.params, insert.table)

    @classmethod
    def _of_rows(cls, layout: _Layout, packs: list[tuple[int, list[list[Any]]]]) -> list[PackInsert]:
        rows = [
            [node_id, min(fields[0]), max(fields[0])]
            + [array_type(values) for array_type, values in zip(layout.array_types, fields, strict=True)]
            for node_id, fields in packs
        ]
        columns = ", ".join(f'"{c.name}"' for c in layout.table.c)
        row_sql = "(" + ", ".join(["%b"] * len(layout.table.c)) + ")"
        inserts = []
        for i in range(0, len(rows), ROWS_PER_INSERT):
            chunk = rows[i : i + ROWS_PER_INSERT]
            values_sql = ", ".join([row_sql] * len(chunk))
            sql = f'INSERT INTO "{layout.table.name}" ({columns}) VALUES {values_sql}'
            inserts.append(cls(sql, [value for row in chunk for value in row], layout.table))
        return inserts


class RepeatedReadings(Exception):
    """A reading (node, keys, stamp) twice among the packs of one group."""


def sample_fields(columns: BatchColumns) -> list[tuple[str, list[list[Any]]]]:
    """The batch's sample packs' element lists (stamps, keys, then each packed field), one per
    kind and UTC hour, with their kind."""
    return [(kind, fields) for kind, layout in _SAMPLES.items() for fields in layout.split(columns).values()]


def pack_fields(kind: str, row: dict[str, Any]) -> list[list[Any]]:
    """A ``kind`` sample pack row's (dict's) element lists, in column order."""
    return [row[name] for name in _SAMPLES[kind].element_columns]


def element_columns(kind: str) -> list[str]:
    """The ``kind`` sample pack's array columns, in order."""
    return _SAMPLES[kind].element_columns


def pack_row(kind: str, node_id: int, fields: list[list[Any]]) -> dict[str, Any]:
    """The ``kind`` sample pack row (dict) of element lists."""
    return _SAMPLES[kind].row(node_id, fields)


def kind_of(table: str) -> str | None:
    """The sample kind whose packs ``table`` holds; None for another table (the processes)."""
    return _KINDS_BY_TABLE.get(table)


_KINDS_BY_TABLE = {layout.table.name: kind for kind, layout in _SAMPLES.items()}


def holds_repeats(kind: str, row: dict[str, Any]) -> bool:
    """Whether a ``kind`` sample pack row (dict) holds a reading twice (a batch repeating one)."""
    fields = pack_fields(kind, row)
    return len(set(_SAMPLES[kind].key_of(fields))) != len(fields[0])


def new_readings(kind: str, fields: list[list[Any]], stored: set[tuple]) -> list[list[Any]]:
    """``fields`` (a ``kind`` pack's element lists) without the readings whose key (keys...,
    stamp) is in ``stored``, each remaining one once (its first)."""
    seen = set(stored)
    keep = []
    for i, key in enumerate(_SAMPLES[kind].key_of(fields)):
        if key not in seen:
            seen.add(key)
            keep.append(i)
    if len(keep) == len(fields[0]):
        return fields
    return [[values[i] for i in keep] for values in fields]
