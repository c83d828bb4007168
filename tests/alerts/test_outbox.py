"""The outbox's own guarantees: unique dedup keys, one winner per claim, lease recovery."""

from __future__ import annotations

import threading
from datetime import timedelta

from gpuwatch.alerts import outbox
from gpuwatch.alerts.base import Channel, Delivery
from gpuwatch.alerts.outbox import Notice, dedup_key
from gpuwatch.alerts.worker import Worker
from tests.alerts.conftest import T0, Clock, make_config


def notice(i: int, **kw) -> Notice:
    return Notice(
        dedup_key=dedup_key("test", i),
        kind="test",
        channel="email",
        recipient=f"u{i}@example.edu",
        recipient_kind="user",
        subject=f"s{i}",
        payload={"text": "t", "html": "h"},
        not_before=T0,
        **kw,
    )


class Counting(Channel):
    name = "email"

    def __init__(self) -> None:
        self.sent: list[int] = []
        self.lock = threading.Lock()

    def send(self, message, on_handoff):
        assert on_handoff()
        with self.lock:
            self.sent.append(message.outbox_id)
        return Delivery(250, "ok")


def test_dedup_key_is_stable_and_unique(engine):
    assert dedup_key("a", T0, None) == dedup_key("a", T0.astimezone(), None)
    assert dedup_key("a", "b") != dedup_key("ab")
    assert outbox.enqueue(engine, [notice(1), notice(2), notice(1)], T0) == 2
    assert outbox.enqueue(engine, [notice(2)], T0) == 0


def test_one_claim_wins(engine):
    outbox.enqueue(engine, [notice(1)], T0)
    [row] = outbox.candidates(engine, T0, 10)
    first = outbox.claim(engine, row, "a", T0, 60)
    assert first is not None and not first.in_doubt
    assert outbox.claim(engine, row, "b", T0, 60) is None  # stale view of the row
    assert outbox.candidates(engine, T0 + timedelta(seconds=30), 10) == []  # leased
    [expired] = outbox.candidates(engine, T0 + timedelta(seconds=61), 10)
    assert outbox.claim(engine, expired, "b", T0 + timedelta(seconds=61), 60) is not None
    # the first worker comes back from its stall: it may not hand over any more
    assert not outbox.mark_handoff(engine, first, "a", T0 + timedelta(seconds=62))


def test_concurrent_workers_send_each_notice_once(engine):
    outbox.enqueue(engine, [notice(i) for i in range(40)], T0)
    channel = Counting()
    cfg = make_config(smtp_port=2525)
    workers = [
        Worker(engine, cfg, channels={"email": channel}, clock=Clock(T0), worker_id=f"w{i}") for i in range(4)
    ]
    threads = [threading.Thread(target=w.run_once) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(channel.sent) == sorted({r.id for r in outbox.list_rows(engine)})
    assert {r.status for r in outbox.list_rows(engine)} == {"sent"}


def test_give_up_after(engine):
    from gpuwatch.alerts.base import ChannelError

    class Down(Channel):
        name = "email"

        def send(self, message, on_handoff):
            raise ChannelError("down", retry=True)

    outbox.enqueue(engine, [notice(1)], T0)
    cfg = make_config(smtp_port=2525, worker={"give_up_after_s": 3600})
    clock = Clock(T0)
    worker = Worker(engine, cfg, channels={"email": Down()}, clock=clock)
    assert worker.run_once().retried == 1
    clock.advance(3601)
    assert worker.run_once().failed == 1
    [row] = outbox.list_rows(engine)
    assert row.status == "failed" and row.last_error.startswith("gave up after 2 attempts")
