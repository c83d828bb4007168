"""PostgreSQL restarted during ingest (our own throwaway cluster, never the shared server).

The daemon answers 503 while the database is gone, the agent keeps its batches and retries,
and at the end every batch is stored once.
"""

from __future__ import annotations

import json
import threading

import pytest

from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.nodes import create_token
from tests.daemon_process import DaemonProcess
from tests.fault.conftest import assert_exactly_once, make_agent, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

CYCLES = 40  # 8 s at 0.2 s
GPUS = 2


def test_postgres_restart_mid_ingest_answers_503_then_recovers(own_postgres, tmp_path):
    engine = create_engine(own_postgres.url)
    migrate.upgrade(engine)
    token = create_token(engine, "pg-node")
    daemon = DaemonProcess(own_postgres.url, tmp_path / "daemon.log")
    daemon.start()
    agent, pusher = make_agent(
        daemon.url, token, tmp_path / "spool", node="pg-node", interval_s=0.2, gpus=GPUS
    )
    stop = threading.Event()
    runner = threading.Thread(target=agent.run, args=(stop,), kwargs={"max_cycles": CYCLES})
    try:
        runner.start()
        wait_for(lambda: len(pusher.delivered) >= 5, 20, "first batches stored")
        engine.dispose()  # our own pool must not hold the old server's connections either
        own_postgres.stop("fast")
        wait_for(lambda: 503 in pusher.statuses, 20, "a 503 from the daemon while PostgreSQL is down")
        spooled_while_down = len(agent.spool)
        own_postgres.start()
        runner.join(timeout=30)
        assert not runner.is_alive()
        assert agent.drain(30), f"spool did not drain after the restart: {len(agent.spool)} left"
    finally:
        stop.set()
        runner.join(timeout=10)
        agent.close()
        daemon.stop()
    assert spooled_while_down >= 1, "batches waited in the spool during the outage"
    assert pusher.statuses.count(503) >= 1
    assert not [s for s in pusher.statuses if s is not None and s >= 500 and s != 503], pusher.statuses
    assert agent.rejected_batches == 0
    assert_exactly_once(engine, pusher, CYCLES, GPUS)
    engine.dispose()
    # the outage is said once a minute with the driver's error, and every 503 is counted
    log = [json.loads(x) for x in daemon.log_path.read_text().splitlines() if x.startswith("{")]
    errors = [x for x in log if x["msg"].startswith("database unavailable")]
    assert 1 <= len(errors) <= 2 and "OperationalError" in errors[0]["msg"] and errors[0].get("exc")
    assert sum(
        x.get("db_unavailable", 0) for x in log if x["msg"] == "ingest summary"
    ) == pusher.statuses.count(503)
