"""The daemon's ingest log: a summary a minute by default, a line per request when asked."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from gpuwatch.clock import utcnow
from gpuwatch.config import load_settings
from gpuwatch.daemon.app import create_app
from gpuwatch.daemon.ingest_log import IngestLog
from gpuwatch.sql.nodes import create_token
from tests import factories

LOGGER = "gpuwatch.daemon.ingest"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _records(caplog: pytest.LogCaptureFixture, msg: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == LOGGER and r.getMessage() == msg]


def test_one_summary_a_minute_with_what_came_in(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = Clock()
    tally = IngestLog(each_request=False, every_s=60, clock=clock)
    tally.flush()  # nothing came: nothing to say
    for i, ms in enumerate([5.0, 7.0, 30.0]):
        clock.now += 10
        tally.request("ingest", f"node{i % 2}", {"stored": 1}, 16, ms)
    tally.request("ingest bundle", "node1", {"stored": 4, "duplicate": 1, "refused": 1}, 64, 90.0)
    assert _records(caplog, "ingest") == [] and _records(caplog, "ingest summary") == []
    clock.now += 30  # 60 s since the start: the next request closes the minute
    tally.request("ingest", "node2", {"duplicate": 1}, 0, 3.0)
    [summary] = _records(caplog, "ingest summary")
    assert summary.requests == 5 and summary.samples == 16 * 3 + 64 and summary.nodes == 3
    assert summary.batches == {"duplicate": 2, "refused": 1, "stored": 7}
    assert (summary.ms_p50, summary.ms_max) == (7.0, 90.0) and summary.seconds == 60.0
    clock.now += 5
    tally.request("ingest", "node0", {"stored": 1}, 16, 4.0)  # a new minute starts empty
    tally.flush()
    last = _records(caplog, "ingest summary")[-1]
    assert (last.requests, last.batches, last.seconds) == (1, {"stored": 1}, 5.0)


def test_the_summary_comes_without_a_next_request(caplog):
    """Agents that all stop sending (a network cut, the cluster drained) must not leave their
    last minute unlogged until the daemon stops: the lifespan's timer writes it."""
    caplog.set_level(logging.INFO, logger=LOGGER)

    async def scenario() -> None:
        tally = IngestLog(each_request=False, every_s=0.2)
        timer = asyncio.create_task(tally.summarize_forever())
        tally.request("ingest", "node1", {"stored": 1}, 16, 4.0)
        await asyncio.sleep(0.6)  # no other request comes
        timer.cancel()

    asyncio.run(scenario())
    summaries = _records(caplog, "ingest summary")
    assert [(s.requests, s.samples) for s in summaries] == [(1, 16)], (
        "one, and only while there was something"
    )


def test_each_request_logged_when_asked(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    tally = IngestLog(each_request=True, clock=Clock())
    tally.request("ingest", "node7", {"stored": 1}, 16, 4.257, batch_id="b1", status="stored")
    [line] = _records(caplog, "ingest")
    assert (line.node, line.batch_id, line.samples, line.ms) == ("node7", "b1", 16, 4.26)


def test_the_daemon_logs_its_last_summary_as_it_stops(engine, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    app = create_app(load_settings(None), engine)
    token = create_token(engine, "node001")
    headers = {"Authorization": f"Bearer {token}"}
    bodies = [
        factories.batch(start=utcnow() - timedelta(minutes=m)).model_dump_json().encode() for m in (9, 8)
    ]
    with TestClient(app) as client:
        assert client.post("/api/v1/ingest/node001", content=bodies[0], headers=headers).status_code == 200
        bundle = b"\n".join([bodies[0], bodies[1], b"{not json"])
        response = client.post("/api/v1/ingest/node001/bundle", content=bundle, headers=headers)
        assert response.status_code == 200
        assert _records(caplog, "ingest") == [] and _records(caplog, "ingest summary") == []
    [summary] = _records(caplog, "ingest summary")
    assert summary.requests == 2 and summary.nodes == 1
    assert summary.batches == {"duplicate": 1, "refused": 1, "stored": 2}


def test_the_running_daemon_logs_a_quiet_minute_without_being_asked(engine, caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    app = create_app(load_settings(None), engine)
    app.state.ingest_log.every_s = 0.3  # a short "minute"
    token = create_token(engine, "node001")
    body = factories.batch(start=utcnow() - timedelta(minutes=5)).model_dump_json().encode()
    with TestClient(app) as client:
        response = client.post(
            "/api/v1/ingest/node001", content=body, headers={"Authorization": f"Bearer {token}"}
        )
        assert response.status_code == 200
        time.sleep(1.0)  # no request after it
        [summary] = _records(caplog, "ingest summary")  # written while the daemon runs
        assert summary.requests == 1


def test_shedding_is_counted_in_the_summary_and_warned_once_a_minute(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    clock = Clock()
    tally = IngestLog(each_request=False, every_s=60, clock=clock)
    for _ in range(500):  # a storm: hundreds of 503s, one warning
        tally.shed(5)
    tally.request("ingest bundle", "node1", {"stored": 64}, 1024, 900.0)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "turning agents away" in warnings[0].getMessage()
    clock.now += 60
    tally.shed(5)  # closes the minute, then starts the next: warned again
    [summary] = _records(caplog, "ingest summary")
    assert (summary.shed, summary.requests) == (500, 1)
    tally.flush()
    assert _records(caplog, "ingest summary")[-1].shed == 1
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_a_database_outage_is_one_error_a_minute_with_its_cause(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    tally = IngestLog(each_request=False, every_s=60, clock=Clock())
    try:
        raise ConnectionRefusedError("connection to server at 127.0.0.1:5432 failed")
    except ConnectionRefusedError as exc:
        cause = exc
    for _ in range(300):
        tally.unavailable(cause)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "ConnectionRefusedError" in errors[0].getMessage()
    assert errors[0].exc_info and errors[0].exc_info[1] is cause  # the traceback goes with it
    tally.flush()
    assert _records(caplog, "ingest summary")[-1].db_unavailable == 300


@pytest.mark.parametrize("latencies", [[5.0, 90.0], [3.0, 4.0, 250.0], [1.0, 2.0, 2.0, 3.0, 40.0]])
def test_p99_never_above_max_with_few_requests(caplog, latencies):
    """A quiet minute has a handful of requests; the percentile is taken among them, never
    extrapolated past the slowest one."""
    caplog.set_level(logging.INFO, logger=LOGGER)
    tally = IngestLog(each_request=False, clock=Clock())
    for ms in latencies:
        tally.request("ingest", "node1", {"stored": 1}, 16, ms)
    tally.flush()
    [summary] = _records(caplog, "ingest summary")
    assert min(latencies) <= summary.ms_p50 <= summary.ms_p99 <= summary.ms_max == max(latencies)
