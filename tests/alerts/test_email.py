"""Email through a real SMTP server (aiosmtpd on 127.0.0.1): recipients, subject, both parts,
Message-ID, an outage, and permanent refusals."""

from __future__ import annotations

from gpuwatch.alerts import outbox
from gpuwatch.alerts.email import message_id
from gpuwatch.alerts.rules import evaluate
from gpuwatch.alerts.worker import Worker
from tests.alerts.conftest import add_job, add_verdict, make_config


def body(mail, subtype: str) -> str:
    return mail.get_body((subtype,)).get_content().replace("\r\n", "\n")


def _queue(engine, cfg, clock, jobs=("301",)):
    for job in jobs:
        add_job(engine, job, user=f"user{job}")
        add_verdict(engine, job, evaluated_at=clock.now)
    return outbox.enqueue(engine, evaluate(engine, cfg, clock.now).notices, clock.now)


def test_multipart_email_to_user_and_owner(engine, smtp_server, clock):
    cfg = make_config(
        smtp_port=smtp_server.port,
        rules=[{"notify": ["user", "owner"]}],
        account_owners={"nlp-lab": ["pi@example.edu", "manager@example.edu"]},
    )
    assert _queue(engine, cfg, clock) == 3
    assert Worker(engine, cfg, clock=clock).run_once().sent == 3
    envelopes = smtp_server.recorder.envelopes
    assert sorted(r for e in envelopes for r in e.rcpt_tos) == [
        "manager@example.edu",
        "pi@example.edu",
        "user301@example.edu",
    ]
    assert {e.mail_from for e in envelopes} == {"gpuwatch@example.edu"}
    by_to = {m["To"]: m for m in smtp_server.messages}
    mail = by_to["user301@example.edu"]
    assert mail["Subject"] == "[gpuwatch] Job 301: GPUs allocated but idle - 8.0 GPU-hours wasted"
    assert mail["From"] == "gpuwatch@example.edu" and mail["Auto-Submitted"] == "auto-generated"
    assert mail.get_content_type() == "multipart/alternative"
    text, html = body(mail, "plain"), body(mail, "html")
    assert text.startswith('Hello user301,\n\nyour Slurm job 301 "train" is not making good use')
    assert "How to fix it: If the work is done, end the job (scancel 301)" in text
    assert (
        "What we measured:\n  - Idle GPUs (0 % in every sample): gpu-node/gpu0, gpu-node/gpu1, "
        "gpu-node/gpu2, gpu-node/gpu3.\n  - Highest GPU utilization over the whole job: 0%." in text
    )
    assert "4 of the job's 4 GPU(s) read 0 % utilization in every sample" in text
    assert "Job page: https://gpuwatch.example.edu/jobs/301" in text
    assert (
        "<h2>GPUs allocated but idle</h2>" in html and 'href="https://gpuwatch.example.edu/jobs/301"' in html
    )
    owner_text = body(by_to["pi@example.edu"], "plain")
    assert owner_text.startswith('Hello,\n\na Slurm job of account nlp-lab (job 301 "train", user user301)')
    assert "as the owner of Slurm account nlp-lab" in owner_text
    row = next(r for r in outbox.list_rows(engine) if r.recipient == "user301@example.edu")
    assert mail["Message-ID"] == message_id(row.id, row.dedup_key, "example.edu")


def test_smtp_outage_then_each_notice_delivered_exactly_once(engine, smtp_server, clock):
    cfg = make_config(smtp_port=smtp_server.port, rules=[{"notify": ["user"]}], user_cooldown_s=0)
    smtp_server.stop()
    assert _queue(engine, cfg, clock, jobs=("401", "402", "403")) == 3
    worker = Worker(engine, cfg, clock=clock)
    for _ in range(3):  # the server stays down through several rounds
        report = worker.run_once()
        assert report.sent == 0 and report.retried + report.skipped >= 1
        clock.advance(60)
    assert all(r.status == "pending" for r in outbox.list_rows(engine))
    assert any("connect 127.0.0.1" in (r.last_error or "") for r in outbox.list_rows(engine))
    smtp_server.start()
    # a restarted daemon: a new worker, and the clock well past every back-off
    clock.advance(3600)
    worker = Worker(engine, cfg, clock=clock)
    assert worker.run_once().sent == 3
    assert worker.run_once().handled == 0
    clock.advance(86400)
    assert Worker(engine, cfg, clock=clock).run_once().handled == 0
    to = sorted(m["To"] for m in smtp_server.messages)
    assert to == ["user401@example.edu", "user402@example.edu", "user403@example.edu"]
    assert len({m["Message-ID"] for m in smtp_server.messages}) == 3
    # re-evaluating the same verdicts queues nothing new
    assert outbox.enqueue(engine, evaluate(engine, cfg, clock.now).notices, clock.now) == 0


class Refusing:
    def __init__(self, code: str) -> None:
        self.code = code

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):
        return self.code


def test_recipient_refused_5xx_fails_4xx_retries(engine, clock):
    from aiosmtpd.controller import Controller

    from tests.conftest import free_port

    port = free_port()
    controller = Controller(Refusing("550 5.1.1 no such user"), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        cfg = make_config(smtp_port=port, rules=[{"notify": ["user"]}])
        _queue(engine, cfg, clock)
        assert Worker(engine, cfg, clock=clock).run_once().failed == 1
        [row] = outbox.list_rows(engine)
        assert row.status == "failed" and "550" in row.last_error
        assert outbox.attempts_of(engine, row.id)[0]["status_code"] == 550
    finally:
        controller.stop()
    controller = Controller(Refusing("451 4.3.0 try later"), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        outbox.requeue(engine, [row.id], clock.now)
        assert Worker(engine, cfg, clock=clock).run_once().retried == 1
        assert outbox.list_rows(engine)[0].status == "pending"
    finally:
        controller.stop()
