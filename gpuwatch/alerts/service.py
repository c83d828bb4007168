"""The alert jobs the daemon schedules, and ``register_alert_jobs`` that adds them.

Two jobs, both run only by the leader (:mod:`.leader`):

* ``alerts-rules`` every ``alerts.worker.interval_s``: verdicts → notices, due digests,
  enforcement; everything found is queued in the outbox;
* ``alerts-send`` at the same interval: the worker sends what is due.

``gpuwatch alerts send`` runs the same :meth:`AlertService.tick` once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpuwatch.alerts.config import AlertsConfig, alerts_config
from gpuwatch.alerts.digest import Digests
from gpuwatch.alerts.enforce import Action, Enforcer
from gpuwatch.alerts.outbox import Notice, enqueue
from gpuwatch.alerts.rules import RecipientResolver, evaluate
from gpuwatch.alerts.worker import Report, Worker
from gpuwatch.daemon.leader import LeaderLock
from gpuwatch.wire import utcnow

log = logging.getLogger(__name__)


@dataclass
class Decisions:
    """What one rules pass decided (queued, unless it was a dry run)."""

    notices: list[Notice] = field(default_factory=list)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    actions: list[Action] = field(default_factory=list)
    queued: int = 0


class AlertService:
    def __init__(
        self,
        engine: sa.Engine,
        cfg: AlertsConfig,
        *,
        clock: Callable[[], datetime] = utcnow,
        worker: Worker | None = None,
        enforcer: Enforcer | None = None,
    ) -> None:
        self.engine = engine
        self.cfg = cfg
        self.clock = clock
        self.resolver = RecipientResolver(cfg)
        self.digests = Digests(engine, cfg, self.resolver)
        self.enforcer = enforcer or Enforcer(engine, cfg, resolver=self.resolver)
        self.worker = worker or Worker(engine, cfg, clock=clock)

    def decide(self, *, dry_run: bool = False) -> Decisions:
        """Rules and digests (and, unless ``dry_run``, enforcement); queue the notices unless
        ``dry_run``. A fresh resolver per pass, so a changed lookup answer is seen."""
        now = self.clock()
        self.resolver = RecipientResolver(self.cfg)
        self.digests.resolver = self.resolver
        result = evaluate(self.engine, self.cfg, now, self.resolver)
        out = Decisions(notices=list(result.notices), skipped=list(result.skipped))
        if dry_run:
            out.notices += Digests(self.engine, self.cfg, self.resolver).due(now)
            return out
        digests = self.digests.due(now)
        out.notices += digests
        try:
            out.queued = enqueue(self.engine, out.notices, now)
        except Exception:
            self.digests.forget()
            raise
        out.actions = self.enforcer.run_once(now)
        return out

    def send(self) -> Report:
        return self.worker.run_once()

    def tick(self) -> tuple[Decisions, Report]:
        return self.decide(), self.send()


def register_alert_jobs(scheduler: Any, settings: Any, engine: sa.Engine) -> AlertService | None:
    """Add the alert jobs to the daemon's APScheduler ``scheduler``; nothing if alerts are off.

    The leader lock is taken lazily by the first job run and released when the scheduler
    shuts down."""
    cfg = alerts_config(settings)
    if not cfg.enabled:
        log.info("alerts: disabled (alerts.enabled = false)")
        return None
    from apscheduler.events import EVENT_SCHEDULER_SHUTDOWN

    service = AlertService(engine, cfg)
    leader = LeaderLock(engine, cfg.leader_lock_key)

    def rules_job() -> None:
        if leader.is_leader():
            d = service.decide()
            if d.queued or d.actions:
                log.info("alerts: %d notice(s) queued, %d enforcement action(s)", d.queued, len(d.actions))

    def send_job() -> None:
        if leader.is_leader():
            service.send()

    interval = cfg.worker.interval_s
    scheduler.add_job(
        rules_job, "interval", seconds=interval, id="alerts-rules", name="alert rules and digests"
    )
    scheduler.add_job(send_job, "interval", seconds=interval, id="alerts-send", name="alert outbox worker")
    scheduler.add_listener(lambda _event: leader.release(), EVENT_SCHEDULER_SHUTDOWN)
    return service
