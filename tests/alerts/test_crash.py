"""A worker killed (SIGKILL) in the middle of a send, and a new one taking over: what is
delivered, how many times, and what the outbox says about it."""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

from gpuwatch.alerts import outbox
from gpuwatch.alerts.rules import evaluate
from gpuwatch.alerts.worker import Worker
from gpuwatch.clock import utcnow
from tests.alerts.conftest import Clock, add_job, add_verdict, make_config

ROOT = Path(__file__).resolve().parents[2]


def _crash(url: str, cfg, phase: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.alerts.crash_worker", url, cfg.model_dump_json(), phase],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def _past_lease(engine, clock) -> None:
    """The dead worker's lease ran out (it ran on the real clock, started a moment later)."""
    [row] = outbox.list_rows(engine)
    clock.now = row.lease_until + timedelta(seconds=1)


def _setup(engine, smtp_port: int, in_doubt: str = "resend"):
    cfg = make_config(
        smtp_port=smtp_port,
        rules=[{"notify": ["user"]}],
        worker={"lease_s": 2},
        email={"timeout_s": 1, "in_doubt": in_doubt},
    )
    clock = Clock(utcnow())
    add_job(engine, "501", user="carol")
    add_verdict(engine, "501", evaluated_at=clock.now)
    assert outbox.enqueue(engine, evaluate(engine, cfg, clock.now).notices, clock.now) == 1
    return cfg, clock


def test_crash_after_claim_before_send_delivers_once(migrated, smtp_server):
    url, engine = migrated
    cfg, clock = _setup(engine, smtp_server.port)
    _crash(url, cfg, "claimed")
    assert smtp_server.messages == []
    [row] = outbox.list_rows(engine)
    assert row.status == "sending" and row.lease_owner == "doomed" and row.handoff_at is None
    # the restarted daemon: nothing happens until the dead worker's lease runs out ...
    clock.now = row.lease_until - timedelta(seconds=0.5)
    assert Worker(engine, cfg, clock=clock).run_once().handled == 0
    _past_lease(engine, clock)
    assert Worker(engine, cfg, clock=clock).run_once().sent == 1
    assert len(smtp_server.messages) == 1
    assert [a["outcome"] for a in outbox.attempts_of(engine, row.id)] == ["lost", "sent"]


def test_crash_at_handoff_before_data_delivers_once(migrated, smtp_server):
    url, engine = migrated
    cfg, clock = _setup(engine, smtp_server.port, in_doubt="hold")
    _crash(url, cfg, "handoff")
    assert smtp_server.messages == []
    _past_lease(engine, clock)
    # handoff was recorded, so the row is in doubt: with 'hold' it is parked, not resent ...
    assert Worker(engine, cfg, clock=clock).run_once().in_doubt == 1
    [row] = outbox.list_rows(engine)
    assert row.status == "in_doubt"
    # ... an admin who checked the mailbox requeues it
    outbox.requeue(engine, [row.id], clock.now)
    assert Worker(engine, cfg, clock=clock).run_once().sent == 1
    assert len(smtp_server.messages) == 1


def test_crash_after_send_before_mark_resend_keeps_message_id(migrated, smtp_server):
    """At-least-once: the SMTP server accepted the message, the worker died before recording it.
    The resend carries the same Message-ID, so one message reaches the user's mailbox."""
    url, engine = migrated
    cfg, clock = _setup(engine, smtp_server.port, in_doubt="resend")
    _crash(url, cfg, "sent")
    assert len(smtp_server.messages) == 1
    _past_lease(engine, clock)
    assert Worker(engine, cfg, clock=clock).run_once().sent == 1
    clock.advance(3600)
    assert Worker(engine, cfg, clock=clock).run_once().handled == 0
    ids = [m["Message-ID"] for m in smtp_server.messages]
    assert len(ids) == 2 and len(set(ids)) == 1  # delivered to the server twice, one message
    [row] = outbox.list_rows(engine)
    assert row.status == "sent"
    assert [a["outcome"] for a in outbox.attempts_of(engine, row.id)] == ["in_doubt", "sent"]


def test_crash_after_send_before_mark_hold_is_at_most_once(migrated, smtp_server):
    url, engine = migrated
    cfg, clock = _setup(engine, smtp_server.port, in_doubt="hold")
    _crash(url, cfg, "sent")
    _past_lease(engine, clock)
    for _ in range(3):
        Worker(engine, cfg, clock=clock).run_once()
        clock.advance(timedelta(hours=1).total_seconds())
    assert len(smtp_server.messages) == 1
    [row] = outbox.list_rows(engine)
    assert row.status == "in_doubt"
