"""The persistent outbox: notices are decided once, stored, then sent by the worker.

Life of a row (``alert_outbox.status``)::

    pending ──claim (lease)──► sending ──handoff──► (channel) ──► sent
       ▲                          │                       └─────► failed     (permanent error, or
       └──── retry (back-off) ────┘                                           give_up_after_s)
                      lease expired, no handoff ──► pending again (nothing was sent)
                      lease expired after handoff ──► in_doubt (HOLD) or resent (RESEND)

* :func:`enqueue` inserts with the unique ``dedup_key``; a second insert of the same key does
  nothing, so re-evaluating a verdict or re-running a digest never queues a notice twice.
* :func:`claim` is a compare-and-set ``UPDATE ... WHERE id = ? AND <claimable>``: of two workers
  (two daemons, or a worker and its replacement after a restart) exactly one wins a row. The
  claim, and an ``alert_attempts`` row, are committed before anything is sent.
* :func:`mark_handoff` commits ``handoff_at`` immediately before the message leaves (the SMTP
  ``DATA`` command, the webhook POST). A worker that dies before it leaves nothing to doubt; one
  that dies after it leaves a row whose lease expires with ``handoff_at`` set.

All times come from the caller (``now``), so tests drive the clock.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from gpuwatch.sql.engine import is_postgres
from gpuwatch.sql.schema import alert_attempts, alert_outbox

log = logging.getLogger(__name__)

PENDING, SENDING, SENT, FAILED, IN_DOUBT = "pending", "sending", "sent", "failed", "in_doubt"
STATUSES = (PENDING, SENDING, SENT, FAILED, IN_DOUBT)


def dedup_key(*parts: object) -> str:
    """SHA-256 of the parts joined by NUL: fixed width for the unique index, whatever an address's
    length. Datetimes are written ISO 8601 so one instant always gives one key."""
    text = "\0".join(p.isoformat() if isinstance(p, datetime) else "" if p is None else str(p) for p in parts)
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Notice:
    """One message to one recipient through one channel, rendered, not yet stored."""

    dedup_key: str
    kind: str  # job | digest | enforce | test
    channel: str  # slack | email
    recipient: str
    recipient_kind: str
    subject: str
    payload: dict[str, Any]
    not_before: datetime
    job_id: str | None = None
    cause: str | None = None
    user_name: str | None = None
    account: str | None = None
    verdict_id: int | None = None
    window_start: datetime | None = None
    window_end: datetime | None = None
    gpu_hours_wasted: float | None = None

    def row(self, now: datetime) -> dict[str, Any]:
        """The ``alert_outbox`` row that stores this notice, pending from ``now``."""
        stored = {f.name: getattr(self, f.name) for f in fields(Notice)}
        return stored | {
            "status": PENDING,
            "created_at": now,
            "not_before": max(now, self.not_before),
            "attempts": 0,
        }


@dataclass(frozen=True, kw_only=True)
class OutboxRow(Notice):
    """A stored notice as the worker and the CLI see it: the notice plus its delivery state."""

    id: int
    status: str
    created_at: datetime
    attempts: int
    lease_owner: str | None = None
    lease_until: datetime | None = None
    handoff_at: datetime | None = None
    sent_at: datetime | None = None
    last_error: str | None = None

    @classmethod
    def from_mapping(cls, m: Any) -> OutboxRow:
        return cls(**{k: m[k] for k in cls.__dataclass_fields__})

    def as_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "payload"}


def _insert_ignore(conn: sa.Connection, rows: list[dict[str, Any]]) -> int:
    dialect = postgresql if is_postgres(conn) else sqlite
    stmt = (
        dialect.insert(alert_outbox)
        .values(rows)
        .on_conflict_do_nothing(index_elements=["dedup_key"])
        .returning(alert_outbox.c.id)  # rowcount of a multi-row insert is -1 on psycopg
    )
    return len(conn.execute(stmt).all())


def enqueue(engine: sa.Engine, notices: Iterable[Notice], now: datetime) -> int:
    """Store the notices; returns how many were new (the rest were already queued)."""
    rows = [n.row(now) for n in notices]
    if not rows:
        return 0
    added = 0
    with engine.begin() as conn:
        for start in range(0, len(rows), 200):
            added += _insert_ignore(conn, rows[start : start + 200])
    log.info("outbox: %d notice(s) queued, %d already there", added, len(rows) - added)
    return added


def existing_keys(conn: sa.Connection, keys: Sequence[str]) -> set[str]:
    out: set[str] = set()
    for start in range(0, len(keys), 500):
        chunk = list(keys[start : start + 500])
        out |= set(
            conn.scalars(sa.select(alert_outbox.c.dedup_key).where(alert_outbox.c.dedup_key.in_(chunk)))
        )
    return out


def _claimable(now: datetime) -> sa.ColumnElement[bool]:
    t = alert_outbox.c
    return sa.or_(
        sa.and_(t.status == PENDING, t.not_before <= now),
        sa.and_(t.status == SENDING, t.lease_until < now),
    )


def candidates(engine: sa.Engine, now: datetime, limit: int) -> list[OutboxRow]:
    """Rows a worker may try to claim now, oldest due first (a claim may still lose the race)."""
    t = alert_outbox.c
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(alert_outbox).where(_claimable(now)).order_by(t.not_before, t.id).limit(limit)
        ).mappings()
        return [OutboxRow.from_mapping(r) for r in rows]


@dataclass(frozen=True)
class Claim:
    row: OutboxRow
    attempt_id: int
    #: the row was taken over from a worker whose lease expired after it had handed the message
    #: to the channel: the earlier attempt may have been delivered
    in_doubt: bool


def claim(engine: sa.Engine, row: OutboxRow, worker: str, now: datetime, lease_s: float) -> Claim | None:
    """Take ``row`` under a lease, or None when another worker has it (or it is no longer due).

    Recovering an expired lease closes the dead worker's attempt as ``lost`` (no handoff: nothing
    left) or ``in_doubt`` (it had handed the message over)."""
    t = alert_outbox.c
    with engine.begin() as conn:
        result = conn.execute(
            alert_outbox.update()
            .where(
                t.id == row.id,
                t.attempts == row.attempts,  # status + attempts + handoff_at: the row's version
                t.handoff_at.is_(None) if row.handoff_at is None else t.handoff_at == row.handoff_at,
                _claimable(now),
            )
            .values(
                status=SENDING,
                lease_owner=worker,
                lease_until=now + timedelta(seconds=lease_s),
                attempts=t.attempts + 1,
                handoff_at=None,
            )
        )
        if result.rowcount != 1:
            return None
        in_doubt = row.status == SENDING and row.handoff_at is not None
        if row.status == SENDING:
            conn.execute(
                alert_attempts.update()
                .where(alert_attempts.c.outbox_id == row.id, alert_attempts.c.outcome.is_(None))
                .values(
                    finished_at=now,
                    outcome="in_doubt" if in_doubt else "lost",
                    detail=f"lease of {row.lease_owner} expired"
                    + (
                        f" after handoff at {row.handoff_at.isoformat()}"
                        if row.handoff_at
                        else " before handoff"
                    ),
                )
            )
        attempt_id = conn.execute(
            alert_attempts.insert()
            .values(outbox_id=row.id, attempt=row.attempts + 1, worker=worker, started_at=now)
            .returning(alert_attempts.c.id)
        ).scalar_one()
    claimed = replace(row, status=SENDING, attempts=row.attempts + 1, lease_owner=worker)
    return Claim(claimed, attempt_id, in_doubt)


def mark_handoff(engine: sa.Engine, claim_: Claim, worker: str, now: datetime) -> bool:
    """Commit 'about to hand over' before the message leaves; False if the lease was lost."""
    t = alert_outbox.c
    with engine.begin() as conn:
        n = conn.execute(
            alert_outbox.update()
            .where(
                t.id == claim_.row.id,
                t.lease_owner == worker,
                t.status == SENDING,
                t.lease_until > now,  # a worker stalled past its lease must not send
            )
            .values(handoff_at=now)
        ).rowcount
    return n == 1


def _finish_attempt(
    conn: sa.Connection, claim_: Claim, now: datetime, outcome: str, code: int | None, detail: str | None
) -> None:
    conn.execute(
        alert_attempts.update()
        .where(alert_attempts.c.id == claim_.attempt_id)
        .values(finished_at=now, outcome=outcome, status_code=code, detail=(detail or "")[:2000] or None)
    )


def _end_attempt(
    engine: sa.Engine,
    claim_: Claim,
    worker: str,
    now: datetime,
    outcome: str,
    code: int | None,
    detail: str | None,
    **row: Any,
) -> bool:
    """Give up this worker's lease on the claimed row, setting ``row``'s columns, and close its
    attempt as ``outcome``, in one transaction. False when the lease had passed to another worker:
    the row is left as that worker has it, and the attempt is closed all the same."""
    t = alert_outbox.c
    with engine.begin() as conn:
        n = conn.execute(
            alert_outbox.update()
            .where(t.id == claim_.row.id, t.lease_owner == worker)
            .values(lease_owner=None, lease_until=None, **row)
        ).rowcount
        _finish_attempt(conn, claim_, now, outcome, code, detail)
    return n == 1


def mark_sent(
    engine: sa.Engine, claim_: Claim, worker: str, now: datetime, code: int | None, detail: str | None
) -> bool:
    ended = _end_attempt(
        engine, claim_, worker, now, "sent", code, detail, status=SENT, sent_at=now, last_error=None
    )
    if not ended:
        log.warning("outbox %d: sent, but the lease had passed to another worker", claim_.row.id)
    return ended


def mark_retry(
    engine: sa.Engine,
    claim_: Claim,
    worker: str,
    now: datetime,
    not_before: datetime,
    error: str,
    code: int | None,
    *,
    outcome: str = "retry",
) -> None:
    _end_attempt(
        engine,
        claim_,
        worker,
        now,
        outcome,
        code,
        error,
        status=PENDING,
        not_before=not_before,
        handoff_at=None,
        last_error=error[:2000],
    )


def mark_final(
    engine: sa.Engine, claim_: Claim, worker: str, now: datetime, status: str, error: str, code: int | None
) -> None:
    """``failed`` or ``in_doubt``: kept, never retried on its own (``retry`` requeues it)."""
    _end_attempt(engine, claim_, worker, now, status, code, error, status=status, last_error=error[:2000])


def requeue(engine: sa.Engine, ids: Sequence[int], now: datetime) -> int:
    """Put failed / in-doubt notices back to pending (``gpuwatch alerts retry``)."""
    t = alert_outbox.c
    with engine.begin() as conn:
        return (
            conn.execute(
                alert_outbox.update()
                .where(t.id.in_(list(ids)), t.status.in_([FAILED, IN_DOUBT]))
                .values(status=PENDING, not_before=now, handoff_at=None)
            ).rowcount
            or 0
        )


def list_rows(engine: sa.Engine, *, statuses: Sequence[str] = (), limit: int = 100) -> list[OutboxRow]:
    t = alert_outbox.c
    query = sa.select(alert_outbox).order_by(t.id.desc()).limit(limit)
    if statuses:
        query = query.where(t.status.in_(list(statuses)))
    with engine.connect() as conn:
        return [OutboxRow.from_mapping(r) for r in conn.execute(query).mappings()]


def attempts_of(engine: sa.Engine, outbox_id: int) -> list[dict[str, Any]]:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(alert_attempts)
            .where(alert_attempts.c.outbox_id == outbox_id)
            .order_by(alert_attempts.c.id)
        ).mappings()
        return [dict(r) for r in rows]
