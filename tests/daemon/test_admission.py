"""Admission: the daemon holds a bounded amount of request bodies; past it, 503 + Retry-After."""

from __future__ import annotations

import threading
import time

import pytest
import requests
import sqlalchemy as sa

from gpuwatch.clock import utcnow
from gpuwatch.config import load_settings
from gpuwatch.daemon.admission import Admission, Busy
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
