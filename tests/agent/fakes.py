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

from gpuwatch import wire
from gpuwatch.collectors.base import Collector
from gpuwatch.config import AgentConfig
from gpuwatch.wire import CpuSample, NicSample
from gpuwatch.wire import v2 as wire_v2
from gpuwatch.wire.v1 import _Sample

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
    answer: dict | None = None

    @property
    def bundle(self) -> bool:
        return self.path.endswith("/bundle")

    @property
    def batches(self) -> list[dict]:
        """The batches sent: one, or a bundle's, one per line."""
        lines = self.body.split(b"\n") if self.bundle else [self.body]
        return [json.loads(line) for line in lines]

    @property
    def decoded(self) -> list[wire.Batch]:
        """The batches sent, as v1 batches whatever format they went in."""
        lines = self.body.split(b"\n") if self.bundle else [self.body]
        return [wire_v2.decode(line) for line in lines]

    @property
    def version(self) -> int:
        """The wire format of the endpoint it went to (``/api/v{N}/ingest/...``)."""
        return int(self.path.split("/")[2].removeprefix("v"))

    @property
    def batch(self) -> dict:
        (batch,) = self.batches
        return batch


def _samples(batch: dict) -> int:
    """Samples in a batch of either wire format (v1: a list; v2: columns per kind)."""
    if "samples" in batch:
        return len(batch["samples"])
    return sum(len(member["ts"]) for member in batch.values() if isinstance(member, dict))


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # so server_close() joins handler threads: no stray threads after a test


class ScriptedDaemon:
    """A real HTTP server on 127.0.0.1 that answers from a script and records every request.

    Replies are taken from ``script`` in order; once it is empty every request gets 200
    ``stored`` (or ``duplicate`` for a batch id seen before, like the real daemon), a bundle
    (``.../bundle``, one batch per line) one such result per line. ``refuse`` maps batch ids
    to a (code, detail) that a bundle's line for that batch gets instead; ``bundles=False``
    answers bundles 404, as a daemon from before bundles does; ``v2=False`` answers the wire
    format v2 endpoints (``/api/v2/...``) 404, as a daemon from before v2 does.
    ``down()``/``up()`` close and re-open the listening socket on the same port.
    """

    def __init__(self) -> None:
        self.script: list[Reply] = []
        self.refuse: dict[str, tuple[int, str]] = {}
        self.bundles = True
        self.v2 = True
        self.received: list[Received] = []
        self.probes = 0  # GET /healthz answered
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
                received = Received(self.path, dict(self.headers), body, 0)
                with daemon.lock:
                    reply = daemon.script.pop(0) if daemon.script else None
                    if reply is None:
                        reply = daemon.answer(received)
                    received.status, received.answer = reply.status, reply.body
                    daemon.received.append(received)
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

            def do_GET(self) -> None:
                """``/healthz``: 200 while the server is up (what agents probe during a back-off)."""
                with daemon.lock:
                    daemon.probes += 1
                status = 200 if self.path == "/healthz" else 404
                payload = json.dumps({"status": "ok"} if status == 200 else {"detail": "Not Found"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._httpd = _Server(("127.0.0.1", self.port), Handler)
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01})
        self._thread.start()

    def answer(self, received: Received) -> Reply:
        """What the real daemon answers when all goes well (called with the lock held)."""
        if (received.bundle and not self.bundles) or (received.version == 2 and not self.v2):
            return Reply(404, {"detail": "Not Found"})
        seen = set(self.stored_ids_locked())
        results = []
        for batch in received.batches:
            batch_id = batch["batch_id"]
            if batch_id in self.refuse:
                code, detail = self.refuse[batch_id]
                results.append({"status": "refused", "code": code, "detail": detail})
                continue
            results.append({"batch_id": batch_id, "status": "duplicate" if batch_id in seen else "stored"})
            seen.add(batch_id)
        if received.bundle:
            return Reply(200, {"results": results, "samples": 0})
        if "code" in results[0]:
            return Reply(results[0]["code"], {"detail": results[0]["detail"]})
        return Reply(200, {"status": results[0]["status"], "samples": _samples(received.batch)})

    def stored_ids_locked(self) -> list[str]:
        """Ids of batches answered stored or duplicate, in the order they arrived."""
        ids = []
        for r in self.received:
            if r.status != 200:
                continue
            if not r.bundle:
                ids.append(r.batch["batch_id"])
                continue
            results = (r.answer or {}).get("results", [])
            for batch, result in zip(r.batches, results, strict=False):
                if result.get("status") in ("stored", "duplicate"):
                    ids.append(batch["batch_id"])
        return ids

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
            return self.stored_ids_locked()

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
        # a push per cycle: these tests follow each batch; push_every's own tests set it
        "push_every": 1,
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
            CpuSample(
                ts=now,
                cores=4,
                busy_ratio=0.5,
                user_ratio=0.4,
                system_ratio=0.1,
                iowait_ratio=0.0,
                threads_per_core=2,
            )
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
