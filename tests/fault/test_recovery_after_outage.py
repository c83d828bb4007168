"""Recovery drill: the daemon down for 60 s of the agents' clock while six agents back off (1 s
doubling to 300 s, as deployed); then every backlog is delivered within 15 s of the daemon
answering, spread out, nothing lost or stored twice.

The agents' senders run on an event-driven virtual clock (:class:`EventTime`): a sleep blocks
until the test moves time to its end, and the test moves time to the earliest wake-up only
once every sender with batches left is asleep. So every time measured here is a decision of
an agent (its back-off draws, probe gaps, jitter), never how fast this machine ran: the HTTP
calls, to a real daemon process, happen while the clock stands still. The daemon really is
down (nothing listens on its port; probes and pushes are refused) until the clock reaches
60 s, when the test starts it and waits for its ``/healthz`` before moving time on.
"""

from __future__ import annotations

import random
import threading
import time
from datetime import datetime, timedelta

import pytest

from gpuwatch.agent.recovery import ENDED_PROBE
from gpuwatch.clock import utcnow
from tests.daemon_process import DaemonProcess
from tests.fault.conftest import assert_exactly_once, node_agent, wait_for

pytestmark = pytest.mark.slow

AGENTS = 6
CYCLES = 30  # five minutes spooled at 10 s: one merged batch each
GPUS = 2
OUTAGE_S = 60.0
DEADLINE_S = 15.0
PROBE_S, WINDOW_S = 2.0, 5.0


class EventTime:
    """A virtual clock the senders sleep on and the test moves from wake-up to wake-up."""

    def __init__(self, start: datetime) -> None:
        self.t = 0.0
        self.stamp = start  # what ``now`` answers: the cycles' stamps, set by the test
        self._cond = threading.Condition()
        self._wakes: dict[int, float] = {}

    def clock(self) -> float:
        return self.t

    def now(self) -> datetime:
        return self.stamp

    def sleep(self, event: threading.Event, seconds: float) -> bool:
        ident = threading.get_ident()
        with self._cond:
            self._wakes[ident] = self.t + max(0.0, seconds)
            self._cond.notify_all()
            while self.t < self._wakes[ident] and not event.is_set():
                self._cond.wait(0.05)
            del self._wakes[ident]
        return event.is_set()

    def asleep(self) -> int:
        """Senders waiting for a later time; -1 while one that is due has not woken yet."""
        with self._cond:
            if any(wake <= self.t for wake in self._wakes.values()):
                return -1
            return len(self._wakes)

    def next_wake(self) -> float:
        with self._cond:
            return min(self._wakes.values())

    def move_to(self, t: float) -> None:
        with self._cond:
            self.t = max(self.t, t)
            self._cond.notify_all()


def test_sixty_seconds_down_then_every_backlog_within_fifteen_seconds(migrated, tmp_path):
    db_url, engine = migrated
    daemon = DaemonProcess(db_url, tmp_path / "daemon.log")  # its port: nothing listens yet
    clock = EventTime(utcnow() - timedelta(minutes=10))
    agents = []
    for i in range(AGENTS):
        node = f"outage{i:02d}"
        agent, pusher = node_agent(
            daemon.url,
            engine,
            tmp_path,
            node,
            interval_s=10.0,
            gpus=GPUS,
            clock=clock,  # type: ignore[arg-type]
            rng=random.Random(i),
            agent_settings={
                "backoff_initial_s": 1.0,
                "backoff_max_s": 300.0,
                "probe_interval_s": PROBE_S,
                "recovery_jitter_s": WINDOW_S,
            },
        )
        agents.append((agent, pusher))
    for _ in range(CYCLES):
        clock.stamp += timedelta(seconds=10)
        for agent, _ in agents:
            agent.cycle()
    delivered: dict[str, float] = {}
    try:
        for agent, _ in agents:
            agent.start_sender()
        _run_until_delivered(clock, daemon, agents, delivered)
    finally:
        for agent, _ in agents:
            agent.close()
        daemon.stop()
    after = {node: t - OUTAGE_S for node, t in delivered.items()}
    # when each agent's back-off alone would have let it try again
    alone = {a.config.node: a.waits[-1].started_at + a.waits[-1].backoff_s - OUTAGE_S for a, _ in agents}
    print(
        f"\n{AGENTS} agents, daemon down {OUTAGE_S:g} s: backlogs delivered "
        + ", ".join(f"{after[n]:.1f}" for n in sorted(after, key=after.get))
        + " s after it answered (agent clock; the back-off alone: "
        + ", ".join(f"{alone[n]:.1f}" for n in sorted(after, key=after.get))
        + f" s); {sum(a.probes for a, _ in agents)} probes, {sum(len(a.waits) for a, _ in agents)} "
        "failed pushes in all"
    )
    assert len(after) == AGENTS and max(after.values()) <= DEADLINE_S, after
    assert len({round(s, 3) for s in after.values()}) == AGENTS, "spread out, not one burst"
    assert any(s > DEADLINE_S for s in alone.values()), "a drill the back-off alone fails"
    for agent, _ in agents:
        node = agent.config.node
        if alone[node] > after[node]:  # sooner than its back-off: a probe saw the daemon back
            assert agent.recoveries == 1 and agent.waits[-1].ended == ENDED_PROBE, node
        assert all(PROBE_S / 2 <= gap <= PROBE_S * 1.5 for w in agent.waits for gap in w.probe_gaps_s)
        assert len(agent.waits) <= 10 < agent.probes, "the outage costs probes (no body), not pushes"
    assert_exactly_once(engine, [pusher for _, pusher in agents], CYCLES, GPUS)


def _run_until_delivered(clock: EventTime, daemon: DaemonProcess, agents: list, delivered: dict) -> None:
    """Move the clock from wake-up to wake-up; start the daemon when it reaches OUTAGE_S."""
    up = False
    deadline = time.monotonic() + 300  # a hang, not a measure: only the virtual clock is asserted
    while len(delivered) < AGENTS:
        wait_for(lambda: _quiet(clock, agents), 120, "every sender with batches to be asleep", 0.005)
        for agent, _ in agents:
            if not len(agent.spool):
                delivered.setdefault(agent.config.node, clock.t)
        if len(delivered) == AGENTS:
            return
        assert time.monotonic() < deadline, "the drill did not finish"
        if not up and clock.next_wake() >= OUTAGE_S:
            clock.move_to(OUTAGE_S)
            daemon.start()  # the clock stands still while it starts
            up = True
            continue
        clock.move_to(clock.next_wake())


def _quiet(clock: EventTime, agents: list) -> bool:
    """Every sender that still has batches sleeps on the virtual clock (none is mid-request)."""
    return clock.asleep() == sum(1 for agent, _ in agents if len(agent.spool))
