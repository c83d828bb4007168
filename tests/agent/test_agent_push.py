"""Pusher against a real local HTTP server; outcome classification; backoff."""

from __future__ import annotations

import json
import logging
import random
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from pathlib import Path

import pytest

from gpuwatch.agent.push import Backoff, Outcome, Pusher, classify, parse_retry_after
from tests.agent.fakes import NODE, TOKEN, Reply, ScriptedDaemon

LogCapture = pytest.LogCaptureFixture
BODY = json.dumps({"batch_id": "b1", "samples": []}).encode()


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, Outcome.OK),
        (201, Outcome.OK),
        (204, Outcome.OK),
        (400, Outcome.REJECTED),
        (413, Outcome.REJECTED),
        (422, Outcome.REJECTED),
        (401, Outcome.RETRY),
        (403, Outcome.RETRY),
        (404, Outcome.RETRY),
        (408, Outcome.RETRY),
        (429, Outcome.RETRY),
        (500, Outcome.RETRY),
        (502, Outcome.RETRY),
        (503, Outcome.RETRY),
        (307, Outcome.RETRY),
    ],
)
def test_classify(status: int, outcome: Outcome) -> None:
    assert classify(status) is outcome


def test_parse_retry_after() -> None:
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True), lambda: now) == 30.0
    assert parse_retry_after(format_datetime(now - timedelta(seconds=30), usegmt=True), lambda: now) == 0.0
    for bad in (None, "", "soon", "-3", "nan", "inf"):
        assert parse_retry_after(bad) is None


class _MaxRng(random.Random):
    def uniform(self, a: float, b: float) -> float:
        return b


def test_backoff_doubles_to_the_cap_and_resets() -> None:
    backoff = Backoff(0.5, 4.0, _MaxRng())
    assert [backoff.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    backoff.reset()
    assert backoff.next_delay() == 0.5
    for _ in range(200):  # no overflow after many failures
        backoff.next_delay()
    assert backoff.ceiling() == 4.0


def test_backoff_full_jitter_stays_within_bounds() -> None:
    backoff = Backoff(1.0, 10.0, random.Random(7))
    delays = [backoff.next_delay() for _ in range(50)]
    assert all(0.0 <= d <= 10.0 for d in delays)
    assert len(set(delays)) == len(delays)  # jittered, not lockstep
    assert Backoff(1.0, 10.0, random.Random(7)).next_delay() == delays[0]  # injectable RNG: repeatable


def _pusher(daemon: ScriptedDaemon, token: object = TOKEN, timeout_s: float = 2.0) -> Pusher:
    return Pusher(daemon.url, NODE, token, timeout_s)  # type: ignore[arg-type]


def test_ok_sends_the_documented_request(daemon: ScriptedDaemon) -> None:
    pusher = _pusher(daemon)
    try:
        result = pusher.send(BODY)
    finally:
        pusher.close()
    assert result.outcome is Outcome.OK and result.status == 200
    [req] = daemon.received
    assert req.path == f"/api/v1/ingest/{NODE}"
    assert req.headers["Authorization"] == f"Bearer {TOKEN}"
    assert req.headers["Content-Type"] == "application/json"
    assert req.body == BODY


@pytest.mark.parametrize("status", [400, 413, 422])
def test_bad_batch_is_rejected_with_the_daemons_detail(daemon: ScriptedDaemon, status: int) -> None:
    daemon.script = [Reply(status, {"detail": "samples.0.ts: Input should have timezone info"})]
    pusher = _pusher(daemon)
    try:
        result = pusher.send(BODY)
    finally:
        pusher.close()
    assert result.outcome is Outcome.REJECTED and result.status == status
    assert f"HTTP {status}" in result.reason and "timezone" in result.reason
    assert not result.maybe_stored


def test_401_is_retried_and_logged_at_error_once(daemon: ScriptedDaemon, caplog: LogCapture) -> None:
    daemon.script = [Reply(401, {"detail": "bad token"})] * 3 + [
        Reply(403, {"detail": "node not registered"})
    ]
    pusher = _pusher(daemon)
    try:
        results = [pusher.send(BODY) for _ in range(4)]
    finally:
        pusher.close()
    assert [r.outcome for r in results] == [Outcome.RETRY] * 4
    assert all(r.config_problem for r in results)
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2  # one per distinct message
    assert "401" in errors[0] and "token" in errors[0]
    assert "403" in errors[1] and "node not registered" in errors[1]


def test_error_is_logged_again_after_a_recovery(daemon: ScriptedDaemon, caplog: LogCapture) -> None:
    caplog.set_level(logging.INFO)
    daemon.script = [Reply(401), Reply(200), Reply(401)]
    pusher = _pusher(daemon)
    try:
        for _ in range(3):
            pusher.send(BODY)
    finally:
        pusher.close()
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 2
    assert "accepted a batch again" in caplog.text


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_is_read_on_429_and_503(daemon: ScriptedDaemon, status: int) -> None:
    daemon.script = [Reply(status, headers={"Retry-After": "7"}), Reply(500, headers={"Retry-After": "7"})]
    pusher = _pusher(daemon)
    try:
        first, second = pusher.send(BODY), pusher.send(BODY)
    finally:
        pusher.close()
    assert first.outcome is Outcome.RETRY and first.retry_after_s == 7.0
    assert second.outcome is Outcome.RETRY and second.retry_after_s is None  # only 429/503
    # a 5xx may come after a commit (or from a proxy in front of one): maybe stored
    assert (first.maybe_stored, second.maybe_stored) == (status == 503, True)


def test_connection_refused_is_retry(daemon: ScriptedDaemon, caplog: LogCapture) -> None:
    daemon.down()
    pusher = _pusher(daemon)
    try:
        results = [pusher.send(BODY) for _ in range(3)]
    finally:
        pusher.close()
    assert all(r.outcome is Outcome.RETRY and r.status is None for r in results)
    assert not any(r.maybe_stored for r in results)  # never connected: nothing can be stored
    assert "cannot reach" in results[0].reason
    assert len([r for r in caplog.records if r.levelno >= logging.WARNING]) == 1  # same message, logged once


def test_timeout_is_retry(daemon: ScriptedDaemon) -> None:
    daemon.script = [Reply(200, delay_s=0.5)]
    pusher = _pusher(daemon, timeout_s=0.1)
    try:
        result = pusher.send(BODY)
    finally:
        pusher.close()
    assert result.outcome is Outcome.RETRY and "within 0.1 s" in result.reason
    assert result.maybe_stored  # the daemon had the request: it may have stored it


def test_redirect_is_not_followed(daemon: ScriptedDaemon) -> None:
    daemon.script = [Reply(308, headers={"Location": "https://elsewhere/api"})]
    pusher = _pusher(daemon)
    try:
        result = pusher.send(BODY)
    finally:
        pusher.close()
    assert result.outcome is Outcome.RETRY and result.config_problem
    assert "elsewhere" in result.reason
    assert daemon.requests_count() == 1


def test_token_callable_is_read_per_send(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("old\n")
    pusher = _pusher(daemon, token=lambda: token_file.read_text().strip())
    try:
        pusher.send(BODY)
        token_file.write_text("new\n")  # the admin fixed the token file
        pusher.send(BODY)
    finally:
        pusher.close()
    assert [r.headers["Authorization"] for r in daemon.received] == ["Bearer old", "Bearer new"]


def test_unreadable_token_is_retry_not_crash(daemon: ScriptedDaemon) -> None:
    def broken() -> str:
        raise OSError("permission denied")

    pusher = _pusher(daemon, token=broken)
    try:
        result = pusher.send(BODY)
    finally:
        pusher.close()
    assert result.outcome is Outcome.RETRY and result.config_problem
    assert daemon.requests_count() == 0
