"""Admission: the daemon holds a bounded amount of request bodies; past it, 503 + Retry-After."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator

import pytest
import requests
import sqlalchemy as sa
from starlette.requests import ClientDisconnect

from gpuwatch.clock import utcnow
from gpuwatch.config import load_settings
from gpuwatch.daemon.admission import Admission, BodyAbandoned, BodyTimeout, BodyTooLarge, Busy
from gpuwatch.daemon.server import BackgroundServer
from gpuwatch.sql.nodes import create_token
from tests import factories


def test_hold_counts_bytes_and_refuses_past_the_bound():
    admission = Admission(max_bytes=1000, retry_after_s=7)
    with admission.hold(5000):  # nothing in flight: admitted whatever its size
        assert admission.inflight == 5000
        with pytest.raises(Busy) as busy, admission.hold(1):
            pass
        assert busy.value.status_code == 503 and busy.value.headers == {"Retry-After": "7"}
        assert "daemon.max_inflight_bytes (1000)" in busy.value.detail
        with admission.hold(0):  # nothing to hold: never refused
            pass
    assert admission.inflight == 0
    with admission.hold(600), admission.hold(400):
        assert admission.inflight == 1000
    with pytest.raises(RuntimeError), admission.hold(700):  # released when the request fails too
        raise RuntimeError("parse error")
    assert admission.inflight == 0


async def _chunks(*sizes: int, stall: bool = False) -> AsyncIterator[bytes]:
    """A chunked body (no Content-Length) arriving piece by piece; ``stall``: then nothing more."""
    for size in sizes:
        await asyncio.sleep(0)
        yield b"x" * size
    if stall:
        await asyncio.sleep(3600)


async def _read(admission: Admission, chunks: AsyncIterator[bytes], limit: int = 10_000) -> int:
    async with admission.body(None, chunks, limit) as body:
        return len(body)


def test_a_chunked_body_is_counted_as_it_arrives_and_refused_mid_body():
    """No Content-Length: the bytes count from the first chunk, so a body is refused at the
    chunk that would pass the bound, and the connection is closed (its rest never read)."""
    admission = Admission(max_bytes=1000, retry_after_s=7)

    async def scenario() -> None:
        with admission.hold(600):  # another request's body
            with pytest.raises(Busy) as busy:
                await _read(admission, _chunks(300, 300))
            assert admission.inflight == 600, "what the refused body had read is released"
        assert busy.value.headers == {"Retry-After": "7", "Connection": "close"}
        assert await _read(admission, _chunks(900, 900, 900)) == 2700, "alone: admitted (max_batch_bytes)"
        assert admission.inflight == 0

    asyncio.run(scenario())


def test_a_chunked_body_over_the_batch_limit_is_413_at_that_chunk():
    admission = Admission(max_bytes=1 << 20)

    async def scenario() -> None:
        with pytest.raises(BodyTooLarge) as large:
            await _read(admission, _chunks(600, 600, 600), limit=1000)
        assert large.value.status_code == 413 and "daemon.max_batch_bytes" in large.value.detail
        assert admission.inflight == 0

    asyncio.run(scenario())


def test_a_body_that_stops_arriving_is_408_and_releases_its_bytes():
    admission = Admission(max_bytes=1 << 20, body_timeout_s=0.05)

    async def scenario() -> None:
        with pytest.raises(BodyTimeout) as slow:
            await _read(admission, _chunks(500, stall=True))
        assert slow.value.status_code == 408 and slow.value.headers == {"Connection": "close"}
        assert "daemon.body_timeout_s" in slow.value.detail and "500 bytes" in slow.value.detail
        assert admission.inflight == 0

    asyncio.run(scenario())


def test_a_client_gone_mid_body_is_a_refusal_not_an_unhandled_error():
    admission = Admission(max_bytes=1 << 20)

    async def gone() -> AsyncIterator[bytes]:
        yield b"x" * 300
        raise ClientDisconnect()

    async def scenario() -> None:
        with pytest.raises(BodyAbandoned) as abandoned:
            await _read(admission, gone())
        assert abandoned.value.status_code == 400 and "after 300 bytes" in abandoned.value.detail
        assert admission.inflight == 0

    asyncio.run(scenario())


@pytest.mark.postgres
def test_a_busy_daemon_answers_503_and_stores_the_batch_when_sent_again(pg_url):
    """One request waits in the writer (its table is locked); the next one, over the bound,
    is answered 503 with Retry-After at once; sent again after the first is done, it is stored."""
    settings = load_settings(
        None, database={"url": pg_url}, daemon={"listen": "127.0.0.1:0", "max_inflight_bytes": 1024}
    )
    with BackgroundServer(settings) as daemon:
        token = create_token(daemon.engine, "node001")
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        url = f"{daemon.url}/api/v1/ingest/node001"
        bodies = [
            factories.batch(start=utcnow().replace(microsecond=0, second=m)).model_dump_json()
            for m in (10, 20)
        ]
        answers: list[requests.Response] = []
        locker = daemon.engine.connect()
        lock = locker.begin()
        locker.execute(sa.text("LOCK TABLE ingested_batches IN ACCESS EXCLUSIVE MODE"))
        first = threading.Thread(
            target=lambda: answers.append(requests.post(url, data=bodies[0], headers=headers, timeout=30))
        )
        first.start()
        deadline = time.monotonic() + 10
        while daemon.app.state.admission.inflight == 0:
            assert time.monotonic() < deadline, "the first request never got in"
            time.sleep(0.01)
        busy = requests.post(url, data=bodies[1], headers=headers, timeout=10)
        bundle = requests.post(
            url + "/bundle",
            data="\n".join(bodies),
            headers={**headers, "Content-Type": "application/x-ndjson"},
            timeout=10,
        )
        lock.commit()
        locker.close()
        first.join(timeout=30)
        again = requests.post(url, data=bodies[1], headers=headers, timeout=10)
        metrics = requests.get(f"{daemon.url}/metrics", timeout=10).text
    assert (busy.status_code, busy.headers.get("Retry-After")) == (503, "5")
    assert "daemon busy" in busy.json()["detail"] and bundle.status_code == 503
    assert answers[0].json()["status"] == "stored" and again.json()["status"] == "stored"
    assert daemon.app.state.admission.inflight == 0
    shed = [line for line in metrics.splitlines() if line.startswith("gpuwatch_daemon_ingest_shed_total")]
    assert shed and float(shed[0].split()[-1]) >= 2
