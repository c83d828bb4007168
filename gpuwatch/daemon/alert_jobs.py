"""The alert jobs the daemon schedules, both run only by the holder of their leader lock.

* ``alerts-rules`` every ``alerts.worker.interval_s``: verdicts → notices, due digests,
  enforcement (:meth:`~gpuwatch.alerts.service.AlertService.decide`); everything found is
  queued in the outbox, and sent at once when anything was;
* ``alerts-send`` at the same interval: the worker sends what is due.

Alerts take their own advisory lock (``alerts.leader_lock_key``, :mod:`gpuwatch.daemon.leader`),
so one replica can evaluate alerts while another runs rollups.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa
from apscheduler.events import EVENT_SCHEDULER_SHUTDOWN
from apscheduler.schedulers.base import BaseScheduler
from apscheduler.triggers.interval import IntervalTrigger

from gpuwatch.alerts.service import AlertService
from gpuwatch.clock import utcnow
from gpuwatch.config import Settings
from gpuwatch.daemon.leader import LeaderLock

log = logging.getLogger(__name__)

#: both passes run on a grid of ``alerts.worker.interval_s`` from the epoch, offset to just
#: after classification (at :10 past a minute, ``daemon/scheduler.py``): a verdict is judged
#: within seconds of being stored
RULES_AT_S = 12


def register_alert_jobs(
    scheduler: BaseScheduler, settings: Settings, engine: sa.Engine, clock: Callable[[], datetime] = utcnow
) -> AlertService | None:
    """Add the alert jobs to the daemon's APScheduler ``scheduler``; nothing if alerts are off.

    The leader lock is taken lazily by the first job run and released when the scheduler
    shuts down."""
    cfg = settings.alerts
    if not cfg.enabled:
        log.info("alerts: disabled (alerts.enabled = false)")
        return None
    service = AlertService(engine, cfg, clock=clock)
    leader = LeaderLock(engine, cfg.leader_lock_key)

    def rules_job() -> None:
        if leader.is_leader():
            d = service.decide()
            if d.queued or d.actions:
                log.info("alerts: %d notice(s) queued, %d enforcement action(s)", d.queued, len(d.actions))
            if d.queued:  # out now, not at the worker's next pass
                service.send()

    def send_job() -> None:
        if leader.is_leader():
            service.send()

    def on_the_clock() -> IntervalTrigger:
        start = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=RULES_AT_S)
        return IntervalTrigger(seconds=cfg.worker.interval_s, start_date=start, timezone="UTC")

    scheduler.add_job(rules_job, on_the_clock(), id="alerts-rules", name="alert rules and digests")
    scheduler.add_job(send_job, on_the_clock(), id="alerts-send", name="alert outbox worker")
    scheduler.add_listener(lambda _event: leader.release(), EVENT_SCHEDULER_SHUTDOWN)
    return service
