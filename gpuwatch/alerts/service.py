"""One pass of the alerts: rules and digests decide, the outbox worker sends.

:meth:`AlertService.decide` turns verdicts into notices (and runs enforcement),
:meth:`AlertService.send` delivers what is due. The daemon schedules both
(:mod:`gpuwatch.daemon.alert_jobs`); ``gpuwatch alerts send`` runs :meth:`AlertService.tick` once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa

from gpuwatch.alerts.digest import Digests
from gpuwatch.alerts.enforce import Action, Enforcer
from gpuwatch.alerts.outbox import Notice, enqueue
from gpuwatch.alerts.rules import RecipientResolver, evaluate
from gpuwatch.alerts.worker import Report, Worker
from gpuwatch.clock import utcnow
from gpuwatch.config.alerts import AlertsConfig

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
