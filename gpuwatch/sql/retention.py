"""Retention: raw samples for days, per-minute rollups for months, jobs and verdicts forever.

On PostgreSQL raw samples go a whole daily partition at a time (``DROP TABLE`` of
``<table>_pYYYYMMDD``: instant, no vacuum debt); a partition goes only when its whole day
is older than the cut-off. On SQLite the same cut-off is a ``DELETE``. Rollups and the
batch idempotency records are deleted by time. Slurm jobs, their GPUs and verdicts are kept:
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
from gpuwatch.sql.partitions import list_partitions, partition_name
from gpuwatch.sql.schema import PARTITIONED_TABLES, ROLLUP_TABLES, gpu_process_packs, ingested_batches

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
    process_days: int | None = None,
    now: datetime | None = None,
) -> RetentionReport:
    """Delete what is older than each horizon; returns what went."""
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
        for table in ROLLUP_TABLES:
            deleted = conn.execute(table.delete().where(table.c.minute < rollup_cut)).rowcount
            if deleted:
                report.deleted_rows[table.name] = deleted
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
