"""Optional enforcement (``alerts.enforcement.mode``, off by default): warn the user of a job
whose GPUs all stay at 0%, then ``scancel`` it if they still do.

What counts as idle is :func:`gpuwatch.views.idle_jobs` with ``mean_util_ratio`` at most
``idle_util_max_ratio`` (0 by default: every GPU at 0%, since the mean of non-negative
utilizations is 0 only if each is): RUNNING jobs whose latest evaluations all found every GPU
idle, idle since the first window's start of that streak; a busy evaluation resets the clock.

Order of events, each at most once per job (``enforcement_actions`` primary key):

1. idle ≥ ``warn_after_s``: a warning to the user (email) and the admin channel;
2. idle ≥ ``cancel_after_s`` and the warning *sent* (not just queued) at least
   ``min_warning_s`` ago: ``<command_prefix> scancel <job>``, then a notice that it was done.

The cancel is recorded before ``scancel`` runs, so a crash in between leaves the job running
(never cancelled twice, never cancelled unrecorded). Jobs of allow-listed users, accounts or
partitions, and jobs Slurm does not list as RUNNING, are left alone. ``dry_run`` records and logs
the same decisions (as ``dry_run`` rows) and does nothing else.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from gpuwatch.alerts.outbox import SENT, Notice, dedup_key, enqueue
from gpuwatch.alerts.rules import RecipientResolver
from gpuwatch.alerts.templates import enforce as tpl
from gpuwatch.config.alerts import AlertsConfig, EnforceMode, RecipientKind
from gpuwatch.sql.engine import is_postgres
from gpuwatch.sql.schema import alert_outbox, enforcement_actions
from gpuwatch.views import IdleJob, idle_jobs

log = logging.getLogger(__name__)

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


@dataclass(frozen=True)
class Action:
    job_id: str
    action: str  # warn | cancel
    dry_run: bool
    command: list[str] | None = None
    returncode: int | None = None


class Enforcer:
    def __init__(
        self,
        engine: sa.Engine,
        cfg: AlertsConfig,
        *,
        runner: Runner = subprocess.run,
        resolver: RecipientResolver | None = None,
    ) -> None:
        self.engine = engine
        self.cfg = cfg
        self.ecfg = cfg.enforcement
        self.runner = runner
        self.resolver = resolver or RecipientResolver(cfg)

    def allowed(self, job: IdleJob) -> bool:
        e = self.ecfg
        return (
            job.user_name in e.allow_users
            or job.account in e.allow_accounts
            or job.partition in e.allow_partitions
        )

    def scancel_argv(self, job_id: str) -> list[str]:
        return [*self.ecfg.command_prefix, self.ecfg.scancel, job_id]

    def run_once(self, now: datetime) -> list[Action]:
        if self.ecfg.mode is EnforceMode.OFF:
            return []
        dry = self.ecfg.mode is EnforceMode.DRY_RUN
        actions: list[Action] = []
        since = now - timedelta(seconds=self.cfg.lookback_s)
        for job in idle_jobs(
            self.engine, evaluated_since=since, max_util_ratio=self.ecfg.idle_util_max_ratio
        ):
            if self.allowed(job):
                log.debug("enforcement: job %s is allow-listed", job.job_id)
                continue
            done = self._done(job.job_id, dry)
            if job.idle_s >= self.ecfg.warn_after_s and "warn" not in done:
                if self._record(job, "warn", dry, now):
                    actions.append(Action(job.job_id, "warn", dry))
                    self._notify(job, "warn", dry, now)
                continue
            if job.idle_s >= self.ecfg.cancel_after_s and "cancel" not in done and "warn" in done:
                warned_at = self._warned_at(job.job_id, dry, done["warn"])
                if warned_at is None or now - warned_at < timedelta(seconds=self.ecfg.min_warning_s):
                    continue
                argv = self.scancel_argv(job.job_id)
                if not self._record(job, "cancel", dry, now, command=argv):
                    continue
                if dry:
                    log.warning("enforcement [dry run]: would run %s", " ".join(argv))
                    actions.append(Action(job.job_id, "cancel", True, argv))
                else:
                    rc = self._scancel(job, argv)
                    actions.append(Action(job.job_id, "cancel", False, argv, rc))
                    if rc == 0:
                        self._notify(job, "cancel", False, now)
                if dry:
                    self._notify(job, "cancel", True, now)
        return actions

    # ----------------------------------------------------------------------- state
    def _done(self, job_id: str, dry: bool) -> dict[str, datetime]:
        t = enforcement_actions.c
        with self.engine.connect() as conn:
            return {
                r.action: r.at
                for r in conn.execute(sa.select(t.action, t.at).where(t.job_id == job_id, t.dry_run == dry))
            }

    def _warned_at(self, job_id: str, dry: bool, recorded_at: datetime) -> datetime | None:
        """When the user was told: the warning's send time (for real), the record's (dry run)."""
        if dry:
            return recorded_at
        t = alert_outbox.c
        with self.engine.connect() as conn:
            sent = conn.scalars(
                sa.select(sa.func.min(t.sent_at)).where(
                    t.kind == "enforce",
                    t.job_id == job_id,
                    t.cause == "warn",
                    t.recipient_kind == RecipientKind.USER.value,
                    t.status == SENT,
                )
            ).first()
        if sent is None:
            log.info("enforcement: job %s is due to be cancelled, but its warning is not sent yet", job_id)
        return sent

    def _record(
        self, job: IdleJob, action: str, dry: bool, now: datetime, command: list[str] | None = None
    ) -> bool:
        dialect = postgresql if is_postgres(self.engine) else sqlite
        stmt = (
            dialect.insert(enforcement_actions)
            .values(
                job_id=job.job_id,
                action=action,
                dry_run=dry,
                at=now,
                idle_since=job.idle_since,
                command=command,
            )
            .on_conflict_do_nothing()
            .returning(enforcement_actions.c.job_id)
        )
        with self.engine.begin() as conn:
            return conn.execute(stmt).first() is not None

    def _scancel(self, job: IdleJob, argv: list[str]) -> int:
        try:
            proc = self.runner(
                argv,
                capture_output=True,
                text=True,
                timeout=self.ecfg.command_timeout_s,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            rc, output = proc.returncode, (proc.stdout + proc.stderr)[-2000:]
        except (OSError, subprocess.TimeoutExpired) as exc:
            rc, output = -1, f"{type(exc).__name__}: {exc}"
        t = enforcement_actions.c
        with self.engine.begin() as conn:
            conn.execute(
                enforcement_actions.update()
                .where(t.job_id == job.job_id, t.action == "cancel", t.dry_run.is_(False))
                .values(returncode=rc, output=output)
            )
        level = logging.WARNING if rc == 0 else logging.ERROR
        log.log(level, "enforcement: %s -> exit %s %s", " ".join(argv), rc, output.strip()[:200])
        return rc

    def _notify(self, job: IdleJob, action: str, dry: bool, now: datetime) -> None:
        notices: list[Notice] = []
        common: dict[str, Any] = {
            "kind": "enforce",
            "job_id": job.job_id,
            "cause": action,
            "user_name": job.user_name,
            "account": job.account,
            "window_start": job.idle_since,
            "window_end": job.idle_until,
            "not_before": now,
        }
        link = self.cfg.job_link(job.job_id)
        address = self.resolver.user_email(job.user_name) if self.cfg.email.configured else None
        if address and not dry:
            if action == "warn":
                cancel_at = job.idle_since + timedelta(seconds=self.ecfg.cancel_after_s)
                cancel_at = max(cancel_at, now + timedelta(seconds=self.ecfg.min_warning_s))
                subject = tpl.warn_subject(job.job_id)
                payload = tpl.warn_email(job.job_id, job.user_name, job.gpus, job.idle_since, cancel_at, link)
            else:
                subject = tpl.cancel_subject(job.job_id)
                payload = tpl.cancel_email(job.job_id, job.user_name, job.idle_since, link)
            notices.append(
                Notice(
                    dedup_key=dedup_key("enforce", action, job.job_id, "email", address),
                    channel="email",
                    recipient=address,
                    recipient_kind=RecipientKind.USER.value,
                    subject=subject,
                    payload=payload,
                    **common,
                )
            )
        elif not address and not dry:
            log.warning(
                "enforcement: no address for user %s of job %s; cannot warn", job.user_name, job.job_id
            )
        if self.cfg.slack.configured:
            payload = tpl.admin_slack(action, job.job_id, job.user_name, job.account, job.idle_since, dry)
            notices.append(
                Notice(
                    dedup_key=dedup_key(
                        "enforce", action, dry, job.job_id, "slack", self.cfg.slack.channel_name
                    ),
                    channel="slack",
                    recipient=self.cfg.slack.channel_name,
                    recipient_kind=RecipientKind.ADMIN.value,
                    subject=payload["text"],
                    payload=payload,
                    **common,
                )
            )
        enqueue(self.engine, notices, now)
