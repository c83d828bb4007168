"""Fixtures of the alert tests: real HTTP servers standing in for the Slack webhook and the
Slack Web API, a real SMTP server (aiosmtpd on 127.0.0.1), a driven clock, and rows in
``slurm_jobs``/``verdicts``."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from email import message_from_bytes, policy
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

import pytest
import sqlalchemy as sa
from aiosmtpd.controller import Controller

from gpuwatch.config.alerts import AlertsConfig
from gpuwatch.sql.schema import slurm_jobs, verdicts
from tests.conftest import free_port

T0 = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> datetime:
        self.now += timedelta(seconds=seconds)
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


# --------------------------------------------------------------------------- Slack stand-in
def _answer(
    handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str], data: bytes, content_type: str
) -> None:
    handler.send_response(status)
    for k, v in headers.items():
        handler.send_header(k, v)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


@contextlib.contextmanager
def _serving(port: int, handler: type[BaseHTTPRequestHandler]) -> Iterator[None]:
    """A real HTTP server on 127.0.0.1:``port`` in a thread, for the block's length."""
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclass
class WebhookServer:
    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: scripted answers, used first to last, then 200 "ok": (status, headers, body)
    answers: list[tuple[int, dict[str, str], str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def bodies(self) -> list[Any]:
        return [r["json"] for r in self.requests]


@pytest.fixture
def slack_server() -> Iterator[WebhookServer]:
    port = free_port()
    state = WebhookServer(url=f"http://127.0.0.1:{port}/services/T000/B000/XXXX")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with state.lock:
                state.requests.append(
                    {
                        "path": self.path,
                        "content_type": self.headers.get("Content-Type"),
                        "json": json.loads(body),
                    }
                )
                status, headers, text = state.answers.pop(0) if state.answers else (200, {}, "ok")
            _answer(self, status, headers, text.encode(), "text/plain")

        def log_message(self, *args: Any) -> None:
            pass

    with _serving(port, Handler):
        yield state


# --------------------------------------------------------------------------- Slack Web API
@dataclass
class SlackApiServer:
    """``users.lookupByEmail`` answers from ``users`` (email -> id, else ``users_not_found``);
    ``chat.postMessage`` answers ok. ``answers[method]``: scripted answers used first
    (status, headers, JSON body); status None closes the connection unanswered (a lost answer)."""

    api_url: str
    users: dict[str, str] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)
    answers: dict[str, list[tuple[int | None, dict[str, str], Any]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def calls(self, method: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["method"] == method]

    @property
    def posted(self) -> list[dict[str, Any]]:
        """The bodies of every ``chat.postMessage``."""
        return [r["body"] for r in self.calls("chat.postMessage")]

    def answer(self, method: str, body: dict[str, Any]) -> tuple[int | None, dict[str, str], Any]:
        scripted = self.answers.get(method)
        if scripted:
            return scripted.pop(0)
        if method == "users.lookupByEmail":
            user_id = self.users.get(body.get("email", ""))
            if user_id is None:
                return 200, {}, {"ok": False, "error": "users_not_found"}
            return 200, {}, {"ok": True, "user": {"id": user_id, "profile": {"email": body["email"]}}}
        if method == "chat.postMessage":
            n = len(self.calls(method))
            return 200, {}, {"ok": True, "channel": f"D{body['channel']}", "ts": f"1700000000.{n:06d}"}
        return 200, {}, {"ok": False, "error": "unknown_method"}


@pytest.fixture
def slack_api() -> Iterator[SlackApiServer]:
    port = free_port()
    state = SlackApiServer(api_url=f"http://127.0.0.1:{port}/api")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode()
            content_type = self.headers.get("Content-Type", "")
            if content_type.startswith("application/json"):
                body = json.loads(raw)
            else:
                body = {k: v[0] for k, v in parse_qs(raw).items()}
            method = self.path.rsplit("/", 1)[-1]
            with state.lock:
                state.requests.append(
                    {
                        "path": self.path,
                        "method": method,
                        "authorization": self.headers.get("Authorization"),
                        "content_type": content_type,
                        "body": body,
                    }
                )
                status, headers, answer = state.answer(method, body)
            if status is None:
                self.close_connection = True
                return
            data = (answer if isinstance(answer, str) else json.dumps(answer)).encode()
            _answer(self, status, headers, data, "application/json; charset=utf-8")

        def log_message(self, *args: Any) -> None:
            pass

    with _serving(port, Handler):
        yield state


# --------------------------------------------------------------------------- SMTP
class Recorder:
    def __init__(self) -> None:
        self.envelopes: list[Any] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.envelopes.append(envelope)
        return "250 OK queued"

    @property
    def messages(self) -> list[EmailMessage]:
        return [message_from_bytes(e.content, policy=policy.default) for e in self.envelopes]  # type: ignore[misc]


class SmtpServer:
    """aiosmtpd on a fixed port that can be stopped and started again (an outage)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.recorder = Recorder()
        self._controller: Controller | None = None

    def start(self) -> None:
        self._controller = Controller(self.recorder, hostname="127.0.0.1", port=self.port)
        self._controller.start()

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
            self._controller = None

    @property
    def messages(self) -> list[EmailMessage]:
        return self.recorder.messages


@pytest.fixture
def smtp_server() -> Iterator[SmtpServer]:
    server = SmtpServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def make_config(
    *,
    slack_url: str | None = None,
    smtp_port: int | None = None,
    slack_api_url: str | None = None,
    **overrides: Any,
) -> AlertsConfig:
    data: dict[str, Any] = {
        "enabled": True,
        "user_email_pattern": "{user}@example.edu",
        "job_url": "https://gpuwatch.example.edu/jobs/{job_id}",
        "worker": {"lease_s": 30, "backoff_initial_s": 10, "backoff_max_s": 600, "interval_s": 5},
    }
    if slack_url:
        data["slack"] = {"webhook_url": slack_url, "timeout_s": 5}
    if slack_api_url:
        data["slack_dm"] = {"bot_token": "xoxb-test-token", "api_url": slack_api_url, "timeout_s": 5}
    if smtp_port:
        data["email"] = {
            "host": "127.0.0.1",
            "port": smtp_port,
            "from_address": "gpuwatch@example.edu",
            "timeout_s": 5,
        }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return AlertsConfig.model_validate(data)


# --------------------------------------------------------------------------- rows
def add_job(
    engine: sa.Engine,
    job_id: str,
    *,
    user: str = "alice",
    account: str = "nlp-lab",
    partition: str = "gpu",
    state: str = "RUNNING",
    name: str = "train",
    gpus: int = 4,
) -> None:
    with engine.begin() as conn:
        conn.execute(
            slurm_jobs.insert().values(
                job_id=job_id,
                source="squeue",
                name=name,
                user_name=user,
                account=account,
                partition=partition,
                state=state,
                gpus=gpus,
                start_at=T0 - timedelta(hours=3),
                first_seen_at=T0 - timedelta(hours=3),
                updated_at=T0,
            )
        )


def add_verdict(
    engine: sa.Engine,
    job_id: str,
    cause: str = "idle_allocation",
    *,
    evaluated_at: datetime = T0,
    window_s: float = 7200,
    window_kind: str = "recent",
    wasted: float = 8.0,
    gpus: int = 4,
    mean_util: float = 0.0,
    confidence: float = 0.9,
    evidence: dict[str, Any] | None = None,
    fix: str | None = None,
) -> int:
    with engine.begin() as conn:
        return conn.execute(
            verdicts.insert()
            .values(
                job_id=job_id,
                evaluated_at=evaluated_at,
                window_kind=window_kind,
                window_start=evaluated_at - timedelta(seconds=window_s),
                window_end=evaluated_at,
                cause=cause,
                confidence=confidence,
                gpus=gpus,
                gpu_hours=gpus * window_s / 3600,
                gpu_hours_wasted=wasted,
                mean_util_ratio=mean_util,
                summary=f"{cause} for job {job_id}",
                fix=fix,
                evidence=evidence
                if evidence is not None
                else {
                    # the shape a cause rule writes (classify/verdict.Evidence)
                    "signals": {
                        "idle_gpus": [f"gpu-node/gpu{i}" for i in range(gpus)],
                        "job_util_max": mean_util,
                    },
                    "thresholds": {"idle_zero_share": 1.0},
                    "checks": [],
                    "missing": [],
                    "notes": [],
                },
                rules_version="test",
            )
            .returning(verdicts.c.id)
        ).scalar_one()
