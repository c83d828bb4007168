"""Writing the packed samples of every kind and the GPU processes (layouts:
:mod:`gpuwatch.sql.readings`, :mod:`gpuwatch.sql.process_packs`).

:func:`pack_rows` builds a batch's packed rows (dicts; SQLite stores the lists as JSON, the
benchmarks' raw COPY uses them too). On PostgreSQL :class:`PackInsert` makes ONE
``INSERT ... VALUES`` per table and group, each array in binary, run in the same statement as
the other tables' inserts; the batches of one node stored in one group share their row. Measured
for the processes with a pack per batch: ~34 µs of Python and ~8 µs of server time per 8-GPU
batch, against 24 + 40 µs for sending flat arrays and letting the server ``GROUP BY`` +
``array_agg`` them (``python bench/packed_layout.py``).

A table holding several kinds (``host_sample_packs``: the eight host kinds) gets ONE row per
node, group and hour with every kind's arrays, empty for a kind the push did not hold.

Samples are split by UTC hour (a reader of a time range then knows where a pack can start),
processes by UTC day; fields with a scale (:class:`gpuwatch.sql.schema.PackedField`) are stored
as integers, saturated to the column's range.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
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


#: a layout's cut: period -> a batch's element lists in it
_Cut = Callable[[BatchColumns], dict[Hashable, list[list[Any]]]]


@dataclass(frozen=True)
class _Layout:
    """How one packed table is cut and laid out: which samples go together, and its columns."""

    table: sa.Table
    #: the batch's elements, one list per column after (node_id, ts, ts_last), keyed by the
    #: period a row must not cross
    split: _Cut
    #: the list class that sends each of those columns in binary, in order
    array_types: tuple[type[list], ...]
    #: the sample kinds it holds, each with the index of its first element column (its stamps;
    #: a reading's key is the stamp and the kind's keys, a reading twice in one pack is refused,
    #: :class:`RepeatedReadings`); empty for the processes, whose stamps are the first column
    parts: tuple[tuple[SampleKind, int], ...] = ()

    def row(self, node_id: int, fields: list[list[Any]]) -> dict[str, Any]:
        stamps = self.stamps(fields)
        row = {"node_id": node_id, "ts": min(stamps), "ts_last": max(stamps)}
        return {**row, **dict(zip(self.element_columns, fields, strict=True))}

    @property
    def element_columns(self) -> list[str]:
        return [c.name for c in self.table.c][3:]

    def stamps(self, fields: list[list[Any]]) -> list[Any]:
        """Every element's stamp, whatever kind it is of."""
        if len(self.parts) < 2:  # the processes', or one kind's: its first column
            return fields[self.parts[0][1] if self.parts else 0]
        return [ts for _, first in self.parts for ts in fields[first]]

    def kinds_of(self, fields: list[list[Any]]) -> Iterator[tuple[SampleKind, list[list[Any]]]]:
        """Each kind it holds with its element lists (stamps, keys, fields)."""
        for spec, first in self.parts:
            yield spec, fields[first : first + len(spec.columns)]

    def holds_repeats(self, fields: list[list[Any]]) -> bool:
        """Whether some kind's reading (keys..., stamp) is there twice."""
        return any(len(set(_keys_of(spec, part))) != len(part[0]) for spec, part in self.kinds_of(fields))


def _keys_of(spec: SampleKind, part: list[list[Any]]) -> Iterable[tuple]:
    """Each element's reading key, (keys..., stamp), as ``sql.readings.stored_keys`` gives it."""
    return zip(*part[1 : 1 + len(spec.keys)], part[0], strict=True)


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


def _kind_fields(spec: SampleKind, columns: BatchColumns) -> dict[Hashable, list[list[Any]]]:
    """UTC hour -> the batch's ``spec`` samples in it: stamps, keys, then each packed field."""
    kind = spec.kind
    if kind not in columns.tables or not len(columns.tables[kind]["ts"]):
        return {}
    stamps = list(columns.column(kind, "ts"))
    fields = [
        stamps,
        *(list(columns.column(kind, k.name)) for k in spec.keys),
        *(stored_values(f, columns.column(kind, f.name)) for f in spec.fields),
    ]
    return _split(stamps, fields, floor_hour)


def _sample_fields(kinds: tuple[SampleKind, ...]) -> _Cut:
    """UTC hour -> the batch's samples of ``kinds`` in it, each kind's lists in turn (new empty
    ones for a kind with none in that hour)."""

    def split(columns: BatchColumns) -> dict[Hashable, list[list[Any]]]:
        found = [_kind_fields(spec, columns) for spec in kinds]
        hours = {hour for by_hour in found for hour in by_hour}
        return {
            hour: [
                values
                for spec, by_hour in zip(kinds, found, strict=True)
                for values in by_hour.get(hour) or [[] for _ in spec.columns]
            ]
            for hour in hours
        }

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


def _sample_layout(kinds: tuple[SampleKind, ...]) -> _Layout:
    """The layout of the table ``kinds`` share, their columns in its order."""
    table = kinds[0].table
    names = [c.name for c in table.c][3:]
    parts = tuple((spec, names.index(spec.columns[0])) for spec in kinds)
    assert [c for spec in kinds for c in spec.columns] == names, table.name
    return _Layout(table, _sample_fields(kinds), _array_types(table), parts)


assert [c.name for c in gpu_process_packs.c][3:] == list(ELEMENT_FIELDS)
_BY_TABLE: dict[sa.Table, list[SampleKind]] = {}
for _spec in SAMPLE_KINDS.values():
    _BY_TABLE.setdefault(_spec.table, []).append(_spec)
#: sample table name -> its layout
_SAMPLES = {table.name: _sample_layout(tuple(kinds)) for table, kinds in _BY_TABLE.items()}
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
            if any(layout.holds_repeats(fields) for fields in merged.values()):
                raise RepeatedReadings
            inserts += cls._of_rows(layout, [(node_id, fields) for (node_id, _), fields in merged.items()])
        return inserts

    @classmethod
    def appending(cls, table: str, node_id: int, fields: list[list[Any]]) -> PackInsert:
        """The insert of one sample pack of ``table`` (``fields``, as :func:`sample_fields` gives
        them) that, where a pack of the node already starts at its first stamp, appends its
        readings to that pack instead: for readings known not to be stored yet."""
        layout = _SAMPLES[table]
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
            [node_id, min(stamps := layout.stamps(fields)), max(stamps)]
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
    """The batch's sample packs' element lists (each kind's stamps, keys, then packed fields),
    one per sample table and UTC hour, with their table's name."""
    return [(name, fields) for name, layout in _SAMPLES.items() for fields in layout.split(columns).values()]


def pack_fields(table: str, row: dict[str, Any]) -> list[list[Any]]:
    """A sample pack row's (dict's) element lists, in column order."""
    return [row[name] for name in _SAMPLES[table].element_columns]


def element_columns(table: str) -> list[str]:
    """The sample pack table's array columns, in order."""
    return _SAMPLES[table].element_columns


def pack_row(table: str, node_id: int, fields: list[list[Any]]) -> dict[str, Any]:
    """The sample pack row (dict) of element lists."""
    return _SAMPLES[table].row(node_id, fields)


def holds_samples(table: str) -> bool:
    """Whether ``table`` holds samples (its packs count readings); not the processes'."""
    return table in _SAMPLES


def readings_in(table: str, fields: list[list[Any]]) -> int:
    """How many readings a sample pack's element lists hold, of every kind."""
    return len(_SAMPLES[table].stamps(fields))


def holds_repeats(table: str, row: dict[str, Any]) -> bool:
    """Whether a sample pack row (dict) holds a reading twice (a batch repeating one)."""
    return _SAMPLES[table].holds_repeats(pack_fields(table, row))


def new_readings(
    table: str, fields: list[list[Any]], stored: Callable[[str, list[Any]], set[tuple]]
) -> list[list[Any]]:
    """``fields`` (a sample pack's element lists) without the readings already stored, each
    remaining one once (its first). ``stored(kind, stamps)``: the keys (keys..., stamp) of the
    node's ``kind`` readings stored over those stamps' span."""
    out: list[list[Any]] = []
    for spec, part in _SAMPLES[table].kinds_of(fields):
        if not part[0]:
            out += part
            continue
        seen = set(stored(spec.kind, part[0]))
        keep = []
        for i, key in enumerate(_keys_of(spec, part)):
            if key not in seen:
                seen.add(key)
                keep.append(i)
        out += part if len(keep) == len(part[0]) else [[values[i] for i in keep] for values in part]
    return out
