"""Typed numeric arrays packed for PostgreSQL's binary protocol read back as sent."""

from __future__ import annotations

import struct
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from gpuwatch.daemon.store import pg_arrays
from tests.conftest import PG_ADMIN_URL, require_postgres

#: class -> (the SQL type name pg_typeof reports, values at the type's edges)
CASES = {
    pg_arrays.Float8Array: ("double precision", [0.0, -0.0, 1.5, -2.25, 1e300, 5e-324, 0.1]),
    pg_arrays.Int8Array: ("bigint", [0, 1, -1, 2**63 - 1, -(2**63), 42949672960]),
    pg_arrays.Int4Array: ("integer", [0, 7, -7, 2**31 - 1, -(2**31)]),
    pg_arrays.Int2Array: ("smallint", [0, 3, -3, 32767, -32768]),
    pg_arrays.BoolArray: ("boolean", [True, False, True]),
}


@pytest.fixture(scope="module")
def cursor():
    require_postgres()
    dsn = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as conn, conn.cursor() as cur:
        pg_arrays.register(cur)
        yield cur


@pytest.mark.postgres
@pytest.mark.parametrize("cls", list(CASES), ids=lambda c: c.__name__)
@pytest.mark.parametrize("shape", ["values", "with nulls", "all null", "empty", "long"])
def test_round_trip(cursor, cls, shape):
    sql_type, values = CASES[cls]
    if shape == "with nulls":
        values = [None, *values[:2], None, *values[2:], None]
    elif shape == "all null":
        values = [None] * 5
    elif shape == "empty":
        values = []
    elif shape == "long":  # more than one packed slice
        values = (values * (10_000 // len(values) + 1))[:10_000]
    cursor.execute("SELECT %b, pg_typeof(%b)::text", [cls(values), cls(values)])
    got, sent_as = cursor.fetchone()
    assert got == values
    assert sent_as == f"{sql_type}[]"  # sent with the array type's oid, no cast needed


def test_out_of_range_value_is_refused_not_wrapped():
    """struct refuses a value the column type cannot hold instead of storing a wrapped one."""
    with pytest.raises(struct.error):
        pg_arrays.pack(pg_arrays.Int2Array([40000]))


T = datetime(2026, 12, 3, 7, 0, 0, 123456, tzinfo=timezone.utc)
EST = timezone(-timedelta(hours=5))


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("cls", "sql_type", "values"),
    [
        # repeats (the memo), a NULL, another zone, the far past and the pre-2000 side of the epoch
        (
            pg_arrays.TimestamptzArray,
            "timestamp with time zone",
            [
                T,
                T,
                None,
                T + timedelta(seconds=10),
                T.astimezone(EST),
                T.replace(year=1990),
            ],
        ),
        (pg_arrays.TextArray, "text", ["ok", "ok", "", None, "mlx5_0", "µ-ünïcode ✓", "ok"]),
        (
            pg_arrays.JsonbArray,
            "jsonb",
            [
                ["sw_power_cap"],
                ["sw_power_cap"],
                None,
                [79, 13],
                {"nvml": "lost", "n": 1.5},
                [],
                {"a": [1, {"b": None}]},
                [{"a": 1}],  # a list that cannot be a memo key: encoded by identity
            ],
        ),
    ],
    ids=["timestamptz", "text", "jsonb"],
)
def test_repeating_values_round_trip(cursor, cls, sql_type, values):
    cursor.execute("SELECT %b, pg_typeof(%b)::text", [cls(values), cls(values)])
    got, sent_as = cursor.fetchone()
    assert got == values  # aware datetimes compare by instant
    assert sent_as == f"{sql_type}[]"


def test_column_types_map_to_binary_arrays():
    assert pg_arrays.array_type("VARCHAR(64)") is pg_arrays.TextArray
    assert pg_arrays.array_type("DOUBLE PRECISION") is pg_arrays.Float8Array
    assert pg_arrays.array_type("NUMERIC(10, 2)") is list  # no binary packer: psycopg's own dumper
