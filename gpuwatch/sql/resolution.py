"""Which rollup tier answers a time range: the per-minute tables or the hourly ones.

Minutes are kept ``retention.minute_days``, hours ``retention.rollup_days``; retention records
where the minutes start (``rollup_state`` 'minutes_from', :func:`minutes_from`). A range that
starts there or later reads the minute tables; a range that starts before reads hourly rows,
all of it (no point series is half minutes, half hours): the hours folded so far from the hourly
tables, and the hours the rollups have not folded yet (the hour in progress) folded on the fly
from their minutes by the rule that will store them (``sql/folding.py``), so such a range reaches
its end too. A range on the hourly tier covers the hours it overlaps (its first and last hour
whole). Means (``sum / n``) are the same on either tier; a count of minutes is
``COUNT(*)`` of minute rows and ``SUM(minutes)`` of hour rows (:meth:`Tier.minutes`).
``job_minutes`` has no hourly twin: a job's long ranges read ``job_hours``.

A reader that only sums (the classifier's windows, a GPU's totals on the job page) takes a
range faster and whole to its end: :func:`spans` answers the whole hours already folded from
the hourly tables and the minutes around them from the minute tables (the sums are the same,
an hour row being the fold of its minutes; a range older than the minutes kept starts with
its first hour whole, and its hour in progress comes from the minutes), and
:func:`span_rows` reads those pieces as one row set.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from gpuwatch.sql import hours
from gpuwatch.sql.buckets import ceil_hour, epoch_seconds, floor_hour
from gpuwatch.sql.folding import KEYS, fold_select
from gpuwatch.sql.schema import gpu_hours, gpu_minutes, node_hours, node_minutes


@dataclass(frozen=True)
class Tier:
    """One resolution of the rollups: its GPU rows, its node rows (a table, or the hourly rows
    :func:`tier_for` reads to a range's end), their time column and width."""

    gpu: sa.FromClause
    node: sa.FromClause
    time_column: str
    width: timedelta

    @property
    def hourly(self) -> bool:
        return self.time_column == "hour"

    def time(self, table: sa.FromClause) -> sa.Column:
        """``table``'s time column (``minute`` or ``hour``), each row's bucket start."""
        return table.c[self.time_column]

    def within(
        self, table: sa.FromClause, start: datetime, end: datetime
    ) -> tuple[sa.ColumnElement[bool], ...]:
        """``table``'s rows of ``[start, end)``: on hours, those of the hours it overlaps."""
        first = floor_hour(start) if self.hourly else start
        return (self.time(table) >= first, self.time(table) < end)

    def minute_of(self, conn: sa.Connection, table: sa.FromClause, start: datetime) -> sa.ColumnElement:
        """Each row's minute counted from ``start`` (:func:`minute_offset`)."""
        return minute_offset(conn, self.time(table), start)

    def minutes(self, table: sa.FromClause) -> sa.ColumnElement:
        """The minutes a group of ``table``'s rows stands for (0 for no rows)."""
        if self.hourly:
            return sa.func.coalesce(sa.func.sum(table.c.minutes), 0)
        return sa.func.count()


def minute_offset(conn: sa.Connection, time: sa.ColumnElement, start: datetime) -> sa.ColumnElement:
    """A row's minute counted from ``start`` (an SQL integer), ``time`` its bucket start; 0 for
    an hour row that began before ``start``: it counts from its first minute in the range."""
    seconds = epoch_seconds(conn, time) - int(start.timestamp())
    return sa.case((seconds < 0, 0), else_=seconds) // 60


MINUTES = Tier(gpu_minutes, node_minutes, "minute", timedelta(minutes=1))
HOURS = Tier(gpu_hours, node_hours, "hour", timedelta(hours=1))


def minutes_from(conn: sa.Connection) -> datetime | None:
    """The minute tables hold every minute from this on; None: every minute ever rolled."""
    return hours.state(conn, hours.MINUTES_FROM)


def tier_for(conn: sa.Connection, start: datetime, end: datetime) -> Tier:
    """The rows a point series of ``[start, end)`` reads: the minutes where they reach back to
    ``start``; else hourly rows to ``end``, the hours not folded yet folded from their minutes
    (retention keeps those: it never drops a minute the hours do not hold)."""
    tier = tier_of(start, minutes_from(conn))
    if not tier.hourly:
        return tier
    folded = hours.state(conn, hours.STATE)
    if folded is None or folded >= end:
        return tier
    return Tier(
        _to_edge(conn, gpu_hours, gpu_minutes, folded, end),
        _to_edge(conn, node_hours, node_minutes, folded, end),
        HOURS.time_column,
        HOURS.width,
    )


def _to_edge(
    conn: sa.Connection, hourly: sa.Table, minutes: sa.Table, folded: datetime, end: datetime
) -> sa.Subquery:
    """``hourly``'s rows before ``folded`` and the hours of ``[folded, end)`` folded from
    ``minutes``, as one row set with ``hourly``'s columns and types (a sum on PostgreSQL is
    wider than its column: cast back, so a row reads the same from either side)."""
    unfolded = fold_select(conn, minutes, folded, end).subquery()
    as_stored = [
        unfolded.c[c.name] if c.name in KEYS or c.name == "hour" else sa.cast(unfolded.c[c.name], c.type)
        for c in hourly.c
    ]
    stored = sa.select(hourly).where(hourly.c.hour < folded)
    return sa.union_all(stored, sa.select(*as_stored)).subquery(hourly.name)


def tier_of(start: datetime, kept_from: datetime | None) -> Tier:
    """:func:`tier_for` with the minutes' start (:func:`minutes_from`) already read."""
    return HOURS if kept_from is not None and start < kept_from else MINUTES


@dataclass(frozen=True)
class Span:
    """A piece of a range and the tier that answers it."""

    tier: Tier
    start: datetime
    end: datetime


def spans(conn: sa.Connection, start: datetime, end: datetime) -> tuple[Span, ...]:
    """``[start, end)`` in pieces, each from the tier that answers it whole: the minutes before
    its first whole hour, the whole hours folded so far, and the minutes after them. A range
    that starts before the minutes kept (:func:`tier_for`) starts with the hour it begins in,
    whole: the hourly tier up to the hours folded, the minutes since (retention keeps them)."""
    kept_from = minutes_from(conn)
    folded = hours.state(conn, hours.STATE)
    if tier_of(start, kept_from) is HOURS:
        if folded is None or folded >= end:
            return (Span(HOURS, start, end),)
        return (Span(HOURS, start, folded), Span(MINUTES, folded, end))
    first, last = ceil_hour(start), floor_hour(end)
    if folded is not None:
        last = min(last, folded)
    if folded is None or last <= first:
        return (Span(MINUTES, start, end),)
    pieces = (Span(MINUTES, start, first), Span(HOURS, first, last), Span(MINUTES, last, end))
    return tuple(p for p in pieces if p.start < p.end)


def span_rows(
    pieces: Sequence[Span],
    table: Callable[[Tier], sa.Table],
    where: Callable[[sa.Table], Sequence[sa.ColumnElement[bool]]] = lambda _: (),
    columns: Sequence[str] | None = None,
) -> sa.Subquery:
    """The rows of each piece from its tier's ``table`` (``lambda t: t.gpu`` or ``t.node``)
    that pass ``where``, as one row set: the minute table's keys and ``columns`` (None: all of
    them), ``time`` for a row's bucket start, ``minutes`` for the minutes it holds and
    ``width_s`` for its bucket's length in seconds. Name only the columns read: building and
    compiling a union of every column costs milliseconds a statement."""
    keys = [c.name for c in table(MINUTES).c if c.name in ("node_id", "gpu_index")]
    if columns is None:
        columns = [c.name for c in table(MINUTES).c if c.name not in ("node_id", "gpu_index", "minute")]
    selects = []
    for piece in pieces:
        rows = table(piece.tier)
        minutes = rows.c.minutes if piece.tier.hourly else sa.literal(1, sa.Integer)
        width = int(piece.tier.width.total_seconds())
        selects.append(
            sa.select(
                *(rows.c[name] for name in (*keys, *columns)),
                piece.tier.time(rows).label("time"),
                sa.cast(minutes, sa.Integer).label("minutes"),
                sa.literal(width, sa.Integer).label("width_s"),
            ).where(*piece.tier.within(rows, piece.start, piece.end), *where(rows))
        )
    union = selects[0] if len(selects) == 1 else sa.union_all(*selects)
    return union.subquery()
