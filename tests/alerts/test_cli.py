"""``gpuwatch alerts``: send --dry-run changes nothing, send, list, attempts, retry, test."""

from __future__ import annotations

import json

from click.testing import CliRunner

from gpuwatch.alerts import outbox
from gpuwatch.cli.main import cli
from gpuwatch.clock import utcnow
from tests.alerts.conftest import add_job, add_verdict, make_config


def run(db_url: str, *args: str):
    result = CliRunner().invoke(cli, ["--db", db_url, "alerts", *args], catch_exceptions=False)
    return result


def test_send_dry_run_then_send_list_attempts(migrated, monkeypatch, slack_server, smtp_server):
    url, engine = migrated
    cfg = make_config(
        slack_url=slack_server.url,
        smtp_port=smtp_server.port,
        digest={"daily_admin": False, "weekly_user": False},  # the real clock may be past daily_at
    )
    monkeypatch.setattr("gpuwatch.cli.alerts._config", lambda: cfg)
    add_job(engine, "900", user="zoe")
    add_verdict(engine, "900", evaluated_at=utcnow())
    dry = run(url, "send", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "would queue 2 notice(s)" in dry.output
    assert "--- job via email to zoe@example.edu (job 900, cause idle_allocation)" in dry.output
    assert "Subject: [gpuwatch] Job 900: GPUs allocated but idle" in dry.output
    assert '"type": "header"' in dry.output
    assert outbox.list_rows(engine) == [] and slack_server.requests == [] and smtp_server.messages == []

    sent = run(url, "send")
    assert sent.exit_code == 0, sent.output
    assert "queued 2 notice(s)" in sent.output and "sent 2" in sent.output
    assert len(slack_server.requests) == 1 and [m["To"] for m in smtp_server.messages] == ["zoe@example.edu"]
    again = run(url, "send")
    assert "queued 0 notice(s)" in again.output and "sent 0" in again.output

    rows = json.loads(run(url, "list", "--format", "json").output)
    assert sorted((r["channel"], r["status"], r["attempts"]) for r in rows) == [
        ("email", "sent", 1),
        ("slack", "sent", 1),
    ]
    table = run(url, "list", "--status", "sent").output
    assert "zoe@example.edu" in table
    attempts = json.loads(run(url, "attempts", str(rows[0]["id"]), "--format", "json").output)
    assert [a["outcome"] for a in attempts] == ["sent"]


def test_retry_and_test_commands(migrated, monkeypatch, slack_server, smtp_server):
    url, _ = migrated
    cfg = make_config(
        slack_url=slack_server.url, smtp_port=smtp_server.port, admin_emails=["ops@example.edu"]
    )
    monkeypatch.setattr("gpuwatch.cli.alerts._config", lambda: cfg)
    out = run(url, "test", "slack")
    assert out.exit_code == 0 and "slack: sent to #gpu-admins (200 ok)" in out.output
    assert slack_server.bodies[0]["text"].startswith("gpuwatch test message")
    out = run(url, "test", "email")
    assert out.exit_code == 0, out.output
    assert [m["To"] for m in smtp_server.messages] == ["ops@example.edu"]
    assert smtp_server.messages[0]["Subject"] == "[gpuwatch] test message"
    slack_server.answers.append((404, {}, "no_service"))
    out = CliRunner().invoke(cli, ["--db", url, "alerts", "test", "slack"])
    assert out.exit_code == 1 and "404: no_service" in out.output
    assert run(url, "retry", "12345").output.strip() == "0 notice(s) queued again"


def test_unconfigured_channel(migrated, monkeypatch):
    url, _ = migrated
    monkeypatch.setattr("gpuwatch.cli.alerts._config", make_config)
    out = CliRunner().invoke(cli, ["--db", url, "alerts", "test", "email"])
    assert out.exit_code == 1 and "alerts.email is not configured" in out.output


def test_empty_outbox_and_no_channel_say_so(migrated, monkeypatch):
    url, engine = migrated
    monkeypatch.setattr("gpuwatch.cli.alerts._config", make_config)  # no channel set
    assert "the outbox is empty: no notice queued yet" in run(url, "list").output
    assert run(url, "list", "--status", "failed").output.strip() == "no notice is failed"
    assert run(url, "list", "--format", "json").output.strip() == "[]"
    assert "no send attempt of notice 7" in run(url, "attempts", "7").output
    add_job(engine, "900", user="zoe")
    add_verdict(engine, "900", evaluated_at=utcnow())
    sent = CliRunner().invoke(cli, ["--db", url, "alerts", "send"])
    assert sent.exit_code == 0 and "queued 0 notice(s)" in sent.output
    assert "no alert channel is configured, so no notice is queued or sent" in sent.output
