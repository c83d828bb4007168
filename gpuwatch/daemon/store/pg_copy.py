"""Rows into a PostgreSQL table by binary ``COPY``: the benches' physical limit (``bench/ingest.py``'s
``raw-copy``, ``bench/packed_layout.py``), against which the store's INSERTs are measured.

COPY is the cheapest way PostgreSQL loads rows: it writes them in multi-row heap batches, with
no executor plan, no per-row function scan and fewer WAL records than an ``INSERT ... SELECT
FROM unnest(...)``. Measured on the ingest path (``bench/ingest.py``): for 64-cycle merged
batches the server spent about a third less CPU per cycle with COPY and the daemon 10-70 %
more (``bench/README.md``), and COPY cannot join psycopg's pipeline (a round trip per table).
The store does not use it: every sample table is packed, a few rows per group.

Rows are formatted by psycopg's binary COPY writer (C, in ``psycopg[binary]``) from the group's
columns, zipped into rows in C: no per-row Python beyond the loop that hands them over.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

import psycopg
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from gpuwatch.daemon.store import pg_arrays

#: SQLAlchemy's PostgreSQL type names -> psycopg's, for a binary COPY's ``set_types``
_COPY_TYPES = {
    "INTEGER": "int4",
    "SMALLINT": "int2",
    "BIGINT": "int8",
    "DOUBLE PRECISION": "float8",
    "REAL": "float4",
    "TIMESTAMP WITH TIME ZONE": "timestamptz",
    "BOOLEAN": "bool",
    "JSONB": "jsonb",
    "TEXT": "text",
}


def copy_type(sql_type: str) -> str:
    """A PostgreSQL column type as SQLAlchemy compiles it -> the name a binary COPY's
    ``set_types`` needs (exact: an array's element type must be the column's, ``varchar[]``
    for ``VARCHAR(64)[]``). A VARCHAR(n) column still refuses a longer value: the server's
    ``varchar`` input applies the column's length."""
    base = sql_type.removesuffix("[]")
    name = "varchar" if base.startswith("VARCHAR") else _COPY_TYPES[base]
    return name + ("[]" if sql_type.endswith("[]") else "")


@lru_cache(maxsize=64)
def _types_and_statement(table: sa.Table) -> tuple[tuple[str, ...], str]:
    pg = postgresql.dialect()
    types = tuple(copy_type(column.type.compile(dialect=pg)) for column in table.c)
    quoted = ", ".join(f'"{column.name}"' for column in table.c)
    return types, f'COPY "{table.name}" ({quoted}) FROM STDIN (FORMAT BINARY)'


def copy_columns(cur: psycopg.Cursor, table: sa.Table, columns: Sequence[Sequence[Any]]) -> None:
    """Rows given as ``columns`` (one sequence per column of ``table``, in its column order, all
    of one length) into ``table`` by binary COPY. Raises psycopg's error if the server refuses
    a row (a duplicate key, a value out of range); the caller's transaction is then failed.

    jsonb columns are encoded here, each distinct list of scalars once (throttle reasons,
    XIDs, pids repeat), and sent as bytes: psycopg's jsonb dumper ran ``json.dumps`` per row,
    half of COPY's client CPU (cProfile). The server reads every field of a binary COPY with
    the *column's* input function, so jsonb's binary form passes through unchanged."""
    types, statement = _types_and_statement(table)
    sent = [
        _jsonb_encoded(column) if sql_type == "jsonb" else column
        for column, sql_type in zip(columns, types, strict=True)
    ]
    _copy(cur, statement, [_SENT_AS.get(t, t) for t in types], zip(*sent, strict=True))


def copy_rows(cur: psycopg.Cursor, table: sa.Table, rows: Iterable[Sequence[Any]]) -> None:
    """``rows`` (value lists in ``table``'s column order) into ``table`` by binary COPY. Array
    columns (the packs) are encoded here by ``daemon/store/pg_arrays.py`` and sent as bytes, as
    jsonb is by :func:`copy_columns`: psycopg's list dumper would take a JSON list in a jsonb[]
    for a second dimension."""
    types, statement = _types_and_statement(table)
    arrays = _array_columns(table)
    if arrays:
        rows = (_with_arrays_encoded(row, arrays) for row in rows)
        types = tuple("bytea" if i in arrays else t for i, t in enumerate(types))
    _copy(cur, statement, list(types), rows)


@lru_cache(maxsize=64)
def _array_columns(table: sa.Table) -> dict[int, type[list]]:
    """Position -> the binary list class of each array column with one. Strings are left to
    psycopg: a binary COPY checks an array's element type, and ours are ``text``, the columns'
    ``varchar``."""
    pg = postgresql.dialect()
    out = {}
    for i, column in enumerate(table.c):
        sql_type = column.type.compile(dialect=pg)
        if sql_type.endswith("[]"):
            found = pg_arrays.array_type(sql_type.removesuffix("[]"))
            if found not in (list, pg_arrays.TextArray):
                out[i] = found
    return out


def _with_arrays_encoded(row: Sequence[Any], arrays: dict[int, type[list]]) -> list[Any]:
    out = list(row)
    for i, cls in arrays.items():
        if out[i] is not None:
            out[i] = pg_arrays.pack(cls(out[i]))
    return out


#: column type -> the type whose dumper sends this module's pre-encoded bytes as they are
_SENT_AS = {"jsonb": "bytea"}


def _jsonb_encoded(values: Sequence[Any]) -> list[bytes | None]:
    return pg_arrays.encoded_each(values, pg_arrays.jsonb_binary, pg_arrays.JsonbArray.key, None)


def _copy(cur: psycopg.Cursor, statement: str, types: list[str], rows: Iterable[Sequence[Any]]) -> None:
    with cur.copy(statement) as copy:
        copy.set_types(types)
        write_row = copy.write_row
        for row in rows:
            write_row(row)
