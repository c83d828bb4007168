"""Retention: raw samples for days, per-minute rollups for weeks, hourly ones for months, jobs
and verdicts forever.

On PostgreSQL raw samples go a whole daily partition at a time (``DROP TABLE`` of
``<table>_pYYYYMMDD``: instant, no vacuum debt); a partition goes only when its whole day
is older than the cut-off. On SQLite the same cut-off is a ``DELETE``. Rollups and the
batch idempotency records are deleted by time: the per-minute rollups after ``minute_days``
(cut at an hour start, and only once their hours are folded into ``gpu_hours`` / ``node_hours``
and summed into ``job_hours``), the hourly ones after ``rollup_days``. Where the minutes then
start is recorded in ``rollup_state`` ('minutes_from'), so readers pick the tier a range needs
without the config (``sql/resolution.py``). Slurm jobs, their GPUs and verdicts are kept:
they are small, and the CLI's history of a job needs them.

A job that runs across partition boundaries keeps its history: its minutes live in the
rollup tables, which outlive the raw partitions.

Per-process GPU readings (``gpu_process_packs``, packed per batch: see
``sql/process_packs.py``) can go sooner (``process_days``): no rollup, view or rule reads them;
they are there for "which pid held that GPU" in SQL.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

import sqlalchemy as sa

from gpuwatch.clock import utcnow
from gpuwatch.sql import hours, job_hours, progress
from gpuwatch.sql.buckets import floor_hour
from gpuwatch.sql.partitions import list_partitions, partition_name
from gpuwatch.sql.schema import (
    HOUR_TABLES,
    PARTITIONED_TABLES,
    ROLLUP_TABLES,
    gpu_process_packs,
    ingested_batches,
)

log = logging.getLogger(__name__)


@dataclass
class RetentionReport:
    dropped_partitions: list[str] = field(default_factory=list)
    deleted_rows: dict[str, int] = field(default_factory=dict)


def _partition_day(name: str) -> date | None:
    stamp = name.rpartition("_p")[2]
    if len(stamp) != 8 or not stamp.isdigit():
        return None
    return date(int(stamp[:4]), int(stamp[4:6]), int(stamp[6:]))


def apply_retention(
    engine: sa.Engine,
    *,
    raw_days: int,
    rollup_days: int,
    batch_record_days: int,
    minute_days: int | None = None,
    process_days: int | None = None,
    now: datetime | None = None,
) -> RetentionReport:
    """Delete what is older than each horizon; returns what went. ``minute_days``: how long the
    per-minute rollups stay (None: as long as the hourly ones, ``rollup_days``)."""
    now = now or utcnow()
    raw_cut = now - timedelta(days=raw_days)
    cuts = {table.name: raw_cut for table in PARTITIONED_TABLES}
    if process_days is not None:
        cuts[gpu_process_packs.name] = max(raw_cut, now - timedelta(days=process_days))
    report = RetentionReport()
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            for table in PARTITIONED_TABLES:
                for name in list_partitions(conn, table.name):
                    day = _partition_day(name)
                    # the whole day must be past the cut-off
                    if day is not None and day + timedelta(days=1) <= cuts[table.name].date():
                        assert name == partition_name(table.name, day)
                        conn.execute(sa.text(f'DROP TABLE "{name}"'))
                        report.dropped_partitions.append(name)
        else:
            for table in PARTITIONED_TABLES:
                deleted = conn.execute(table.delete().where(table.c.ts < cuts[table.name])).rowcount
                if deleted:
                    report.deleted_rows[table.name] = deleted
        rollup_cut = now - timedelta(days=rollup_days)
        minute_cut = _minute_cut(conn, now, rollup_cut, minute_days)
        for table in ROLLUP_TABLES:
            deleted = conn.execute(table.delete().where(table.c.minute < minute_cut)).rowcount
            if deleted:
                report.deleted_rows[table.name] = deleted
        for table in HOUR_TABLES:
            deleted = conn.execute(table.delete().where(table.c.hour < rollup_cut)).rowcount
            if deleted:
                report.deleted_rows[table.name] = deleted
        kept_from = hours.state(conn, hours.MINUTES_FROM)
        if kept_from is None or minute_cut > kept_from:
            progress.set_done_until(conn, progress.MINUTES_FROM, minute_cut)
        batch_cut = now - timedelta(days=batch_record_days)
        deleted = conn.execute(
            ingested_batches.delete().where(ingested_batches.c.received_at < batch_cut)
        ).rowcount
        if deleted:
            report.deleted_rows[ingested_batches.name] = deleted
    if report.dropped_partitions or report.deleted_rows:
        log.info(
            "retention: dropped %d partition(s), deleted %s",
            len(report.dropped_partitions),
            report.deleted_rows or "no rows",
        )
    return report


def _minute_cut(
    conn: sa.Connection, now: datetime, rollup_cut: datetime, minute_days: int | None
) -> datetime:
    """Where the minute tables start once retention has run: ``minute_days`` back, at an hour
    start (a partly deleted hour could not be folded again), and never past the hours folded or
    the job-hours summed so far: minutes go only once what outlives them was made from them."""
    if minute_days is None:
        return rollup_cut
    cut = floor_hour(now - timedelta(days=minute_days))
    made = [hours.state(conn, hours.STATE), hours.state(conn, job_hours.STATE)]
    if any(t is None for t in made):
        return min(cut, rollup_cut)
    return max(rollup_cut, min(cut, *(t for t in made if t is not None)))
