"""Verdicts → notices: which verdict tells whom, through which channel, and when.

The jobs are :func:`gpuwatch.views.low_util_jobs` — the listing the CLI and the web view
show — so a notice names the cause and GPU-hours wasted those show. Per job only its latest
evaluation counts (a job that recovered says 'healthy' and gets no notice). Each recipient
hears about the listing's verdict when it passes the first matching
:class:`~gpuwatch.config.alerts.AlertRule` (thresholds on wasted GPU-hours, window length and
confidence), else about the next of the evaluation's causes that does, in the listing's order.
Then, in order:

* the **dedup key** (job, cause, window kind/start/end, recipient, channel) makes a re-run over
  the same verdict a no-op;
* the **per-job cooldown** keeps one job from notifying the same recipient again within
  ``job_cooldown_s`` (rolling windows give a new key each evaluation);
* the **per-person cooldown** keeps a user (or account owner) from more than one job notice per
  ``user_cooldown_s``, whatever the number of jobs;
* **quiet hours** do not drop a notice: it is queued with ``not_before`` at their end.

Cooldowns count notices when queued, so a notice waiting out an SMTP outage still counts.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from gpuwatch.alerts.outbox import Notice, dedup_key, existing_keys
from gpuwatch.alerts.templates import job as job_tpl
from gpuwatch.alerts.templates.job import JobFacts
from gpuwatch.config.alerts import AlertRule, AlertsConfig, QuietHours, RecipientKind
from gpuwatch.sql.schema import alert_outbox
from gpuwatch.views import LowUtilFilters, LowUtilJob, VerdictRow, low_util_jobs

log = logging.getLogger(__name__)

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class RecipientResolver:
    """Addresses for users (pattern or lookup command, cached per instance) and account owners."""

    def __init__(self, cfg: AlertsConfig, runner: Runner = subprocess.run) -> None:
        self.cfg = cfg
        self._runner = runner
        self._cache: dict[str, str | None] = {}

    def user_email(self, user: str | None) -> str | None:
        if not user:
            return None
        if user not in self._cache:
            self._cache[user] = self._lookup(user)
        return self._cache[user]

    def _lookup(self, user: str) -> str | None:
        if self.cfg.user_email_command:
            argv = [a.replace("{user}", user) for a in self.cfg.user_email_command]
            try:
                proc = self._runner(
                    argv, capture_output=True, text=True, timeout=10, check=False, stdin=subprocess.DEVNULL
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                log.warning("user_email_command for %s failed: %s", user, exc)
                return None
            address = proc.stdout.strip().splitlines()[0].strip() if proc.stdout.strip() else ""
            if proc.returncode != 0 or "@" not in address:
                log.warning("user_email_command for %s: exit %s, no address", user, proc.returncode)
                return None
            return address
        if self.cfg.user_email_pattern:
            return self.cfg.user_email_pattern.replace("{user}", user)
        return None

    def owners(self, account: str | None) -> list[str]:
        return list(self.cfg.account_owners.get(account or "", []))


@dataclass(frozen=True)
class Target:
    recipient_kind: RecipientKind
    channel: str
    recipient: str


def targets(cfg: AlertsConfig, resolver: RecipientResolver, kind: RecipientKind, f: JobFacts) -> list[Target]:
    """Where a notice of ``kind`` about ``f`` goes, given the configured channels."""
    out: list[Target] = []
    if kind is RecipientKind.USER and cfg.email.configured:
        address = resolver.user_email(f.user_name)
        if address:
            out.append(Target(kind, "email", address))
    elif kind is RecipientKind.OWNER and cfg.email.configured:
        out += [Target(kind, "email", a) for a in resolver.owners(f.account)]
    elif kind is RecipientKind.ADMIN:
        if cfg.slack.configured:
            out.append(Target(kind, "slack", cfg.slack.channel_name))
        if cfg.email.configured:
            out += [Target(kind, "email", a) for a in cfg.admin_emails]
    return out


def quiet_until(q: QuietHours | None, kind: RecipientKind, now: datetime) -> datetime | None:
    """The end of the quiet period ``now`` falls in, for ``kind``; None outside quiet hours."""
    if q is None or kind not in q.applies_to or q.start == q.end:
        return None
    local = now.astimezone(ZoneInfo(q.timezone))
    t = local.time().replace(tzinfo=None)
    wraps = q.start > q.end  # e.g. 22:00 -> 07:00
    inside = (t >= q.start or t < q.end) if wraps else (q.start <= t < q.end)
    if not inside:
        return None
    end = local.replace(hour=q.end.hour, minute=q.end.minute, second=0, microsecond=0)
    if end <= local:
        end += timedelta(days=1)
    return end.astimezone(now.tzinfo)


def wasting_jobs(engine: sa.Engine, since: datetime, now: datetime) -> dict[str, list[JobFacts]]:
    """Per job wasting GPUs by its evaluation since ``since``: its waste verdicts, the listed one first."""
    found = low_util_jobs(engine, LowUtilFilters(evaluated_since=since), now=now)
    return {job.raw_job_id: [facts_of(job, v) for v in (job.verdict, *job.others)] for job in found}


def facts_of(job: LowUtilJob, v: VerdictRow) -> JobFacts:
    return JobFacts(
        job_id=job.raw_job_id,
        cause=v.cause,
        confidence=v.confidence,
        window_kind=v.window_kind,
        window_start=v.window_start,
        window_end=v.window_end,
        summary=v.summary,
        evidence=v.evidence,
        fix=v.fix,
        gpus=v.gpus,
        gpu_hours=v.gpu_hours,
        gpu_hours_wasted=v.gpu_hours_wasted,
        mean_util_ratio=v.mean_util_ratio,
        verdict_id=v.verdict_id,
        job_name=job.name,
        user_name=job.user,
        account=job.account,
        partition=job.partition,
        state=job.state,
    )


def rule_for(rules: Sequence[AlertRule], cause: str) -> AlertRule | None:
    return next((r for r in rules if r.matches(cause)), None)


def passes(rule: AlertRule, f: JobFacts) -> str | None:
    """None when ``f`` is past the rule's thresholds, else why not."""
    if (f.gpu_hours_wasted or 0.0) < rule.min_gpu_hours_wasted:
        return f"wasted {f.gpu_hours_wasted or 0:.2f} < {rule.min_gpu_hours_wasted:g} GPU-h"
    if f.duration_s < rule.min_duration_s:
        return f"window {f.duration_s:.0f} s < {rule.min_duration_s:g} s"
    if f.confidence < rule.min_confidence:
        return f"confidence {f.confidence:.2f} < {rule.min_confidence:g}"
    return None


@dataclass
class Evaluation:
    notices: list[Notice] = field(default_factory=list)
    #: (job_id, recipient or kind, reason) for what was considered and not queued
    skipped: list[tuple[str, str, str]] = field(default_factory=list)


def _recent_notices(engine: sa.Engine, since: datetime) -> list[tuple[str | None, str, datetime]]:
    t = alert_outbox.c
    with engine.connect() as conn:
        return [
            (r.job_id, r.recipient, r.created_at)
            for r in conn.execute(
                sa.select(t.job_id, t.recipient, t.created_at).where(t.kind == "job", t.created_at >= since)
            )
        ]


def job_notice(cfg: AlertsConfig, f: JobFacts, target: Target, now: datetime) -> Notice:
    kind = target.recipient_kind
    link = cfg.job_link(f.job_id)
    if target.channel == "slack":
        payload = job_tpl.slack(f, link)
    else:
        hours = cfg.job_cooldown_s / 3600
        note = f"Further notices about this job: at most one every {hours:g} h." if hours else ""
        payload = job_tpl.email(f, kind.value, link, note)
    return Notice(
        dedup_key=dedup_key(
            "job",
            f.job_id,
            f.cause,
            f.window_kind,
            f.window_start,
            f.window_end,
            target.channel,
            target.recipient,
        ),
        kind="job",
        channel=target.channel,
        recipient=target.recipient,
        recipient_kind=kind.value,
        subject=job_tpl.subject(f),
        payload=payload,
        not_before=quiet_until(cfg.quiet_hours, kind, now) or now,
        job_id=f.job_id,
        cause=f.cause,
        user_name=f.user_name,
        account=f.account,
        verdict_id=f.verdict_id,
        window_start=f.window_start,
        window_end=f.window_end,
        gpu_hours_wasted=f.gpu_hours_wasted,
    )


def evaluate(
    engine: sa.Engine, cfg: AlertsConfig, now: datetime, resolver: RecipientResolver | None = None
) -> Evaluation:
    """The notices the rules call for now, not yet stored (``outbox.enqueue`` stores them)."""
    resolver = resolver or RecipientResolver(cfg)
    result = Evaluation()
    jobs = wasting_jobs(engine, now - timedelta(seconds=cfg.lookback_s), now)
    horizon = now - timedelta(seconds=max(cfg.job_cooldown_s, cfg.user_cooldown_s))
    recent = _recent_notices(engine, horizon)
    job_since = now - timedelta(seconds=cfg.job_cooldown_s)
    user_since = now - timedelta(seconds=cfg.user_cooldown_s)
    notified_job = {(jid, rcpt) for jid, rcpt, at in recent if at >= job_since}
    notified_person = {rcpt for _, rcpt, at in recent if at >= user_since}

    candidates: list[Notice] = []
    # the job wasting most first: under the per-person cooldown, a user hears about the worst one
    order = sorted(jobs.items(), key=lambda kv: (-(kv[1][0].gpu_hours_wasted or 0.0), kv[0]))
    for job_id, ranked in order:
        for kind in RecipientKind:
            chosen: JobFacts | None = None
            reasons: list[str] = []
            for f in ranked:
                rule = rule_for(cfg.rules, f.cause)
                if rule is None or kind not in rule.notify:
                    continue
                why_not = passes(rule, f)
                if why_not is None:
                    chosen = f
                    break
                reasons.append(f"{f.cause}: {why_not}")
            if chosen is None:
                if reasons:
                    result.skipped.append((job_id, kind.value, "; ".join(reasons)))
                continue
            found = targets(cfg, resolver, kind, chosen)
            if not found:
                result.skipped.append((job_id, kind.value, "no address or channel configured"))
            for target in found:
                if (job_id, target.recipient) in notified_job:
                    result.skipped.append((job_id, target.recipient, "job cooldown"))
                    continue
                if kind in (RecipientKind.USER, RecipientKind.OWNER) and target.recipient in notified_person:
                    result.skipped.append((job_id, target.recipient, "person cooldown"))
                    continue
                candidates.append(job_notice(cfg, chosen, target, now))
                notified_job.add((job_id, target.recipient))
                if kind in (RecipientKind.USER, RecipientKind.OWNER):
                    notified_person.add(target.recipient)
    if candidates:
        with engine.connect() as conn:
            queued = existing_keys(conn, [n.dedup_key for n in candidates])
        for n in candidates:
            if n.dedup_key in queued:
                result.skipped.append((n.job_id or "", n.recipient, "already queued"))
            else:
                result.notices.append(n)
    return result
