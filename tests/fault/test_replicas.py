"""Two daemon replicas on one PostgreSQL database: both ingest, exactly one leads the scheduler."""

from __future__ import annotations

import threading

import pytest
import sqlalchemy as sa

from gpuwatch.config.alerts import AlertsConfig
from gpuwatch.daemon.leader import LeaderLock
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from tests.daemon_process import DaemonProcess
from tests.fault.conftest import node_agent, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

KEY = AlertsConfig().leader_lock_key
AGENTS = 4
CYCLES = 10
GPUS = 2


def _holders(engine: sa.Engine) -> list[str]:
    """application_name of every session holding the leader advisory lock (bigint key)."""
    with engine.connect() as conn:
        return list(
            conn.execute(
                sa.text(
                    "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                    "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                    "AND ((l.classid::bigint << 32) | l.objid::bigint) = :k"
                ),
                {"k": KEY},
            ).scalars()
        )


def test_two_replicas_share_ingest_and_elect_one_leader(pg_url, tmp_path, monkeypatch):
    engine = create_engine(pg_url)
    migrate.upgrade(engine)
    # alerts on, so the scheduler's leader-only jobs run (and take the lock) every second
    monkeypatch.setenv("GPUWATCH_ALERTS__ENABLED", "true")
    monkeypatch.setenv("GPUWATCH_ALERTS__WORKER__INTERVAL_S", "1")
    replicas = {
        name: DaemonProcess(
            f"{pg_url}?application_name=gpuwatch-{name}",
            tmp_path / f"daemon-{name}.log",
            env={"GPUWATCH_DAEMON__LOG_EACH_REQUEST": "true"},  # a line per batch, to count below
        )
        for name in ("a", "b")
    }
    agents = []
    try:
        for d in replicas.values():
            d.start()
        wait_for(lambda: len(_holders(engine)) == 1, 20, "one replica to take the leader lock")
        for i in range(AGENTS):
            node = f"rep-node{i}"
            daemon = list(replicas.values())[i % 2]  # agents split across the two replicas
            agents.append(node_agent(daemon.url, engine, tmp_path, node, interval_s=0.1, gpus=GPUS))
        stop = threading.Event()
        runners = [
            threading.Thread(target=a.run, args=(stop,), kwargs={"max_cycles": CYCLES}) for a, _ in agents
        ]
        for t in runners:
            t.start()
        for t in runners:
            t.join(timeout=30)
        for agent, _ in agents:
            assert agent.drain(30)
        for agent, pusher in agents:
            assert {str(b.batch_id) for b in pusher.delivered} and agent.rejected_batches == 0
        for name, d in replicas.items():  # stateless ingest: each replica stored its agents' batches
            assert d.log_path.read_text().count('"ingest"') >= CYCLES, name

        [leader] = _holders(engine)
        assert leader in ("gpuwatch-a", "gpuwatch-b")
        assert not LeaderLock(engine, KEY).is_leader(), "a third contender cannot lead while one lives"
        wait_for(lambda: _holders(engine) == [leader], 3, "leadership to stay put")  # stable over ticks
        replicas[leader.rpartition("-")[2]].kill9()
        other = "gpuwatch-b" if leader == "gpuwatch-a" else "gpuwatch-a"
        wait_for(lambda: _holders(engine) == [other], 20, f"{other} to take over after kill -9 of {leader}")
    finally:
        for agent, _ in agents:
            agent.close()
        for d in replicas.values():
            d.stop()
    with engine.connect() as conn:
        total = conn.execute(sa.text("SELECT count(*) FROM ingested_batches")).scalar()
    assert total == AGENTS * CYCLES
    engine.dispose()
