"""Daily range partitions of the sample tables on PostgreSQL.

Each sample table is ``PARTITION BY RANGE (ts)``; partitions are named
``<table>_pYYYYMMDD`` and cover one UTC day. The daemon creates them ahead on a schedule
(``daemon.partition_days_ahead``) and, before storing a batch, for any day it has not
seen yet (a node with a skewed clock, a replay of old spool). There is no DEFAULT
partition: rows landing in one would block creating the real partition later.

Creation takes a transaction-level advisory lock so several daemon replicas can race
without tripping over each other. Retention (dropping old partitions) builds on
:func:`list_partitions`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import date, datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch.sql.schema import PARTITIONED_TABLES

log = logging.getLogger(__name__)

#: arbitrary constant key for pg_advisory_xact_lock, "gpwp" in ASCII
_PARTITION_LOCK_KEY = 0x67707770


def utc_day(ts: datetime) -> date:
    """The UTC day (the daily partition) of an aware stamp, whatever zone it came in."""
    return (ts if not ts.utcoffset() else ts.astimezone(timezone.utc)).date()


def partition_name(table: str, day: date) -> str:
    return f"{table}_p{day:%Y%m%d}"


def _bound(day: date) -> str:
    return datetime(day.year, day.month, day.day, tzinfo=timezone.utc).isoformat()


def list_partitions(conn: sa.Connection, table: str) -> list[str]:
    """Names of the existing partitions of ``table``, sorted (i.e. by day)."""
    rows = conn.execute(
        sa.text(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_class p ON p.oid = i.inhparent WHERE p.relname = :t ORDER BY c.relname"
        ),
        {"t": table},
    )
    return [r[0] for r in rows]


class PartitionManager:
    """Creates missing daily partitions; remembers which days exist to skip DDL after."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.enabled = engine.dialect.name == "postgresql"
        self._known: set[date] = set()

    def ensure_days(self, days: Iterable[date]) -> list[str]:
        """Make sure every table has a partition for each day; returns the names created."""
        missing = sorted(set(days) - self._known)
        if not self.enabled or not missing:
            return []
        created: list[str] = []
        with self.engine.begin() as conn:
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PARTITION_LOCK_KEY})
            existing = {name for t in PARTITIONED_TABLES for name in list_partitions(conn, t.name)}
            for day in missing:
                for table in PARTITIONED_TABLES:
                    name = partition_name(table.name, day)
                    if name in existing:
                        continue
                    conn.execute(
                        sa.text(
                            f'CREATE TABLE "{name}" PARTITION OF "{table.name}" '
                            f"FOR VALUES FROM ('{_bound(day)}') TO ('{_bound(day + timedelta(days=1))}')"
                        )
                    )
                    created.append(name)
        self._known.update(missing)
        if created:
            log.info("created %d partitions for %s", len(created), ", ".join(map(str, missing)))
        return created

    def ensure_ahead(self, days_ahead: int, today: date | None = None) -> list[str]:
        """Partitions from yesterday through ``days_ahead`` days from today (UTC)."""
        today = today or datetime.now(timezone.utc).date()
        return self.ensure_days(today + timedelta(days=i) for i in range(-1, days_ahead + 1))

    def forget(self) -> None:
        """Drop the cache (after retention dropped partitions, or in tests)."""
        self._known.clear()
