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
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from gpuwatch.alerts.outbox import Notice, dedup_key, existing_keys
from gpuwatch.alerts.templates import format as fmt
from gpuwatch.alerts.templates import job as job_tpl
from gpuwatch.alerts.templates.job import JobFacts, idle_count
from gpuwatch.config.alerts import AlertRule, AlertsConfig, EnforceMode, QuietHours, RecipientKind
from gpuwatch.sql.schema import alert_outbox, verdicts
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
    found = low_util_jobs(engine, LowUtilFilters(evaluated_since=since), now=now, evidence=True)
    return {job.raw_job_id: [facts_of(job, v) for v in (job.verdict, *job.others)] for job in found}


#: what a :class:`JobFacts` takes from the verdict it is about, under the verdict's names
_FROM_VERDICT = (
    "cause",
    "confidence",
    "window_kind",
    "window_start",
    "window_end",
    "summary",
    "evidence",
    "fix",
    "gpus",
    "gpu_hours",
    "gpu_hours_wasted",
    "mean_util_ratio",
    "verdict_id",
)


#: what a job's notice stores of its facts, under the same names (the outbox row's columns)
_NOTICE_FACTS = (
    "job_id",
    "cause",
    "user_name",
    "account",
    "verdict_id",
    "window_start",
    "window_end",
    "gpu_hours_wasted",
)


def facts_of(job: LowUtilJob, v: VerdictRow) -> JobFacts:
    return JobFacts(
        job_id=job.raw_job_id,
        job_name=job.name,
        user_name=job.user,
        account=job.account,
        partition=job.partition,
        state=job.state,
        **{name: getattr(v, name) for name in _FROM_VERDICT},
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


#: a later notice about the same job and cause is an escalation when more GPUs are idle, or
#: when it has wasted this many times the GPU-hours of the notice before and at least
#: ESCALATION_MIN_GPU_HOURS more (a whole-job window grows by itself: no news in minutes)
ESCALATION_WASTE_FACTOR = 3.0
ESCALATION_MIN_GPU_HOURS = 4.0
#: the cause that says "low, reason unknown": a specific cause found later replaces its notice
GENERIC_CAUSE = "unknown_low"


@dataclass(frozen=True)
class Sent:
    """A job notice queued before (whatever its delivery state): what a new one is weighed against."""

    job_id: str
    recipient: str
    cause: str
    created_at: datetime
    gpu_hours_wasted: float
    idle_gpus: int


def _recent_notices(engine: sa.Engine, since: datetime) -> list[Sent]:
    t, v = alert_outbox.c, verdicts.c
    query = (
        sa.select(t.job_id, t.recipient, t.cause, t.created_at, t.gpu_hours_wasted, v.evidence)
        .select_from(alert_outbox.outerjoin(verdicts, v.id == t.verdict_id))
        .where(t.kind == "job", t.created_at >= since)
        .order_by(t.created_at, t.id)
    )
    with engine.connect() as conn:
        return [
            Sent(
                r.job_id,
                r.recipient,
                r.cause,
                r.created_at,
                r.gpu_hours_wasted or 0.0,
                idle_count(r.evidence),
            )
            for r in conn.execute(query)
        ]


def follow_up(f: JobFacts, before: Sequence[Sent]) -> tuple[str | None, str | None]:
    """``(note, None)`` when a notice about ``f`` may go although this recipient heard about the
    job within the cooldown, saying why; ``(None, reason)`` when it may not; ``(None, None)``
    when the recipient heard nothing about the job.

    * the same cause was notified: only an escalation (more GPUs idle, or
      :data:`ESCALATION_WASTE_FACTOR` times the waste and :data:`ESCALATION_MIN_GPU_HOURS`
      more), and only once;
    * only :data:`GENERIC_CAUSE` was notified and ``f`` names a specific cause: it replaces that
      notice;
    * another specific cause was notified: ``f`` is a new finding, and goes (the person cooldown
      still applies), unless ``f`` is itself :data:`GENERIC_CAUSE`, which adds nothing.
    """
    if not before:
        return None, None
    named = [s for s in before if s.cause != GENERIC_CAUSE]
    if f.cause == GENERIC_CAUSE and named:  # "cause unknown" adds nothing to a named cause
        return None, f"job cooldown ({named[-1].cause} notified at {fmt.when(named[-1].created_at)})"
    same = [s for s in before if s.cause == f.cause]
    if same:
        if len(same) > 1:
            return None, f"job cooldown ({f.cause} notified and escalated already)"
        last = same[-1]
        idle_now = f.idle_gpus
        if idle_now > last.idle_gpus > 0:
            return (
                f"More GPUs are idle now: {idle_now}, against {last.idle_gpus} when we wrote at "
                f"{fmt.when(last.created_at)}.",
                None,
            )
        wasted = f.gpu_hours_wasted or 0.0
        if (
            last.gpu_hours_wasted > 0
            and wasted >= ESCALATION_WASTE_FACTOR * last.gpu_hours_wasted
            and wasted - last.gpu_hours_wasted >= ESCALATION_MIN_GPU_HOURS
        ):
            return (
                f"Still wasting: {fmt.number(wasted)} GPU-hours now, against "
                f"{fmt.number(last.gpu_hours_wasted)} when we wrote at {fmt.when(last.created_at)}.",
                None,
            )
        return None, f"job cooldown ({f.cause} notified at {fmt.when(last.created_at)})"
    if not named:
        first = before[0]
        return (
            f"This replaces our notice of {fmt.when(first.created_at)}, which could not name a cause: "
            "the cause is now clear.",
            None,
        )
    return "", None


def job_notice(cfg: AlertsConfig, f: JobFacts, target: Target, now: datetime) -> Notice:
    kind = target.recipient_kind
    link = cfg.job_link(f.job_id)
    every_gpu_idle = f.cause == "idle_allocation" and f.gpus is not None and f.idle_gpus >= f.gpus > 0
    if every_gpu_idle and cfg.enforcement.mode is EnforceMode.OFF:
        f = replace(f, suggest_scancel=True)
    if target.channel == "slack":
        payload = job_tpl.slack(f, link)
    else:
        hours = cfg.job_cooldown_s / 3600
        note = f"Further notices about this job and cause: at most one every {hours:g} h." if hours else ""
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
        **{name: getattr(f, name) for name in _NOTICE_FACTS},
    )


def _chosen(
    cfg: AlertsConfig, kind: RecipientKind, ranked: list[JobFacts]
) -> tuple[JobFacts | None, list[str]]:
    """The first of a job's verdicts (listing order) that a rule sends to ``kind``; else why none."""
    reasons: list[str] = []
    for f in ranked:
        rule = rule_for(cfg.rules, f.cause)
        if rule is None or kind not in rule.notify:
            continue
        why_not = passes(rule, f)
        if why_not is None:
            return f, reasons
        reasons.append(f"{f.cause}: {why_not}")
    return None, reasons


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
    heard: dict[tuple[str, str], list[Sent]] = {}
    for s in recent:
        if s.created_at >= job_since:
            heard.setdefault((s.job_id, s.recipient), []).append(s)
    notified_person = {s.recipient for s in recent if s.created_at >= user_since}

    candidates: list[Notice] = []
    # the job wasting most first: under the per-person cooldown, a user hears about the worst one
    order = sorted(jobs.items(), key=lambda kv: (-(kv[1][0].gpu_hours_wasted or 0.0), kv[0]))
    for job_id, ranked in order:
        for kind in RecipientKind:
            chosen, reasons = _chosen(cfg, kind, ranked)
            if chosen is None:
                if reasons:
                    result.skipped.append((job_id, kind.value, "; ".join(reasons)))
                continue
            found = targets(cfg, resolver, kind, chosen)
            if not found:
                result.skipped.append((job_id, kind.value, "no address or channel configured"))
            for target in found:
                before = heard.get((job_id, target.recipient), [])
                note, refused = follow_up(chosen, before)
                if refused:
                    result.skipped.append((job_id, target.recipient, refused))
                    continue
                person = kind in (RecipientKind.USER, RecipientKind.OWNER)
                if person and not note and target.recipient in notified_person:
                    result.skipped.append((job_id, target.recipient, "person cooldown"))
                    continue
                facts = replace(chosen, follows=note) if note else chosen
                candidates.append(job_notice(cfg, facts, target, now))
                heard.setdefault((job_id, target.recipient), []).append(
                    Sent(
                        job_id,
                        target.recipient,
                        chosen.cause,
                        now,
                        chosen.gpu_hours_wasted or 0.0,
                        chosen.idle_gpus,
                    )
                )
                if person:
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
