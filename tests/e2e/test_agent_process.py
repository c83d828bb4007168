"""The real `gpuwatch agent` process: pushes to a real daemon, serves /metrics, records GPU readings."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from gpuwatch.clock import utcnow
from gpuwatch.collectors.recording import ReplayBackend
from gpuwatch.sql.gpu_readings import count_gpu_samples
from gpuwatch.sql.nodes import create_token
from tests.conftest import free_port

pytestmark = pytest.mark.slow


def test_agent_process_pushes_serves_metrics_and_records(tmp_path, sqlite_url):
    from gpuwatch.sql import migrate
    from gpuwatch.sql.engine import create_engine
    from tests.daemon_process import DaemonProcess

    engine = create_engine(sqlite_url)
    migrate.upgrade(engine)
    token = create_token(engine, "proc-node")
    daemon = DaemonProcess(sqlite_url, tmp_path / "daemon.log")
    daemon.start()
    metrics_port = free_port()
    record = tmp_path / "gpu.jsonl"
    metrics = f"127.0.0.1:{metrics_port}"
    spool = tmp_path / "spool"
    env = daemon.agent_env("proc-node", token, spool, gpus=2, interval_s=0.5, metrics_listen=metrics)
    agent = subprocess.Popen(
        [sys.executable, "-m", "gpuwatch", "agent", "--cycles", "8", "--record", str(record)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        families = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "gpuwatch_gpu_utilization_ratio" not in families:
            try:
                text = requests.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2).text
                families = {f.name: f for f in text_string_to_metric_families(text)}
            except requests.RequestException:
                pass
            time.sleep(0.2)
        assert "gpuwatch_gpu_utilization_ratio" in families, sorted(families)[:20]
        gpus = {s.labels["gpu"] for s in families["gpuwatch_gpu_utilization_ratio"].samples}
        assert gpus == {"0", "1"}
        _, stderr = agent.communicate(timeout=60)
        assert agent.returncode == 0, stderr[-2000:]
    finally:
        if agent.poll() is None:
            agent.kill()
        daemon.stop()
    with engine.connect() as conn:
        stored = count_gpu_samples(conn)
    engine.dispose()
    assert stored == 8 * 2, "a clean stop drains the spool: all 8 cycles x 2 GPUs reached the daemon"
    lines = record.read_text().splitlines()
    assert len(lines) == 8
    replay = ReplayBackend(record)
    first = replay.sample(utcnow())
    assert [s.gpu_index for s in first] == [0, 1] and all(s.simulated for s in first)
    replay.close()
