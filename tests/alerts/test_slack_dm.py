"""Slack DMs through a real local HTTP server standing in for the Slack Web API: the lookup, the
post, and each kind of refusal (recipient, token, rate limit, outage, lost answer)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from gpuwatch.alerts import outbox
from gpuwatch.alerts.worker import Worker
from gpuwatch.cli.main import cli
from gpuwatch.config.alerts import AlertsConfig
from tests.alerts.conftest import make_config

BLOCKS = [{"type": "section", "text": {"type": "mrkdwn", "text": "*5.0 GPU-hours* wasted"}}]


def _cfg(slack_api, **kw):
    return make_config(slack_api_url=slack_api.api_url, **kw)


def _queue(engine, clock, *addresses):
    """One DM notice per address, queued as the digest queues them."""
    notices = [
        outbox.Notice(
            dedup_key=outbox.dedup_key("t", i, address),
            kind="digest",
            channel="slack_dm",
            recipient=address,
            recipient_kind="user",
            subject="[gpuwatch] Your GPU jobs this week",
            payload={"text": "Your GPU jobs this week", "blocks": BLOCKS},
            not_before=clock.now,
        )
        for i, address in enumerate(addresses)
    ]
    return outbox.enqueue(engine, notices, clock.now)


def _rows(engine):
    return {r.recipient: r for r in outbox.list_rows(engine)}


def test_lookup_then_post_with_the_bot_token(engine, slack_api, clock):
    slack_api.users["alice@example.edu"] = "U0ALICE"
    _queue(engine, clock, "alice@example.edu")
    report = Worker(engine, _cfg(slack_api), clock=clock).run_once()
    assert report.sent == 1
    lookup, post = slack_api.requests
    assert lookup["path"] == "/api/users.lookupByEmail" and post["path"] == "/api/chat.postMessage"
    assert {lookup["authorization"], post["authorization"]} == {"Bearer xoxb-test-token"}
    assert lookup["body"] == {"email": "alice@example.edu"}
    assert post["content_type"].startswith("application/json")
    assert post["body"] == {"channel": "U0ALICE", "text": "Your GPU jobs this week", "blocks": BLOCKS}
    [row] = outbox.list_rows(engine)
    assert row.status == "sent" and row.attempts == 1
    [attempt] = outbox.attempts_of(engine, row.id)
    assert attempt["status_code"] == 200 and attempt["detail"] == "ok channel=DU0ALICE ts=1700000000.000001"


def test_the_lookup_is_cached_per_channel(engine, slack_api, clock):
    slack_api.users["alice@example.edu"] = "U0ALICE"
    assert _queue(engine, clock, "alice@example.edu", "alice@example.edu") == 2  # one person
    worker = Worker(engine, _cfg(slack_api), clock=clock)
    assert worker.run_once().sent == 2
    assert len(slack_api.calls("users.lookupByEmail")) == 1
    assert [b["channel"] for b in slack_api.posted] == ["U0ALICE", "U0ALICE"]


def test_users_not_found_fails_that_notice_only(engine, slack_api, clock):
    slack_api.users["bob@example.edu"] = "U0BOB"
    _queue(engine, clock, "ghost@example.edu", "bob@example.edu")
    report = Worker(engine, _cfg(slack_api), clock=clock).run_once()
    assert (report.failed, report.sent) == (1, 1)
    rows = _rows(engine)
    assert rows["ghost@example.edu"].status == "failed"
    assert rows["ghost@example.edu"].last_error == "users.lookupByEmail: users_not_found"
    assert rows["bob@example.edu"].status == "sent"
    assert [b["channel"] for b in slack_api.posted] == ["U0BOB"]


@pytest.mark.parametrize(
    ("method", "answer", "words"),
    [
        (
            "users.lookupByEmail",
            {"ok": False, "error": "invalid_auth"},
            "needs scopes users:read.email, chat:write",
        ),
        (
            "chat.postMessage",
            {"ok": False, "error": "missing_scope", "needed": "chat:write", "provided": "users:read.email"},
            "missing_scope (the token lacks scope chat:write",
        ),
    ],
)
def test_an_unusable_token_takes_the_channel_down(engine, slack_api, clock, method, answer, words):
    slack_api.users |= {"alice@example.edu": "U0ALICE", "bob@example.edu": "U0BOB"}
    _queue(engine, clock, "alice@example.edu", "bob@example.edu")
    slack_api.answers[method] = [(200, {}, answer)]
    worker = Worker(engine, _cfg(slack_api), clock=clock)
    report = worker.run_once()
    assert (report.retried, report.skipped, report.failed) == (1, 1, 0)  # the 2nd is not tried
    first = next(r for r in outbox.list_rows(engine) if r.attempts == 1)
    assert first.status == "pending" and words in first.last_error
    assert (first.not_before - clock.now).total_seconds() == 10  # backoff_initial_s
    assert worker.paused_until["slack_dm"] == first.not_before
    clock.advance(10)
    assert worker.run_once().sent == 2  # the token was fixed
    assert {r.status for r in outbox.list_rows(engine)} == {"sent"}


def test_429_honours_retry_after(engine, slack_api, clock):
    slack_api.users |= {"alice@example.edu": "U0ALICE", "bob@example.edu": "U0BOB"}
    _queue(engine, clock, "alice@example.edu", "bob@example.edu")
    slack_api.answers["chat.postMessage"] = [
        (429, {"Retry-After": "7"}, {"ok": False, "error": "ratelimited"})
    ]
    worker = Worker(engine, _cfg(slack_api), clock=clock)
    report = worker.run_once()
    assert (report.retried, report.sent, report.skipped) == (1, 0, 1)
    first = next(r for r in outbox.list_rows(engine) if r.attempts == 1)
    assert first.status == "pending" and (first.not_before - clock.now).total_seconds() == 7
    clock.advance(3)
    assert worker.run_once().handled == 0 and len(slack_api.posted) == 1  # still paused
    clock.advance(4)
    assert worker.run_once().sent == 2
    assert len(slack_api.posted) == 3
    assert [a["status_code"] for a in outbox.attempts_of(engine, first.id)] == [429, 200]


def test_5xx_is_retried_with_back_off(engine, slack_api, clock):
    slack_api.users["alice@example.edu"] = "U0ALICE"
    _queue(engine, clock, "alice@example.edu")
    slack_api.answers["users.lookupByEmail"] = [(503, {}, "busy")]
    slack_api.answers["chat.postMessage"] = [(200, {}, {"ok": False, "error": "internal_error"})]
    worker = Worker(engine, _cfg(slack_api), clock=clock)
    assert worker.run_once().retried == 1
    [row] = outbox.list_rows(engine)
    assert row.last_error.startswith("users.lookupByEmail: 503")
    assert (row.not_before - clock.now).total_seconds() == 10
    clock.advance(10)
    assert worker.run_once().retried == 1
    [row] = outbox.list_rows(engine)
    assert row.last_error == "chat.postMessage: internal_error"
    assert (row.not_before - clock.now).total_seconds() == 20  # doubled
    clock.advance(20)
    assert worker.run_once().sent == 1
    assert [a["outcome"] for a in outbox.attempts_of(engine, row.id)] == ["retry", "retry", "sent"]


@pytest.mark.parametrize("error", ["channel_not_found", "is_archived", "cannot_dm_bot"])
def test_a_recipient_that_cannot_be_messaged_is_permanent(engine, slack_api, clock, error):
    slack_api.users["alice@example.edu"] = "U0ALICE"
    _queue(engine, clock, "alice@example.edu")
    slack_api.answers["chat.postMessage"] = [(200, {}, {"ok": False, "error": error})]
    worker = Worker(engine, _cfg(slack_api), clock=clock)
    assert worker.run_once().failed == 1
    [row] = outbox.list_rows(engine)
    assert row.status == "failed" and row.last_error == f"chat.postMessage: {error}"
    # the id is looked up again next time (it may have changed)
    assert worker.channels["slack_dm"]._user_ids == {}


def test_a_lost_answer_is_in_doubt(engine, slack_api, clock):
    """The post reached Slack and its answer was lost: with 'hold' it is parked, not resent."""
    slack_api.users["alice@example.edu"] = "U0ALICE"
    _queue(engine, clock, "alice@example.edu")
    slack_api.answers["chat.postMessage"] = [(None, {}, "")]
    cfg = make_config(
        slack_dm={"bot_token": "xoxb-test-token", "api_url": slack_api.api_url, "in_doubt": "hold"}
    )
    assert Worker(engine, cfg, clock=clock).run_once().in_doubt == 1
    [row] = outbox.list_rows(engine)
    assert row.status == "in_doubt" and len(slack_api.posted) == 1


def test_token_file_first_line_and_unreadable_file(engine, slack_api, clock, tmp_path):
    token = tmp_path / "token"
    token.write_text("xoxb-from-file\n# rotated 2026-12-01\n")
    slack_api.users["alice@example.edu"] = "U0ALICE"
    _queue(engine, clock, "alice@example.edu")
    cfg = make_config(slack_dm={"bot_token_file": str(token), "api_url": slack_api.api_url})
    assert Worker(engine, cfg, clock=clock).run_once().sent == 1
    assert {r["authorization"] for r in slack_api.requests} == {"Bearer xoxb-from-file"}
    missing = make_config(slack_dm={"bot_token_file": str(tmp_path / "nope")})
    _queue(engine, clock, "bob@example.edu")
    report = Worker(engine, missing, clock=clock).run_once()
    assert report.retried == 1 and "alerts.slack_dm.bot_token_file: cannot read" in report.errors[0]


def test_config_asks_for_a_configured_slack_dm():
    with pytest.raises(ValidationError, match=r"weekly_user_via names 'slack_dm' but \[alerts.slack_dm\]"):
        AlertsConfig.model_validate({"digest": {"weekly_user_via": ["email", "slack_dm"]}})
    with pytest.raises(ValidationError, match="weekly_account_via"):
        AlertsConfig.model_validate({"digest": {"weekly_account_via": ["slack_dm"]}})
    with pytest.raises(ValidationError, match="at least one"):
        AlertsConfig.model_validate({"digest": {"weekly_user_via": []}})
    with pytest.raises(ValidationError, match="weekly_user_via"):
        AlertsConfig.model_validate({"digest": {"weekly_user_via": ["sms"]}})
    with pytest.raises(ValidationError, match="lease_s must exceed"):  # a DM is two requests
        AlertsConfig.model_validate({"slack_dm": {"bot_token": "x", "timeout_s": 61}})
    ok = AlertsConfig.model_validate(
        {
            "slack_dm": {"bot_token": "x", "api_url": "http://h/api/"},
            "digest": {"weekly_user_via": ["slack_dm"]},
        }
    )
    assert ok.slack_dm.api_url == "http://h/api" and "x" not in repr(ok.slack_dm)


def test_alerts_test_slack_dm(migrated, monkeypatch, slack_api):
    url, _ = migrated
    slack_api.users["ops@example.edu"] = "U0OPS"
    cfg = _cfg(slack_api, admin_emails=["ops@example.edu"])
    monkeypatch.setattr("gpuwatch.cli.alerts._config", lambda: cfg)
    out = CliRunner().invoke(cli, ["--db", url, "alerts", "test", "slack_dm"])
    assert out.exit_code == 0, out.output
    assert "slack_dm: sent to ops@example.edu (200 ok channel=DU0OPS" in out.output
    assert slack_api.posted[0]["text"].startswith("gpuwatch test message")
    out = CliRunner().invoke(cli, ["--db", url, "alerts", "test", "slack_dm", "--to", "nobody@example.edu"])
    assert out.exit_code == 1 and "slack_dm: users.lookupByEmail: users_not_found" in out.output
    assert "Traceback" not in out.output
