"""Test doubles for the agent tests: a real scripted HTTP daemon stand-in and fake collectors."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from gpuwatch.collectors.base import Collector
from gpuwatch.config import AgentConfig
from gpuwatch.wire import CpuSample, NicSample, _Sample

NODE = "node01"
TOKEN = "s3cret-token"


@dataclass
class Reply:
    """One scripted answer; ``delay_s`` makes the handler slow (for timeouts)."""

    status: int = 200
    body: dict | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    status: int

    @property
    def batch(self) -> dict:
        return json.loads(self.body)


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # so server_close() joins handler threads: no stray threads after a test


class ScriptedDaemon:
    """A real HTTP server on 127.0.0.1 that answers from a script and records every request.

    Replies are taken from ``script`` in order; once it is empty every request gets 200
    ``stored`` (or ``duplicate`` for a batch id seen before, like the real daemon).
    ``down()``/``up()`` close and re-open the listening socket on the same port.
    """

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.received: list[Received] = []
        self.lock = threading.Lock()
        self.port = 0
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None
        self.up()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        assert self._httpd is None
        daemon = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                with daemon.lock:
                    reply = daemon.script.pop(0) if daemon.script else None
                    if reply is None:
                        seen = {r.batch["batch_id"] for r in daemon.received if r.status == 200}
                        batch_id = json.loads(body)["batch_id"]
                        status = "duplicate" if batch_id in seen else "stored"
                        reply = Reply(200, {"status": status, "samples": len(json.loads(body)["samples"])})
                    daemon.received.append(Received(self.path, dict(self.headers), body, reply.status))
                if reply.delay_s:
                    threading.Event().wait(reply.delay_s)
                payload = json.dumps(reply.body or {"detail": f"scripted {reply.status}"}).encode()
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the client gave up (timeout test)
                    self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._httpd = _Server(("127.0.0.1", self.port), Handler)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01})
        self._thread.start()

    def down(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        assert self._thread is not None
        self._thread.join(5)
        self._httpd = None

    def stored_ids(self) -> list[str]:
        with self.lock:
            return [r.batch["batch_id"] for r in self.received if r.status == 200]

    def requests_count(self) -> int:
        with self.lock:
            return len(self.received)


def agent_config(tmp_path: Path, url: str, **overrides: object) -> AgentConfig:
    values: dict[str, object] = {
        "node": NODE,
        "daemon_url": url,
        "token": TOKEN,
        "interval_s": 0.02,
        "spool_dir": tmp_path / "spool",
        "spool_max_bytes": 1024 * 1024,
        "push_timeout_s": 2.0,
        "backoff_initial_s": 0.005,
        "backoff_max_s": 0.02,
    }
    values.update(overrides)
    return AgentConfig(**values)


class CpuCollector(Collector):
    """Deterministic stand-in for the CPU collector: one sample per call."""

    name = "fake_cpu"

    def __init__(self) -> None:
        self.calls = 0
        self.closed = False

    def collect(self, now: datetime) -> Sequence[_Sample]:
        self.calls += 1
        return [
            CpuSample(ts=now, cores=4, busy_ratio=0.5, user_ratio=0.4, system_ratio=0.1, iowait_ratio=0.0)
        ]

    def close(self) -> None:
        self.closed = True


class RateCollector(Collector):
    """Like a counter-based collector: nothing on the first call, a rate afterwards."""

    name = "fake_nic"

    def __init__(self) -> None:
        self.calls = 0

    def collect(self, now: datetime) -> Sequence[_Sample]:
        self.calls += 1
        if self.calls == 1:
            return []
        return [
            NicSample(
                ts=now,
                device="eth0",
                rx_bytes_per_s=100.0,
                tx_bytes_per_s=50.0,
                rx_packets_per_s=1.0,
                tx_packets_per_s=1.0,
            )
        ]


class BrokenCollector(Collector):
    name = "fake_broken"

    def collect(self, now: datetime) -> Sequence[_Sample]:
        raise RuntimeError("sensor on fire")
