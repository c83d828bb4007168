"""Column types that behave the same on PostgreSQL and SQLite."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import sqlalchemy as sa
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
