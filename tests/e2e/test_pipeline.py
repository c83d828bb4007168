"""Agent -> HTTP -> daemon process -> database, with simulated GPUs and this host's /proc.

The agent runs in the test process so the test can see exactly which batches the daemon
acknowledged (a spy on the real Pusher); the daemon is a real separate process on a real
port, on SQLite and on PostgreSQL, so it can be killed with SIGKILL.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
import sqlalchemy as sa

from gpuwatch.daemon.store.batch_store import count_rows
from gpuwatch.sql.gpu_readings import count_gpu_samples, read_gpu_samples
from gpuwatch.sql.schema import HOST_SAMPLES, gpus, ingested_batches, nodes
from tests.fault.conftest import node_agent, wait_for

pytestmark = pytest.mark.slow


def _agent(daemon, engine, tmp_path, interval_s=0.25):
    return node_agent(daemon.url, engine, tmp_path, "sim-node01", interval_s=interval_s, push_timeout_s=2.0)


def test_stored_rows_match_what_the_agent_sent(daemon_process, tmp_path):
    daemon, engine = daemon_process
    agent, pusher = _agent(daemon, engine, tmp_path)
    try:
        agent.run(threading.Event(), max_cycles=4)
        assert agent.drain(20), "spool did not drain"
    finally:
        agent.close()
    sent = pusher.delivered
    assert len(sent) == 4
    sent_gpu = {(s.gpu_index, s.ts): s for b in sent for s in b.samples if s.kind == "gpu"}
    assert len(sent_gpu) == 16  # 4 cycles x 4 simulated GPUs
    with engine.connect() as conn:
        node = conn.execute(sa.select(nodes).where(nodes.c.name == "sim-node01")).one()
        rows = read_gpu_samples(conn)
        assert len(rows) == len(sent_gpu)
        for row in rows:
            assert row.node_id == node.id
            sample = sent_gpu[(row.gpu_index, row.ts)]  # the timestamp survives exactly, as UTC
            for field in (
                "util_gpu_ratio",
                "memory_used_bytes",
                "memory_total_bytes",
                "power_watts",
                "energy_joules",
                "sm_active_ratio",
                "tensor_active_ratio",
                "temperature_celsius",
            ):
                # scaled fields are stored to a millionth of a ratio, a thousandth of a watt or degree
                assert getattr(row, field) == pytest.approx(getattr(sample, field), rel=1e-9, abs=5e-4), field
            assert row.simulated is True
        names = {g.gpu_index: g.name for g in conn.execute(sa.select(gpus)).all()}
        assert set(names) == {0, 1, 2, 3} and all(names.values())
        counts = count_rows(conn)
        assert counts["gpu_samples"] == len(sent_gpu)
        for spec in HOST_SAMPLES:
            expected = sum(1 for b in sent for s in b.samples if s.kind == spec.kind)
            assert counts[spec.readings] == expected, spec.kind
        assert counts["cpu_samples"] >= 3  # rates from the second cycle on
        assert node.agent_version and node.last_seen_at is not None


def test_daemon_killed_mid_run_loses_and_duplicates_nothing(daemon_process, tmp_path):
    daemon, engine = daemon_process
    agent, pusher = _agent(daemon, engine, tmp_path, interval_s=0.2)
    stop = threading.Event()
    runner = threading.Thread(target=agent.run, args=(stop,), kwargs={"max_cycles": 25})
    runner.start()
    try:
        wait_for(lambda: len(pusher.delivered) >= 4, 30, "first batches delivered")
        daemon.kill9()
        down_at = agent.cycles
        wait_for(lambda: agent.cycles >= down_at + 4, 30, "cycles while the daemon is down")
        assert len(agent.spool) >= 3, "batches should pile up in the spool while the daemon is down"
        daemon.start()
        runner.join(timeout=60)
        assert agent.drain(30), "spool did not drain after the restart"
    finally:
        stop.set()
        runner.join(timeout=10)
        agent.close()
    assert agent.cycles == 25
    # the backlog went merged (agent.merge_backlog): count cycles, not batches
    acked = {str(b.batch_id): b for b in pusher.delivered}  # a batch answered twice counts once
    cycles = Counter(s.ts for b in acked.values() for s in b.samples if s.kind == "gpu")
    assert len(cycles) == 25 and set(cycles.values()) == {4}, "every cycle acknowledged, in one batch"
    expected_samples = {batch_id: len(b.samples) for batch_id, b in acked.items()}
    with engine.connect() as conn:
        stored = dict(conn.execute(sa.select(ingested_batches.c.batch_id, ingested_batches.c.samples)).all())
        stored_gpu = count_gpu_samples(conn)
    assert stored == expected_samples  # 0 lost, and no batch stored twice
    assert stored_gpu == 25 * 4  # 25 cycles x 4 simulated GPUs, each sample once
