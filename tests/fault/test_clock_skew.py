"""Clock skew: a node an hour ahead is refused (422, kept in rejected/); two days behind is stored."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gpuwatch.clock import utcnow
from gpuwatch.sql.gpu_readings import count_gpu_samples, read_gpu_samples
from gpuwatch.sql.nodes import create_token
from gpuwatch.sql.partitions import list_partitions, partition_name
from tests.daemon_process import DaemonProcess
from tests.fault.conftest import make_agent, stored_batches, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def daemon(migrated, tmp_path):
    db_url, engine = migrated
    d = DaemonProcess(db_url, tmp_path / "daemon.log")
    d.start()
    yield d, engine
    d.stop()


def _one_cycle(daemon, engine, tmp_path, node, skew):
    token = create_token(engine, node)
    agent, pusher = make_agent(
        daemon.url, token, tmp_path / node, node=node, gpus=2, now=lambda: utcnow() + skew
    )
    try:
        agent.start_sender()
        agent.cycle()
        wait_for(lambda: pusher.statuses, 20, "the daemon's answer")
        assert agent.drain(10)
    finally:
        agent.close()
    return agent, pusher


def test_node_an_hour_ahead_is_refused_with_the_rule_and_kept(daemon, tmp_path):
    d, engine = daemon
    agent, pusher = _one_cycle(d, engine, tmp_path, "future-node", timedelta(hours=1))
    assert pusher.statuses == [422]
    assert agent.rejected_batches == 1 and pusher.delivered == []
    [(path, reason)] = agent.spool.rejected()
    assert path.exists() and path.parent.name == "rejected"
    assert "ahead of the daemon's clock" in reason and "300 s" in reason and "NTP" in reason
    assert stored_batches(engine) == {}


def test_node_two_days_behind_is_stored_in_a_partition_made_on_demand(daemon, tmp_path):
    d, engine = daemon
    skew = -timedelta(days=2)
    day = (utcnow() + skew).date()
    if engine.dialect.name == "postgresql":
        with engine.connect() as conn:  # the scheduler makes yesterday onwards, not two days back
            assert partition_name("gpu_sample_packs", day) not in list_partitions(conn, "gpu_sample_packs")
    agent, pusher = _one_cycle(d, engine, tmp_path, "past-node", skew)
    assert pusher.statuses == [200] and agent.rejected_batches == 0
    [batch] = pusher.delivered
    assert stored_batches(engine) == {str(batch.batch_id): len(batch.samples)}
    with engine.connect() as conn:
        days = {ts.date() for ts in (r.ts for r in read_gpu_samples(conn))}
        assert days == {day}
        if engine.dialect.name == "postgresql":
            assert partition_name("gpu_sample_packs", day) in list_partitions(conn, "gpu_sample_packs")


def test_one_cycle_ahead_in_a_merged_backlog_rejects_only_that_cycle(daemon, tmp_path):
    """The daemon refuses a merged batch holding one cycle from the future; the agent sends
    its batches again as a bundle, and only that cycle goes to rejected/."""
    d, engine = daemon
    skew = [timedelta(0)]
    token = create_token(engine, "jumpy-node")
    agent, pusher = make_agent(
        d.url, token, tmp_path / "jumpy", node="jumpy-node", gpus=2, now=lambda: utcnow() + skew[0]
    )
    try:
        for ahead in (0, 0, 1, 0, 0):  # hours: the clock jumped for one cycle (chrony stepped it back)
            skew[0] = timedelta(hours=ahead)
            agent.cycle()
        agent.start_sender()
        assert agent.drain(20)
    finally:
        agent.close()
    assert pusher.statuses == [422, 200]  # the merged batch; the bundle of its five batches
    assert agent.rejected_batches == 1 and agent.sent_batches == 4 and agent.merged_sends == 0
    [(_, reason)] = agent.spool.rejected()
    assert "ahead of the daemon's clock" in reason
    assert stored_batches(engine) == {str(b.batch_id): len(b.samples) for b in pusher.delivered}
    assert len(pusher.delivered) == 4
    with engine.connect() as conn:
        assert count_gpu_samples(conn) == 4 * 2
