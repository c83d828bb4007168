"""Time in SQL: buckets as one expression per dialect (PostgreSQL and SQLite from the same code),
and times read back from SQL as aware UTC datetimes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import sqlalchemy as sa

from gpuwatch.sql.types import UtcDateTime


def floor_hour(ts: datetime) -> datetime:
    """The start of ``ts``'s UTC hour (whatever zone ``ts`` is written in: an hour of +05:30
    does not start at a UTC hour)."""
    return ts.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)


def ceil_hour(ts: datetime) -> datetime:
    """The first UTC hour start at or after ``ts``."""
    floor = floor_hour(ts)
    return floor if floor == ts else floor + timedelta(hours=1)


def minute_bucket(conn: sa.Connection, column: sa.ColumnElement) -> sa.ColumnElement:
    """The start of the sample's minute, as a value comparable with UtcDateTime columns."""
    if conn.dialect.name == "postgresql":
        return sa.func.date_trunc("minute", column)
    # SQLAlchemy stores SQLite datetimes as 'YYYY-MM-DD HH:MM:SS.ffffff'
    return sa.func.strftime("%Y-%m-%d %H:%M:00.000000", column)


def hour_bucket(conn: sa.Connection, column: sa.ColumnElement) -> sa.ColumnElement:
    """The start of the row's UTC hour, as a value comparable with UtcDateTime columns."""
    if conn.dialect.name == "postgresql":
        return sa.func.date_trunc("hour", column)
    return sa.func.strftime("%Y-%m-%d %H:00:00.000000", column)


def epoch_seconds(conn: sa.Connection, column: sa.ColumnElement) -> sa.ColumnElement:
    """Seconds since 1970 of a UtcDateTime column, as an SQL integer (for bucketing in SQL)."""
    if conn.dialect.name == "postgresql":
        return sa.cast(sa.extract("epoch", column), sa.BigInteger)
    return sa.cast(sa.func.strftime("%s", column), sa.Integer)


def as_utc(conn: sa.Connection, value: Any) -> datetime:
    """A minute read back from SQL (a bucket, an aggregate) as an aware datetime: SQLite returns
    the text it stored or built."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return UtcDateTime().process_result_value(value, conn.dialect)  # type: ignore[return-value]
