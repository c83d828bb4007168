"""Column types that behave the same on PostgreSQL and SQLite."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import DOUBLE_PRECISION, JSONB


class UtcDateTime(sa.TypeDecorator[datetime]):
    """Aware UTC datetimes in, aware UTC datetimes out.

    PostgreSQL stores ``timestamptz``; SQLite has no time zones, so values are stored as
    naive UTC there and made aware again on the way out. Naive input is refused: a naive
    timestamp is a bug upstream, not something to guess about.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r} given to a UTC column")
        value = value.astimezone(timezone.utc)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc)


#: JSON on SQLite, JSONB on PostgreSQL (indexable, compact). Python None is SQL NULL, never
#: the JSON text 'null': "absent" must look the same whichever path (INSERT or COPY) stored it
Json: Any = sa.JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")

#: float8 everywhere (SQLAlchemy's Float is float4-ish on some backends)
Double: Any = sa.Float(precision=53).with_variant(DOUBLE_PRECISION(), "postgresql")


def array_of(item: Any) -> Any:
    """A list column: ``item[]`` on PostgreSQL (compact, one value per element), a JSON list on
    SQLite (which has no arrays). Elements may be None."""
    # one dimension: an element that is itself a list (a JSON value) is the element's, not a
    # second dimension
    return sa.JSON(none_as_null=True).with_variant(postgresql.ARRAY(item, dimensions=1), "postgresql")


class UtcDateTimeList(sa.TypeDecorator[list]):
    """A list of aware UTC datetimes: ``timestamptz[]`` on PostgreSQL; on SQLite a JSON list of
    the same naive-UTC text SQLite's own datetime columns hold, so SQL there can compare them."""

    impl = sa.JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: sa.Dialect) -> sa.types.TypeEngine:
        if dialect.name == "postgresql":
            return dialect.type_descriptor(postgresql.ARRAY(sa.DateTime(timezone=True)))
        return dialect.type_descriptor(sa.JSON())

    # each element by UtcDateTime's own rule: aware in (naive refused), UTC out
    _element = UtcDateTime()

    def process_bind_param(self, value: list[datetime] | None, dialect: sa.Dialect) -> list | None:
        if value is None:
            return None
        stamps = [self._element.process_bind_param(v, dialect) for v in value]
        if dialect.name == "postgresql":
            return stamps
        return [v.isoformat(" ", "microseconds") for v in stamps]

    def process_result_value(self, value: list | None, dialect: sa.Dialect) -> list[datetime] | None:
        if value is None:
            return None
        if dialect.name != "postgresql":
            value = [datetime.fromisoformat(v) for v in value]
        return [self._element.process_result_value(v, dialect) for v in value]
