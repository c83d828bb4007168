"""Numeric column arrays sent to PostgreSQL in binary, packed by ``struct`` in one call.

The ingest's ``unnest`` insert (``sql/ingest.py``) sends one array per column. psycopg's
generic list dumper formats such an array element by element in Python, which was ~14 % of
the daemon's ingest CPU (py-spy, issue 7 notes). A column of one known numeric type needs
none of that: the array's binary form (``array_send``: header, then a length word and the
big-endian value per element, length -1 for NULL) is one ``struct.pack`` over the whole
list when it has no NULL, and one short ``pack`` per element when it has.

Wrap a list in the class of its column type (:data:`ARRAY_FOR_SQL`); the dumpers are
registered on the connection that sends it (:func:`register`). Values must fit the type:
the wire format's bounds (``wire.Count``, ``wire.SmallIndex``) guarantee that for ingest.
"""

from __future__ import annotations

import struct
from functools import lru_cache
from itertools import chain, repeat
from typing import Any, ClassVar

from psycopg.abc import AdaptContext
from psycopg.adapt import Dumper
from psycopg.pq import Format

_NULL = b"\xff\xff\xff\xff"


class _TypedArray(list):
    """A list of one numeric type (or None); subclasses name the PostgreSQL type."""

    oid: ClassVar[int]  # the array type
    element_oid: ClassVar[int]
    code: ClassVar[str]  # struct format of one element
    size: ClassVar[int]


class Float8Array(_TypedArray):
    oid, element_oid, code, size = 1022, 701, "d", 8


class Int8Array(_TypedArray):
    oid, element_oid, code, size = 1016, 20, "q", 8


class Int4Array(_TypedArray):
    oid, element_oid, code, size = 1007, 23, "i", 4


class Int2Array(_TypedArray):
    oid, element_oid, code, size = 1005, 21, "h", 2


class BoolArray(_TypedArray):
    oid, element_oid, code, size = 1000, 16, "?", 1


#: column type as SQLAlchemy compiles it for PostgreSQL -> the list class to wrap it in
ARRAY_FOR_SQL: dict[str, type[_TypedArray]] = {
    "DOUBLE PRECISION": Float8Array,
    "BIGINT": Int8Array,
    "INTEGER": Int4Array,
    "SMALLINT": Int2Array,
    "BOOLEAN": BoolArray,
}


@lru_cache(maxsize=512)
def _without_nulls(code: str, count: int) -> struct.Struct:
    return struct.Struct(">" + ("i" + code) * count)


@lru_cache(maxsize=16)
def _one(code: str) -> struct.Struct:
    return struct.Struct(">i" + code)


def pack(values: _TypedArray) -> bytes:
    """``values`` in PostgreSQL's binary array format (one dimension, lower bound 1)."""
    cls = type(values)
    has_null = None in values
    header = struct.pack(">iiIii", 1, int(has_null), cls.element_oid, len(values), 1)
    if not has_null:
        if len(values) > 4096:  # keep the cached formats small: pack in slices
            return header + b"".join(_body(cls, values[i : i + 4096]) for i in range(0, len(values), 4096))
        return header + _body(cls, values)
    nulls = values.count(None)
    if nulls == len(values):  # a field this GPU does not support: common, and cheap
        return header + _NULL * nulls
    one = _one(cls.code).pack
    return header + b"".join(_NULL if v is None else one(cls.size, v) for v in values)


def _body(cls: type[_TypedArray], values: list[Any]) -> bytes:
    return _without_nulls(cls.code, len(values)).pack(*chain.from_iterable(zip(repeat(cls.size), values)))


class _ArrayDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        return pack(obj)


def register(context: AdaptContext) -> None:
    """Let ``context`` (a connection or cursor) send the typed lists in binary."""
    for cls in ARRAY_FOR_SQL.values():
        dumper = type(f"{cls.__name__}Dumper", (_ArrayDumper,), {"oid": cls.oid})
        context.adapters.register_dumper(cls, dumper)
