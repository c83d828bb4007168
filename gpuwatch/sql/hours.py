"""The hourly rollups (``gpu_hours``, ``node_hours``): each complete hour of the minute tables
folded into a row per GPU-hour and node-hour, what ranges older than the minutes read.

Minutes are kept ``retention.minute_days`` (14), hours ``retention.rollup_days`` (400): at a
row per hour instead of sixty, 400 days of history cost what 7 days of minutes did
(``bench/storage.py``). An hour is folded once every minute of it is rolled up (before the
hour of the minute rollup's ``done_until``), tracked in ``rollup_state`` row :data:`STATE`.
Folding an hour is "delete its rows, insert them again from the minutes" in one transaction, so
it is idempotent; an hour whose minutes a late batch re-rolled is folded again
(:func:`refold`) in the transaction that re-rolls them (``Rollup.reroll``). How each column
folds: ``sql/folding.py``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa

from gpuwatch.sql import progress
from gpuwatch.sql.buckets import as_utc, ceil_hour, floor_hour
from gpuwatch.sql.folding import fold_select
from gpuwatch.sql.schema import HOUR_TABLES

#: ``rollup_state`` row: minutes folded into the hourly tables up to (exclusive, an hour start)
STATE = "hours"
#: ``rollup_state`` row set by retention: the minute tables hold every minute from here on
MINUTES_FROM = progress.MINUTES_FROM
HOUR = timedelta(hours=1)


def state(conn: sa.Connection, name: str) -> datetime | None:
    """The ``rollup_state`` time called ``name`` (``sql/progress.py``), as aware UTC; None
    before it was first set."""
    value = progress.done_until(conn, name)
    return None if value is None else as_utc(conn, value)


def fold(conn: sa.Connection, start: datetime, end: datetime, node_id: int | None = None) -> int:
    """(Re)build the hourly rows of the whole hours in ``[start, end)``, of one node or all,
    from the minute rows; the hours folded."""
    start, end = floor_hour(start), floor_hour(end)
    if end <= start:
        return 0
    for hourly, minutes in HOUR_TABLES.items():
        delete = hourly.delete().where(hourly.c.hour >= start, hourly.c.hour < end)
        if node_id is not None:
            delete = delete.where(hourly.c.node_id == node_id)
        conn.execute(delete)
        query = fold_select(conn, minutes, start, end, node_id)
        insert = hourly.insert().from_select([c.name for c in query.selected_columns], query)
        conn.execute(insert)
    return int((end - start) / HOUR)


def advance(conn: sa.Connection, minutes_done: datetime) -> int:
    """Fold the hours complete now that minutes are rolled up to ``minutes_done``; the hours
    folded. The first call starts at the first minute kept."""
    target = floor_hour(minutes_done)
    since = state(conn, STATE)
    if since is None:
        firsts = [conn.execute(sa.select(sa.func.min(m.c.minute))).scalar() for m in HOUR_TABLES.values()]
        known = [as_utc(conn, t) for t in firsts if t is not None]
        since = floor_hour(min(known)) if known else target
    written = fold(conn, since, target) if since < target else 0
    progress.set_done_until(conn, STATE, max(since, target))
    return written


def refold(conn: sa.Connection, start: datetime, end: datetime, node_id: int | None = None) -> int:
    """Fold again the already folded hours that re-rolled minutes ``[start, end)`` touch, never
    an hour before the minutes' start (:data:`MINUTES_FROM`: its minutes are gone)."""
    until = state(conn, STATE)
    if until is None:
        return 0
    first = floor_hour(start)
    kept_from = state(conn, MINUTES_FROM)
    if kept_from is not None:
        first = max(first, kept_from)
    stop = min(until, ceil_hour(end))
    return fold(conn, first, stop, node_id) if first < stop else 0
