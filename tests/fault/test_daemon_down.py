"""The daemon down for 30 simulated minutes: the agent spools 180 cycles, then replays all of
them once: merged into a few multi-cycle batches (the default), or in bundles."""

from __future__ import annotations

import threading

import pytest

from gpuwatch.sql.nodes import create_token
from tests.daemon_process import DaemonProcess
from tests.fault.conftest import VirtualTime, assert_exactly_once, make_agent, recent_start

pytestmark = pytest.mark.slow

CYCLES = 180  # 30 minutes at 10 s
GPUS = 4


@pytest.mark.parametrize("merge_backlog", [True, False], ids=["merged", "bundled"])
def test_thirty_minutes_down_then_replay_loses_and_duplicates_nothing(migrated, tmp_path, merge_backlog):
    db_url, engine = migrated
    token = create_token(engine, "down-node")
    daemon = DaemonProcess(db_url, tmp_path / "daemon.log")  # port chosen, nothing listening yet
    vt = VirtualTime(recent_start(minutes=31))
    agent, pusher = make_agent(
        daemon.url,
        token,
        tmp_path / "spool",
        node="down-node",
        interval_s=10.0,
        gpus=GPUS,
        clock=vt,
        merge_backlog=merge_backlog,
    )
    stop = threading.Event()

    def sample() -> None:
        vt.sampler = threading.get_ident()
        agent.run(stop, max_cycles=CYCLES)

    try:
        runner = threading.Thread(target=sample, name="virtual-sampler")
        runner.start()
        runner.join(timeout=40)
        assert not runner.is_alive(), "180 virtual cycles should take seconds of real time"
        assert agent.cycles == CYCLES and agent.cycle_errors == 0
        assert vt.t == pytest.approx((CYCLES - 1) * 10.0), "the clock advanced 30 simulated minutes"
        assert pusher.delivered == [] and pusher.statuses and set(pusher.statuses) == {None}
        assert len(agent.spool) == CYCLES, "every cycle waits in the spool while the daemon is down"
        assert agent.spool.dropped_total == 0
        daemon.start()
        assert agent.drain(40), f"spool did not drain: {len(agent.spool)} left"
    finally:
        stop.set()
        agent.close()
        daemon.stop()
    assert_exactly_once(engine, pusher, CYCLES, GPUS)
    # oldest first: the replay delivered the cycles in the order they were made
    stamps = [s.ts for b in pusher.delivered for s in b.samples if s.kind == "gpu"]
    assert stamps == sorted(stamps)
    # a few requests, not 180 (agent.bundle_max_batches = 64 batches per merged batch or bundle)
    if merge_backlog:
        # 180 spooled cycles in windows of 64: three merged batches, no bundle
        assert agent.merged_sends == len(pusher.delivered) == 3 and pusher.bundles == []
        assert all(b.seq > 0 for b in pusher.delivered)  # each merged batch has its last cycle's seq
    else:
        assert sum(pusher.bundles) >= CYCLES - 1 and len(pusher.bundles) <= 4, pusher.bundles
        assert agent.merged_sends == 0
