"""Slack through a real local HTTP server standing in for the webhook: Block Kit JSON, 429, 5xx, 4xx."""

from __future__ import annotations

import sqlalchemy as sa

from gpuwatch.alerts import outbox
from gpuwatch.alerts.rules import evaluate
from gpuwatch.alerts.worker import Worker
from gpuwatch.sql.schema import alert_attempts
from tests.alerts.conftest import add_job, add_verdict, make_config


def _queue(engine, cfg, clock, jobs=("101",)):
    for job in jobs:
        add_job(engine, job, user=f"u{job}")
        add_verdict(engine, job, evaluated_at=clock.now)
    notices = evaluate(engine, cfg, clock.now).notices
    return outbox.enqueue(engine, notices, clock.now)


def test_block_kit_json_reaches_the_webhook(engine, slack_server, clock):
    cfg = make_config(slack_url=slack_server.url, rules=[{"notify": ["admin"]}])
    assert _queue(engine, cfg, clock) == 1
    report = Worker(engine, cfg, clock=clock).run_once()
    assert report.sent == 1
    [req] = slack_server.requests
    assert req["path"] == "/services/T000/B000/XXXX" and req["content_type"] == "application/json"
    body = req["json"]
    assert body["text"].startswith("GPUs allocated but idle: job 101 (u101)")
    types = [b["type"] for b in body["blocks"]]
    assert types == ["header", "section", "section", "section", "context", "actions"]
    header = body["blocks"][0]["text"]
    assert header == {"type": "plain_text", "text": ":zzz: GPUs allocated but idle: job 101", "emoji": True}
    fields = [f["text"] for f in body["blocks"][2]["fields"]]
    assert "*User*\nu101" in fields and "*Wasted*\n8.0 of 8.0 GPU-hours" in fields
    assert body["blocks"][3]["text"]["text"].startswith(
        "*Fix:* If the work is done, end the job (scancel 101)"
    )
    assert body["blocks"][5]["elements"][0]["url"] == "https://gpuwatch.example.edu/jobs/101"
    [row] = outbox.list_rows(engine)
    assert row.status == "sent" and row.attempts == 1 and row.sent_at == clock.now


def test_429_honours_retry_after_and_pauses_the_channel(engine, slack_server, clock):
    cfg = make_config(slack_url=slack_server.url, rules=[{"notify": ["admin"]}])
    assert _queue(engine, cfg, clock, jobs=("201", "202")) == 2
    slack_server.answers.append((429, {"Retry-After": "7"}, "rate_limited"))
    worker = Worker(engine, cfg, clock=clock)
    report = worker.run_once()
    assert (report.retried, report.sent, report.skipped) == (1, 0, 1)  # the 2nd is not even tried
    assert len(slack_server.requests) == 1
    first = next(r for r in outbox.list_rows(engine) if r.attempts == 1)
    assert first.status == "pending" and (first.not_before - clock.now).total_seconds() == 7
    clock.advance(3)
    assert worker.run_once().handled == 0 and len(slack_server.requests) == 1  # still paused
    clock.advance(4)
    report = worker.run_once()
    assert report.sent == 2 and len(slack_server.requests) == 3
    assert {r.status for r in outbox.list_rows(engine)} == {"sent"}
    with engine.connect() as conn:
        outcomes = sorted(conn.scalars(sa.select(alert_attempts.c.outcome)))
        codes = sorted(c for c in conn.scalars(sa.select(alert_attempts.c.status_code)) if c)
    assert outcomes == ["retry", "sent", "sent"] and codes == [200, 200, 429]


def test_500_backs_off_then_delivers_once(engine, slack_server, clock):
    cfg = make_config(slack_url=slack_server.url, rules=[{"notify": ["admin"]}])
    _queue(engine, cfg, clock)
    slack_server.answers += [(500, {}, "oops"), (503, {}, "busy")]
    worker = Worker(engine, cfg, clock=clock)
    assert worker.run_once().retried == 1
    [row] = outbox.list_rows(engine)
    assert (row.not_before - clock.now).total_seconds() == 10  # backoff_initial_s
    assert row.last_error.startswith("500")
    clock.advance(10)
    assert worker.run_once().retried == 1
    [row] = outbox.list_rows(engine)
    assert (row.not_before - clock.now).total_seconds() == 20  # doubled
    clock.advance(20)
    assert worker.run_once().sent == 1
    assert len(slack_server.requests) == 3
    assert len({str(b) for b in slack_server.bodies}) == 1  # the same message each time
    assert [a["outcome"] for a in outbox.attempts_of(engine, row.id)] == ["retry", "retry", "sent"]


def test_4xx_is_permanent(engine, slack_server, clock):
    cfg = make_config(slack_url=slack_server.url, rules=[{"notify": ["admin"]}])
    _queue(engine, cfg, clock)
    slack_server.answers.append((400, {}, "invalid_blocks"))
    report = Worker(engine, cfg, clock=clock).run_once()
    assert report.failed == 1
    [row] = outbox.list_rows(engine)
    assert row.status == "failed" and "invalid_blocks" in row.last_error
    clock.advance(86400)
    assert Worker(engine, cfg, clock=clock).run_once().handled == 0
    assert outbox.requeue(engine, [row.id], clock.now) == 1
    assert Worker(engine, cfg, clock=clock).run_once().sent == 1


def test_unreachable_webhook_is_retried_not_lost(engine, clock):
    from tests.conftest import free_port

    cfg = make_config(slack_url=f"http://127.0.0.1:{free_port()}/hook", rules=[{"notify": ["admin"]}])
    _queue(engine, cfg, clock)
    report = Worker(engine, cfg, clock=clock).run_once()
    assert report.retried == 1
    [row] = outbox.list_rows(engine)
    assert row.status == "pending" and "ConnectionError" in row.last_error
