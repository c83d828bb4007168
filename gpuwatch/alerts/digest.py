"""Digests: daily for admins (top wasted GPU-hours by user, account, cause; the GPUs that
faulted), weekly per user
(their jobs' waste and their ``gpuwatch report`` row: efficiency, energy, the week before, the
jobs to request fewer GPUs or a smaller card and the estimated saving) and weekly per account
to its owners (the account's report row, its users by waste). The weekly
ones go by email and/or Slack DM (``digest.weekly_user_via``, ``weekly_account_via``), one
notice per way, each with its own dedup key.

The waste of a period is :func:`gpuwatch.views.waste_in_period`: per (job, cause), the
latest whole-job verdict evaluated in it, else the largest recent window (a lower bound). A
job's total is its largest cause, not the sum: two causes of one job describe the same idle
GPU-hours.

A digest with no job in it (the admins': and no GPU fault) is not sent. Each digest is due
once per period (the daily one at ``daily_at``, the weekly one at ``weekly_at`` on
``weekly_weekday``, in the digest's time zone) and carries a dedup key of its period, so a
restart, a second daemon or a late run still queues it once. A daemon that was down at the
due time queues it when it comes back (the daily one until the next is due; the weekly one
for two days).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import replace
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from gpuwatch.alerts.outbox import Notice, dedup_key, existing_keys
from gpuwatch.alerts.rules import RecipientResolver
from gpuwatch.alerts.templates import digest as tpl
from gpuwatch.alerts.templates.causes import cause_text
from gpuwatch.config.alerts import AlertsConfig, DigestVia, RecipientKind
from gpuwatch.views import GroupBy, JobWaste, ReportRow, usage_report, waste_in_period
from gpuwatch.views.faults import faults_by_node

log = logging.getLogger(__name__)

WEEKLY_CATCH_UP = timedelta(days=2)


def waste(engine: sa.Engine, start: datetime, end: datetime) -> list[JobWaste]:
    """:func:`gpuwatch.views.waste_in_period`, each verdict's fix filled from its cause's text."""
    return [
        r if r.fix else replace(r, fix=cause_text(r.cause).fix.safe_substitute(job_id=r.job_id))
        for r in waste_in_period(engine, start, end)
    ]


def _rank(totals: dict[str, tuple[float, set[str]]], top_n: int) -> list[tpl.Ranked]:
    ranked = sorted(totals.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top_n]
    return [tpl.Ranked(name, hours, len(jobs)) for name, (hours, jobs) in ranked]


def admin_digest(engine: sa.Engine, start: datetime, end: datetime, top_n: int) -> tpl.AdminDigest:
    """The period's waste by user, account and cause, and the GPUs that faulted in it (the node
    list's words: ``gpuwatch nodes --faulty``), for the admins."""
    rows = waste(engine, start, end)
    per_job = _largest_per_job(rows)
    with engine.connect() as conn:
        faulted = faults_by_node(conn, start, end)
    by_user: dict[str, tuple[float, set[str]]] = defaultdict(lambda: (0.0, set()))
    by_account: dict[str, tuple[float, set[str]]] = defaultdict(lambda: (0.0, set()))
    by_cause: dict[str, tuple[float, set[str]]] = defaultdict(lambda: (0.0, set()))
    for r in per_job.values():
        for table, key in ((by_user, r.user_name or "?"), (by_account, r.account or "?")):
            hours, jobs = table[key]
            table[key] = (hours + r.gpu_hours_wasted, jobs | {r.job_id})
    for r in rows:
        hours, jobs = by_cause[r.cause]
        by_cause[r.cause] = (hours + r.gpu_hours_wasted, jobs | {r.job_id})
    return tpl.AdminDigest(
        period_start=start,
        period_end=end,
        gpu_hours_wasted=sum(r.gpu_hours_wasted for r in per_job.values()),
        jobs=len(per_job),
        by_user=_rank(by_user, top_n),
        by_account=_rank(by_account, top_n),
        by_cause=_rank(by_cause, top_n),
        faults=[
            tpl.Fault(node, f.gpu_index, f.fault or "") for node, found in faulted.items() for f in found
        ],
    )


def _largest_per_job(rows: list[JobWaste]) -> dict[str, JobWaste]:
    """A job's waste is its largest cause: two causes of one job describe the same GPU-hours."""
    per_job: dict[str, JobWaste] = {}
    for r in rows:
        if r.job_id not in per_job or r.gpu_hours_wasted > per_job[r.job_id].gpu_hours_wasted:
            per_job[r.job_id] = r
    return per_job


def user_digests(
    engine: sa.Engine,
    start: datetime,
    end: datetime,
    min_hours: float,
    usage: dict[str, ReportRow] | None = None,
) -> list[tpl.UserDigest]:
    """Each user above ``min_hours`` wasted, with their jobs and ``usage`` (their report row)."""
    per_job = {k: r for k, r in _largest_per_job(waste(engine, start, end)).items() if r.user_name}
    by_user: dict[str, list[JobWaste]] = defaultdict(list)
    for r in per_job.values():
        by_user[r.user_name or ""].append(r)
    out = []
    for user, jobs in sorted(by_user.items()):
        total = sum(j.gpu_hours_wasted for j in jobs)
        if total < min_hours:
            continue
        jobs.sort(key=lambda j: (-j.gpu_hours_wasted, j.job_id))
        lines = [tpl.UserJobLine(j.job_id, j.job_name, j.cause, j.gpu_hours_wasted, j.fix) for j in jobs[:20]]
        out.append(tpl.UserDigest(user, start, end, total, lines, (usage or {}).get(user)))
    return out


def account_digests(
    engine: sa.Engine, start: datetime, end: datetime, accounts: list[str], min_hours: float, top_n: int
) -> list[tpl.AccountDigest]:
    """The week of each of ``accounts`` that wasted at least ``min_hours``, its users by waste."""
    if not accounts:
        return []
    rows = {r.group: r for r in usage_report(engine, GroupBy.ACCOUNT, start, end)}
    users: dict[str, dict[str, tuple[float, set[str]]]] = defaultdict(
        lambda: defaultdict(lambda: (0.0, set()))
    )
    for r in _largest_per_job(waste(engine, start, end)).values():
        hours, jobs = users[r.account or ""][r.user_name or "?"]
        users[r.account or ""][r.user_name or "?"] = (hours + r.gpu_hours_wasted, jobs | {r.job_id})
    out = []
    for account in sorted(accounts):
        row = rows.get(account)
        if row is None or row.gpu_hours_wasted < min_hours:
            continue
        out.append(tpl.AccountDigest(account, start, end, row, _rank(users[account], top_n)))
    return out


def _at(day: datetime, at, zone: ZoneInfo) -> datetime:  # type: ignore[no-untyped-def]
    return datetime(day.year, day.month, day.day, at.hour, at.minute, tzinfo=zone)


def daily_period(cfg: AlertsConfig, now: datetime) -> tuple[datetime, datetime]:
    """The last due time ≤ now and the day before it: the period the daily digest covers."""
    zone = ZoneInfo(cfg.digest.timezone)
    local = now.astimezone(zone)
    due = _at(local, cfg.digest.daily_at, zone)
    if due > local:
        due = _at(local - timedelta(days=1), cfg.digest.daily_at, zone)
    start = _at(due - timedelta(days=1), cfg.digest.daily_at, zone)
    return start.astimezone(now.tzinfo), due.astimezone(now.tzinfo)


def weekly_period(cfg: AlertsConfig, now: datetime) -> tuple[datetime, datetime]:
    zone = ZoneInfo(cfg.digest.timezone)
    local = now.astimezone(zone)
    back = (local.weekday() - cfg.digest.weekly_weekday) % 7
    due = _at(local - timedelta(days=back), cfg.digest.weekly_at, zone)
    if due > local:
        due = _at(due - timedelta(days=7), cfg.digest.weekly_at, zone)
    start = _at(due - timedelta(days=7), cfg.digest.weekly_at, zone)
    return start.astimezone(now.tzinfo), due.astimezone(now.tzinfo)


class Digests:
    """Queues due digests; remembers the periods it has done so a tick costs nothing after."""

    def __init__(
        self, engine: sa.Engine, cfg: AlertsConfig, resolver: RecipientResolver | None = None
    ) -> None:
        self.engine = engine
        self.cfg = cfg
        self.resolver = resolver or RecipientResolver(cfg)
        self._done: set[str] = set()

    def forget(self) -> None:
        """After a failed enqueue: look at every period again next time."""
        self._done.clear()

    def due(self, now: datetime) -> list[Notice]:
        """Notices of the digests due at ``now`` and not queued yet (not stored: enqueue them)."""
        notices: list[Notice] = []
        if self.cfg.digest.daily_admin:
            notices += self._daily(now)
        if self.cfg.digest.weekly_user or self.cfg.digest.weekly_account:
            notices += self._weekly(now)
        if notices:
            with self.engine.connect() as conn:
                queued = existing_keys(conn, [n.dedup_key for n in notices])
            notices = [n for n in notices if n.dedup_key not in queued]
        return notices

    def _daily(self, now: datetime) -> list[Notice]:
        start, end = daily_period(self.cfg, now)
        memo = f"daily:{end.isoformat()}"
        if memo in self._done:
            return []
        self._done.add(memo)
        targets: list[tuple[str, str]] = []
        if self.cfg.slack.configured:
            targets.append(("slack", self.cfg.slack.channel_name))
        if self.cfg.email.configured:
            targets += [("email", a) for a in self.cfg.admin_emails]
        if not targets:
            return []
        d = admin_digest(self.engine, start, end, self.cfg.digest.top_n)
        if not d.jobs and not d.faults:  # nothing wasted or faulted (a fresh install): nothing to read
            return []
        subject = tpl.admin_subject(d)
        out = []
        for channel, recipient in targets:
            out.append(
                Notice(
                    dedup_key=dedup_key("digest-daily", end, channel, recipient),
                    kind="digest",
                    channel=channel,
                    recipient=recipient,
                    recipient_kind=RecipientKind.ADMIN.value,
                    subject=subject,
                    payload=tpl.admin_slack(d) if channel == "slack" else tpl.admin_email(d),
                    not_before=now,
                    window_start=start,
                    window_end=end,
                    gpu_hours_wasted=d.gpu_hours_wasted,
                )
            )
        return out

    def _ways(self, via: list[DigestVia]) -> list[str]:
        """The channels of ``via`` that are configured (an unconfigured email means no mail)."""
        return [w.value for w in via if self.cfg.channel_configured(w.value)]

    def _weekly(self, now: datetime) -> list[Notice]:
        start, end = weekly_period(self.cfg, now)
        memo = f"weekly:{end.isoformat()}"
        digest = self.cfg.digest
        ways = self._ways(digest.weekly_user_via) if digest.weekly_user else []
        if memo in self._done or now - end > WEEKLY_CATCH_UP:
            return []
        if not ways and not (digest.weekly_account and self._ways(digest.weekly_account_via)):
            return []
        self._done.add(memo)
        out = self._weekly_accounts(now, start, end)
        if not ways:
            return out
        usage = {r.group: r for r in usage_report(self.engine, GroupBy.USER, start, end)}
        skip = set(digest.weekly_user_opt_out)  # every way: an opt-out is from the digest
        for d in user_digests(self.engine, start, end, digest.min_user_gpu_hours_wasted, usage):
            address = None if d.user_name in skip else self.resolver.user_email(d.user_name)
            if not address:
                continue
            for channel in ways:
                notice = _weekly_notice(
                    ("digest-weekly", d.user_name),
                    channel,
                    address,
                    RecipientKind.USER,
                    (now, start, end),
                    d.gpu_hours_wasted,
                )
                payload = (
                    tpl.user_slack(d, self.cfg.job_link)
                    if channel == "slack_dm"
                    else tpl.user_email(d, self.cfg.job_link)
                )
                out.append(
                    replace(notice, subject=tpl.user_subject(d), payload=payload, user_name=d.user_name)
                )
        return out

    def _weekly_accounts(self, now: datetime, start: datetime, end: datetime) -> list[Notice]:
        """Each account with owners (``account_owners``) gets its week, one notice per owner
        and way (``weekly_account_via``)."""
        digest = self.cfg.digest
        ways = self._ways(digest.weekly_account_via)
        if not digest.weekly_account or not ways:
            return []
        owned = [a for a in self.cfg.account_owners if self.resolver.owners(a)]
        out = []
        for d in account_digests(
            self.engine, start, end, owned, digest.min_account_gpu_hours_wasted, digest.top_n
        ):
            for address in self.resolver.owners(d.account):
                for channel in ways:
                    notice = _weekly_notice(
                        ("digest-account", d.account), channel, address, RecipientKind.OWNER,
                        (now, start, end), d.usage.gpu_hours_wasted,
                    )  # fmt: skip
                    payload = tpl.account_slack(d) if channel == "slack_dm" else tpl.account_email(d)
                    out.append(
                        replace(notice, subject=tpl.account_subject(d), payload=payload, account=d.account)
                    )
        return out


def _weekly_notice(
    key: tuple[str, str],
    channel: str,
    address: str,
    kind: RecipientKind,
    times: tuple[datetime, datetime, datetime],
    gpu_hours_wasted: float,
) -> Notice:
    """A weekly digest to ``address`` through ``channel`` (subject and payload set by the
    caller), keyed by its kind, whose it is, the period's end and the channel: queued once
    however often it is decided, and once per channel for someone who gets it both ways."""
    now, start, end = times
    name, whose = key
    return Notice(
        dedup_key=dedup_key(name, end, whose, channel, address),
        kind="digest",
        channel=channel,
        recipient=address,
        recipient_kind=kind.value,
        subject="",
        payload={},
        not_before=now,
        window_start=start,
        window_end=end,
        gpu_hours_wasted=gpu_hours_wasted,
    )
