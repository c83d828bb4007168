"""Column arrays sent to PostgreSQL in binary, packed by ``struct``.

The ingest's ``unnest`` insert (``daemon/store/batch_store.py``) sends one array per column. psycopg's
generic list dumper formats such an array element by element in Python, ~14 % of the
daemon's ingest CPU (py-spy on the daemon under ``bench/ingest.py``). A column of one known numeric type needs
none of that: the array's binary form (``array_send``: header, then a length word and the
big-endian value per element, length -1 for NULL) is one ``struct.pack`` over the whole
list when it has no NULL, and one short ``pack`` per element when it has.

Timestamps, strings and JSON values repeat within a batch (one stamp per cycle, "ok", job
ids): their arrays encode each distinct value once and look the rest up.

Wrap a list in the class of its column type (:func:`array_type`); the dumpers are
registered on the connection or cursor that sends it (:func:`register`). Values must fit
the type: the wire format's bounds (``wire.v1.Count``, ``wire.v1.SmallIndex``, string lengths)
guarantee that for ingest.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta, timezone
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


class Float4Array(_TypedArray):
    """float4 (``REAL``); a value beyond its range does not fit: callers saturate it first."""

    oid, element_oid, code, size = 1021, 700, "f", 4


class Int8Array(_TypedArray):
    oid, element_oid, code, size = 1016, 20, "q", 8


class Int4Array(_TypedArray):
    oid, element_oid, code, size = 1007, 23, "i", 4


class Int2Array(_TypedArray):
    oid, element_oid, code, size = 1005, 21, "h", 2


class BoolArray(_TypedArray):
    oid, element_oid, code, size = 1000, 16, "?", 1


class _MemoArray(list):
    """A list whose elements repeat (stamps of one cycle, "ok", job ids, device names): each
    distinct value is encoded once per array, then looked up."""

    oid: ClassVar[int]
    element_oid: ClassVar[int]

    @staticmethod
    def encode(value: Any) -> bytes:
        raise NotImplementedError

    @staticmethod
    def key(value: Any) -> Any:
        return value


class TimestamptzArray(_MemoArray):
    """Aware datetimes; binary timestamptz is microseconds since 2000-01-01 UTC."""

    oid, element_oid = 1185, 1184

    @staticmethod
    def encode(value: datetime) -> bytes:
        return _TIMESTAMP.pack(8, (value - _PG_EPOCH) // _MICROSECOND)


class TextArray(_MemoArray):
    """str values; VARCHAR(n) columns take them as text, and the INSERT's assignment cast
    refuses one longer than n (an explicit ::VARCHAR(n) would truncate it silently)."""

    oid, element_oid = 1009, 25

    @staticmethod
    def encode(value: str) -> bytes:
        data = value.encode()
        return _LENGTH.pack(len(data)) + data


class JsonbArray(_MemoArray):
    """JSON-able values (lists of scalars, dicts) for jsonb columns; None is SQL NULL."""

    oid, element_oid = 3807, 3802

    @staticmethod
    def encode(value: Any) -> bytes:
        data = jsonb_binary(value)
        return _LENGTH.pack(len(data)) + data

    @staticmethod
    def key(value: Any) -> Any:
        # lists of scalars (throttle reasons, XIDs, pids) repeat: key them by content; anything
        # else (dicts, nested lists) by identity, i.e. encoded each time
        found = json_list_key(value)
        return id(value) if found is None else found


def jsonb_binary(value: Any) -> bytes:
    """``value`` as jsonb's binary form (version 1, then the JSON text)."""
    return b"\x01" + json.dumps(value, separators=(",", ":")).encode()


def json_list_key(value: Any) -> tuple | None:
    """A key equal for lists of scalars that encode to the same JSON, None for anything else.
    The element types are part of it: ``[1]``, ``[1.0]`` and ``[True]`` are equal tuples but
    three different JSON texts."""
    if type(value) is not list:
        return None
    content = tuple(value)
    try:
        hash(content)
    except TypeError:  # a nested list or dict
        return None
    return content, tuple(map(type, content))


_PG_EPOCH = datetime(2000, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)
_TIMESTAMP = struct.Struct(">iq")
_LENGTH = struct.Struct(">i")
#: a one-dimensional array's header: dimensions, has-NULL flag, element type, length, lower bound
_HEADER = struct.Struct(">iiIii")

#: column type as SQLAlchemy compiles it for PostgreSQL -> the list class to wrap it in
ARRAY_FOR_SQL: dict[str, type[list]] = {
    "DOUBLE PRECISION": Float8Array,
    "REAL": Float4Array,
    "BIGINT": Int8Array,
    "INTEGER": Int4Array,
    "SMALLINT": Int2Array,
    "BOOLEAN": BoolArray,
    "TIMESTAMP WITH TIME ZONE": TimestamptzArray,
    "JSONB": JsonbArray,
}


def array_type(sql_type: str) -> type[list]:
    """The list class that sends a column of ``sql_type`` (as SQLAlchemy compiles it for
    PostgreSQL) in binary; plain ``list`` (psycopg's own dumpers) for any other type."""
    if sql_type.startswith(("VARCHAR", "TEXT")):
        return TextArray
    return ARRAY_FOR_SQL.get(sql_type, list)


@lru_cache(maxsize=512)
def _without_nulls(code: str, count: int) -> struct.Struct:
    return struct.Struct(">" + ("i" + code) * count)


@lru_cache(maxsize=16)
def _one(code: str) -> struct.Struct:
    return struct.Struct(">i" + code)


def pack(values: _TypedArray | _MemoArray) -> bytes:
    """``values`` in PostgreSQL's binary array format (one dimension, lower bound 1)."""
    if isinstance(values, _MemoArray):
        return _pack_memo(values)
    cls = type(values)
    has_null = None in values
    header = _HEADER.pack(1, int(has_null), cls.element_oid, len(values), 1)
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


def _pack_memo(values: _MemoArray) -> bytes:
    cls = type(values)
    header = _HEADER.pack
    if cls.key is _MemoArray.key:  # hashable values: each distinct one encoded, then looked up in C
        encode = cls.encode
        memo = {value: _NULL if value is None else encode(value) for value in set(values)}
        has_null = None in memo
        body = b"".join(map(memo.__getitem__, values))
        return header(1, int(has_null), cls.element_oid, len(values), 1) + body
    parts = encoded_each(values, cls.encode, cls.key, _NULL)
    return header(1, int(None in values), cls.element_oid, len(values), 1) + b"".join(parts)


def encoded_each(
    values: Iterable[Any], encode: Callable[[Any], bytes], key: Callable[[Any], Any], null: Any
) -> list[Any]:
    """Each value ``encode``d, once per distinct ``key`` (values whose key is their identity
    are encoded each time); None becomes ``null``. For values that repeat but are not hashable
    as they are (JSON lists): the array memo here and binary COPY (``daemon/store/pg_copy.py``)."""
    by_key: dict[Any, bytes] = {}
    out: list[Any] = []
    for value in values:
        if value is None:
            out.append(null)
            continue
        k = key(value)
        data = by_key.get(k)
        if data is None:
            data = by_key[k] = encode(value)
        out.append(data)
    return out


class _ArrayDumper(Dumper):
    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        return pack(obj)


#: one dumper class per array class, made once (a class per call was 1.5 % of the store path)
_DUMPERS = {
    cls: type(f"{cls.__name__}Dumper", (_ArrayDumper,), {"oid": cls.oid})
    for cls in (*ARRAY_FOR_SQL.values(), TextArray)
}


def register(context: AdaptContext) -> None:
    """Let ``context`` (a connection or cursor) send the typed lists in binary."""
    for cls, dumper in _DUMPERS.items():
        context.adapters.register_dumper(cls, dumper)
