"""The outbox worker: claim a due notice, hand it to its channel, record the outcome.

Guarantee (see docs/alerts.md, "Delivery"): **at-least-once, with the duplicate window
reduced to the handoff**. A notice is never lost to an outage (it stays pending and is retried
with exponential back-off, ``Retry-After`` honoured, until ``give_up_after_s``, then kept as
``failed``); a worker that dies before the handoff leaves nothing sent, and its replacement
sends once; only a worker that dies between the channel accepting the message and the commit
that marks it sent (milliseconds) can cause a second delivery, and then only if the channel's
``in_doubt`` policy is ``resend`` (email: the resend has the same Message-ID). With ``hold``
such a notice is parked as ``in_doubt`` instead: at-most-once for that case.

Workers in several daemons may run at once: claims are compare-and-set, so each notice is
handled by one worker at a time.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa

from gpuwatch.alerts import outbox
from gpuwatch.alerts.base import Channel, ChannelError, Message
from gpuwatch.alerts.email import EmailChannel
from gpuwatch.alerts.slack import SlackChannel
from gpuwatch.alerts.slack_dm import SlackDmChannel
from gpuwatch.clock import utcnow
from gpuwatch.config.alerts import AlertsConfig, InDoubtPolicy

log = logging.getLogger(__name__)

#: ``hook(phase, row)`` at "claimed", "handoff" and "sent" (before the row is marked): tests
#: use it to kill a worker at the worst moment
Hook = Callable[[str, outbox.OutboxRow], None]


def build_channels(cfg: AlertsConfig) -> dict[str, Channel]:
    channels: dict[str, Channel] = {}
    if cfg.slack.configured:
        channels["slack"] = SlackChannel(cfg.slack)
    if cfg.slack_dm.configured:
        channels["slack_dm"] = SlackDmChannel(cfg.slack_dm)
    if cfg.email.configured:
        channels["email"] = EmailChannel(cfg.email)
    return channels


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class Report:
    sent: int = 0
    retried: int = 0
    failed: int = 0
    in_doubt: int = 0
    skipped: int = 0  # lost the claim to another worker, or channel paused
    errors: list[str] = field(default_factory=list)

    @property
    def handled(self) -> int:
        return self.sent + self.retried + self.failed + self.in_doubt


class Worker:
    def __init__(
        self,
        engine: sa.Engine,
        cfg: AlertsConfig,
        *,
        channels: dict[str, Channel] | None = None,
        worker_id: str | None = None,
        clock: Callable[[], datetime] = utcnow,
        hook: Hook | None = None,
    ) -> None:
        self.engine = engine
        self.cfg = cfg
        self.wcfg = cfg.worker
        self.channels = build_channels(cfg) if channels is None else channels
        self.worker_id = worker_id or default_worker_id()
        self.clock = clock
        self.hook = hook or (lambda _phase, _row: None)
        #: channel -> paused until (429 Retry-After, refused connections), across rounds
        self.paused_until: dict[str, datetime] = {}

    def policy(self, channel: str) -> InDoubtPolicy:
        return self.cfg.in_doubt(channel)

    def backoff(self, attempts: int) -> timedelta:
        delay = min(self.wcfg.backoff_max_s, self.wcfg.backoff_initial_s * 2 ** max(0, attempts - 1))
        return timedelta(seconds=delay)

    def run_once(self, limit: int | None = None) -> Report:
        report = Report()
        now = self.clock()
        for row in outbox.candidates(self.engine, now, limit or self.wcfg.batch):
            paused = self.paused_until.get(row.channel)
            if paused is not None and paused > self.clock():
                report.skipped += 1
                continue
            self._one(row, report)
        return report

    def _one(self, row: outbox.OutboxRow, report: Report) -> None:
        now = self.clock()
        claim = outbox.claim(self.engine, row, self.worker_id, now, self.wcfg.lease_s)
        if claim is None:
            report.skipped += 1
            return
        row = claim.row
        if claim.in_doubt:
            if self.policy(row.channel) is InDoubtPolicy.HOLD:
                log.warning("outbox %d: previous attempt may have been delivered; held as in_doubt", row.id)
                outbox.mark_final(
                    self.engine,
                    claim,
                    self.worker_id,
                    now,
                    outbox.IN_DOUBT,
                    "a worker died after handing this to the channel; policy 'hold'",
                    None,
                )
                report.in_doubt += 1
                return
            log.warning(
                "outbox %d: previous attempt may have been delivered; resending (policy 'resend')", row.id
            )
        self.hook("claimed", row)
        channel = self.channels.get(row.channel)
        if channel is None:
            self._retry(
                claim, row, ChannelError(f"channel {row.channel!r} is not configured", retry=True), report
            )
            return

        def on_handoff() -> bool:
            ok = outbox.mark_handoff(self.engine, claim, self.worker_id, self.clock())
            if ok:
                self.hook("handoff", row)
            return ok

        message = Message(row.id, row.dedup_key, row.recipient, row.subject, row.payload)
        try:
            delivery = channel.send(message, on_handoff)
        except ChannelError as exc:
            self._failed_send(claim, row, exc, report)
            return
        except Exception as exc:  # a bug in a channel must not stop the queue
            log.exception("outbox %d: unexpected error from %s", row.id, row.channel)
            self._retry(claim, row, ChannelError(f"{type(exc).__name__}: {exc}", retry=True), report)
            return
        self.hook("sent", row)
        outbox.mark_sent(self.engine, claim, self.worker_id, self.clock(), delivery.code, delivery.detail)
        report.sent += 1
        log.info(
            "outbox %d: sent via %s to %s (%s)",
            row.id,
            row.channel,
            row.recipient,
            delivery.code,
            extra={"outbox_id": row.id, "channel": row.channel, "outcome": "sent", "attempt": row.attempts},
        )

    def _failed_send(
        self, claim: outbox.Claim, row: outbox.OutboxRow, exc: ChannelError, report: Report
    ) -> None:
        now = self.clock()
        if exc.in_doubt and self.policy(row.channel) is InDoubtPolicy.HOLD:
            outbox.mark_final(self.engine, claim, self.worker_id, now, outbox.IN_DOUBT, str(exc), exc.code)
            report.in_doubt += 1
            log.warning("outbox %d: %s; may have been delivered, held as in_doubt", row.id, exc)
            return
        if exc.retry:
            self._retry(claim, row, exc, report)
            return
        outbox.mark_final(self.engine, claim, self.worker_id, now, outbox.FAILED, str(exc), exc.code)
        report.failed += 1
        report.errors.append(f"{row.id}: {exc}")
        log.error(
            "outbox %d: %s refused it permanently: %s",
            row.id,
            row.channel,
            exc,
            extra={"outbox_id": row.id, "channel": row.channel, "outcome": "failed", "attempt": row.attempts},
        )

    def _retry(self, claim: outbox.Claim, row: outbox.OutboxRow, exc: ChannelError, report: Report) -> None:
        now = self.clock()
        report.errors.append(f"{row.id}: {exc}")
        if now - row.created_at > timedelta(seconds=self.wcfg.give_up_after_s):
            outbox.mark_final(
                self.engine,
                claim,
                self.worker_id,
                now,
                outbox.FAILED,
                f"gave up after {row.attempts} attempts: {exc}",
                exc.code,
            )
            report.failed += 1
            log.error("outbox %d: giving up after %d attempts: %s", row.id, row.attempts, exc)
            return
        delay = (
            timedelta(seconds=exc.retry_after_s)
            if exc.retry_after_s is not None
            else self.backoff(row.attempts)
        )
        not_before = now + delay
        outbox.mark_retry(self.engine, claim, self.worker_id, now, not_before, str(exc), exc.code)
        if exc.channel_down:
            self.paused_until[row.channel] = max(self.paused_until.get(row.channel, now), not_before)
        report.retried += 1
        log.warning(
            "outbox %d: %s failed (%s); retry at %s",
            row.id,
            row.channel,
            exc,
            not_before.isoformat(),
            extra={"outbox_id": row.id, "channel": row.channel, "outcome": "retry", "attempt": row.attempts},
        )
