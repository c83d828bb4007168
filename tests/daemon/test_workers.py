"""``daemon.workers``: several processes behind one port, one database, one scheduler leader."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import timedelta

import pytest
import requests
import sqlalchemy as sa

from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.gpu_readings import count_gpu_samples
from gpuwatch.sql.nodes import create_token
from tests import factories
from tests.daemon_process import DaemonProcess
from tests.fault.conftest import wait_for
from tests.fault.test_replicas import _holders

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

NODES = 6
BATCHES_PER_NODE = 8
CYCLES, GPUS = 2, 2  # factories.batch defaults


def _lines(daemon: DaemonProcess, msg: str) -> list[dict]:
    lines = (json.loads(line) for line in daemon.log_path.read_text().splitlines() if line.startswith("{"))
    return [line for line in lines if line["msg"] == msg]


def _pids_logging(daemon: DaemonProcess, msg: str) -> set[int]:
    return {line["pid"] for line in _lines(daemon, msg)}


def _post_batches(url: str, node: str, token: str) -> None:
    for i in range(BATCHES_PER_NODE):
        batch = factories.batch(node=node, start=factories.T0 + timedelta(minutes=i))
        response = requests.post(
            f"{url}/api/v1/ingest/{node}",
            data=batch.model_dump_json(),
            # a connection per batch, so the kernel spreads them over the workers
            headers={"Authorization": f"Bearer {token}", "Connection": "close"},
            timeout=30,
        )
        assert response.status_code == 200, response.text


def test_two_workers_share_the_port_and_elect_one_leader(pg_url, tmp_path, monkeypatch):
    engine = create_engine(pg_url)
    migrate.upgrade(engine)
    monkeypatch.setenv("GPUWATCH_ALERTS__ENABLED", "true")  # leader-only jobs take the lock every second
    monkeypatch.setenv("GPUWATCH_ALERTS__WORKER__INTERVAL_S", "1")
    url = f"{pg_url}?application_name=gpuwatch-workers"
    daemon = DaemonProcess(url, tmp_path / "daemon.log", env={"GPUWATCH_DAEMON__WORKERS": "2"})
    tokens = {f"w-node{i}": create_token(engine, f"w-node{i}") for i in range(NODES)}
    try:
        daemon.start()
        wait_for(lambda: len(_pids_logging(daemon, "daemon worker ready")) == 2, 30, "both workers")
        agents = [threading.Thread(target=_post_batches, args=(daemon.url, n, t)) for n, t in tokens.items()]
        for t in agents:
            t.start()
        for t in agents:
            t.join(timeout=60)
        workers = _pids_logging(daemon, "daemon worker ready")
        assert daemon.proc.pid not in workers  # the parent only supervises
        wait_for(lambda: _holders(engine) == ["gpuwatch-workers"], 20, "exactly one worker to lead")
    finally:
        daemon.stop()
    assert daemon.proc.returncode == 0
    # each worker logs its last partial minute's summary as it stops: together, every request
    summaries = _lines(daemon, "ingest summary")
    assert {line["pid"] for line in summaries} <= workers
    assert sum(line["requests"] for line in summaries) == NODES * BATCHES_PER_NODE
    assert sum(line["batches"]["stored"] for line in summaries) == NODES * BATCHES_PER_NODE
    with engine.connect() as conn:
        batches = conn.execute(sa.text("SELECT count(*) FROM ingested_batches")).scalar()
        gpu_rows = count_gpu_samples(conn)
    assert batches == NODES * BATCHES_PER_NODE
    assert gpu_rows == NODES * BATCHES_PER_NODE * CYCLES * GPUS
    engine.dispose()


def test_workers_refuse_sqlite(tmp_path):
    env = dict(os.environ, GPUWATCH_DB=f"sqlite:///{tmp_path / 'g.db'}", GPUWATCH_DAEMON__WORKERS="2")
    env.pop("GPUWATCH_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "daemon"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode != 0
    assert "daemon.workers > 1 needs PostgreSQL" in done.stderr
