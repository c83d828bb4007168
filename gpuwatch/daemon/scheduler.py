"""Scheduled work inside the daemon (APScheduler), one place that lists every job.

Jobs now: create partitions ahead (hourly, and once at start) and roll raw samples up
per minute (every minute). Slurm sync, retention, classification and alerts add
themselves here as they land.
"""

from __future__ import annotations

import logging

from apscheduler.schedulers.background import BackgroundScheduler

from gpuwatch.config import Settings
from gpuwatch.sql.ingest import BatchStore
from gpuwatch.sql.rollups import Rollup

log = logging.getLogger(__name__)


def build_scheduler(settings: Settings, store: BatchStore) -> BackgroundScheduler:
    scheduler = BackgroundScheduler(timezone="UTC", job_defaults={"coalesce": True, "max_instances": 1})

    def partitions_ahead() -> None:
        store.partitions.forget()
        store.partitions.ensure_ahead(settings.daemon.partition_days_ahead)

    scheduler.add_job(partitions_ahead, "interval", hours=1, id="partitions", name="create partitions ahead")
    partitions_ahead()

    rollup = Rollup(store.engine)
    scheduler.add_job(rollup.run_once, "interval", minutes=1, id="rollup", name="per-minute rollups")
    return scheduler
