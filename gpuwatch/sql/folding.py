"""How a per-minute rollup row folds into its hour: one rule per column, read from its name.

The hourly tables (``gpu_hours``, ``node_hours``) have the minute tables' columns, so every
column of ``gpu_minutes`` and ``node_minutes`` must fold one known way: sums, counts of samples
and histogram bins add up; peaks, sizes and limits take the hour's largest, lows its smallest;
``simulated`` is true when any minute was; the texts of distinct XID and framework lists are
joined again (read back with ``rollups.xid_codes`` / ``rollups.framework_names``, which take
the distinct codes and names out of any such text). A column no rule names raises, so a new
minute column cannot be summed by accident. The migration that made the hourly tables
(``0024``) uses the same rules, so this module imports no table definitions.
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from gpuwatch.sql.buckets import hour_bucket
from gpuwatch.sql.types import UtcDateTime

SUM, MAX, MIN, ANY, TEXT = "sum", "max", "min", "any", "text"

#: sizes, limits and counts at one time: the hour's largest
_LARGEST = frozenset(
    {
        "memory_total_bytes",
        "power_limit_watts",
        "power_default_limit_watts",
        "total_bytes",
        "threads_per_core",
        "gpus_reporting",
    }
)
_SUMMED_SUFFIXES = ("_sum", "_n", "_sumsq", "_samples")
#: the columns that say which row a minute belongs to, grouped by and not folded
KEYS = frozenset({"node_id", "gpu_index", "minute"})


def fold_kind(name: str) -> str:
    """How the minute column ``name`` folds into its hour (:data:`SUM`, :data:`MAX`, ...)."""
    if (
        name in ("samples", "energy_joules")
        or name.endswith(_SUMMED_SUFFIXES)
        or name.startswith("util_bin_")
    ):
        return SUM
    if name.endswith("_max") or name in _LARGEST:
        return MAX
    if name.endswith("_min"):
        return MIN
    if name in ("simulated", "gpu_simulated"):
        return ANY
    if name in ("xid_codes", "frameworks"):
        return TEXT
    raise ValueError(f"no rule folds the minute column {name!r} into an hour (gpuwatch/sql/folding.py)")


def hourly_columns(minutes: sa.Table) -> list[sa.Column]:
    """The columns of a minute table's hourly twin: its own, keyed by ``hour`` instead of
    ``minute``, and ``minutes``, the minute rows folded in (a count of minutes over hours is
    its SUM). Raises for a column no rule folds (:func:`fold_kind`)."""
    columns: list[sa.Column] = []
    for column in minutes.c:
        if column.name == "minute":
            columns += [
                sa.Column("hour", UtcDateTime, primary_key=True),
                sa.Column("minutes", sa.SmallInteger, nullable=False),
            ]
            continue
        if column.name not in KEYS:
            fold_kind(column.name)
        columns.append(column._copy())
    return columns


def join_distinct(conn: sa.Connection, text: sa.ColumnElement) -> sa.ColumnElement:
    """The group's distinct non-NULL texts joined by spaces (commas on SQLite), NULL for none."""
    if conn.dialect.name == "postgresql":
        return sa.func.string_agg(sa.distinct(text), sa.literal_column("' '"))
    return sa.func.group_concat(sa.distinct(text))


def _folded(conn: sa.Connection, column: sa.ColumnElement, name: str) -> sa.ColumnElement:
    kind = fold_kind(name)
    if kind == SUM:
        out = sa.func.sum(column)
    elif kind == MAX:
        out = sa.func.max(column)
    elif kind == MIN:
        out = sa.func.min(column)
    elif kind == ANY:
        out = sa.func.max(sa.case((column, 1), else_=0)) > 0
    else:
        out = join_distinct(conn, column)
    return out.label(name)


def fold_select(
    conn: sa.Connection,
    minutes: sa.Table,
    start: datetime | None = None,
    end: datetime | None = None,
    node_id: int | None = None,
) -> sa.Select:
    """``minutes``' rows of ``[start, end)`` (whole hours; None: unbounded) folded per key and
    hour: the keys, ``hour``, ``minutes`` (the minute rows folded in) and every other column."""
    c = minutes.c
    keys = [col for col in c if col.name in KEYS and col.name != "minute"]
    query = sa.select(
        *keys,
        hour_bucket(conn, c.minute).label("hour"),
        sa.func.count().label("minutes"),
        *(_folded(conn, col, col.name) for col in c if col.name not in KEYS),
    )
    if start is not None:
        query = query.where(c.minute >= start)
    if end is not None:
        query = query.where(c.minute < end)
    if node_id is not None:
        query = query.where(c.node_id == node_id)
    # by position: PostgreSQL takes date_trunc('hour', ...) with its literal bound apart in GROUP BY
    return query.group_by(*keys, sa.text(str(len(keys) + 1)))
