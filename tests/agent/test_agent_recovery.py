"""Backing off from an outage: probes of /healthz cut the back-off short once the daemon answers
again, spread over a window; Retry-After and failures that are not outages are waited out; a
clean stop makes one more attempt at once."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from gpuwatch.agent.push import Outcome, PushResult, daemon_down
from gpuwatch.agent.recovery import ENDED_BACKOFF, ENDED_INTERRUPTED, ENDED_PROBE, Recovery
from tests.agent.fakes import Reply, ScriptedDaemon
from tests.agent.fakes import agent_config as make_config
from tests.agent.test_agent_runner import make_agent, wait_for

UP = PushResult(Outcome.OK, 200, "healthy")
DOWN = PushResult(Outcome.RETRY, None, "connection refused")


class Timeline:
    """A virtual clock whose pauses advance it; the probe answers from a script by time."""

    def __init__(self, up_at: float, busy_until: float = 0.0) -> None:
        self.t = 0.0
        self.up_at = up_at
        self.busy_until = busy_until
        self.pauses: list[float] = []
        self.probed_at: list[float] = []

    def clock(self) -> float:
        return self.t

    def pause(self, seconds: float) -> bool:
        self.pauses.append(seconds)
        self.t += seconds
        return False

    def probe(self) -> PushResult:
        self.probed_at.append(self.t)
        if self.t < self.busy_until:
            return PushResult(Outcome.RETRY, 503, "busy", retry_after_s=20.0)
        return UP if self.t >= self.up_at else DOWN


def _recovery(timeline: Timeline, seed: int = 1) -> Recovery:
    return Recovery(timeline.probe, timeline.clock, timeline.pause, random.Random(seed), 2.0, 5.0)


@pytest.mark.parametrize("seed", range(20))
def test_an_outage_ends_within_probe_and_window_of_the_daemon_answering(seed: int) -> None:
    """A 300 s back-off drawn after 60 s of outage: the agent sends within 1.5 probe intervals
    plus the 5 s window of the daemon answering at t=60, not at t=300."""
    timeline = Timeline(up_at=60.0)
    wait = _recovery(timeline, seed).wait(300.0, probing=True, seen_down=True)
    assert wait.ended == ENDED_PROBE and wait.jitter_s is not None and 0 <= wait.jitter_s <= 5.0
    assert all(1.0 <= gap <= 3.0 for gap in wait.probe_gaps_s), "0.5-1.5x the probe interval"
    assert wait.probes[-1] == 200 and set(wait.probes[:-1]) == {None}
    assert 60.0 <= timeline.t <= 60.0 + 3.0 + 5.0


def test_retry_after_is_waited_out_without_probes() -> None:
    timeline = Timeline(up_at=0.0)
    busy = PushResult(Outcome.RETRY, 503, "daemon busy", retry_after_s=5.0)
    assert not daemon_down(busy)
    wait = _recovery(timeline).wait(6.2, probing=daemon_down(busy), seen_down=False)
    assert (wait.ended, wait.probes, timeline.pauses) == (ENDED_BACKOFF, [], [6.2])


def test_a_daemon_up_all_along_is_not_sent_to_again_before_the_back_off_ends() -> None:
    """The attempt a probe woke failed again (seen_down False): a 200 probe says nothing new,
    so the daemon gets one attempt per back-off, not one per probe."""
    timeline = Timeline(up_at=0.0)
    wait = _recovery(timeline).wait(40.0, probing=True, seen_down=False)
    assert wait.ended == ENDED_BACKOFF and wait.probes == [200] and timeline.t == pytest.approx(40.0)


def test_a_probes_retry_after_spaces_the_next_probe() -> None:
    timeline = Timeline(up_at=0.0, busy_until=10.0)
    wait = _recovery(timeline).wait(300.0, probing=True, seen_down=True)
    assert wait.ended == ENDED_PROBE and wait.probes == [503, 200]
    assert 20.0 <= wait.probe_gaps_s[1] <= 30.0, "1-1.5x the probe's Retry-After"


def test_an_interrupted_wait_says_so() -> None:
    recovery = Recovery(lambda: DOWN, lambda: 0.0, lambda s: True, random.Random(0), 2.0, 5.0)
    assert recovery.wait(100.0, probing=True, seen_down=True).ended == ENDED_INTERRUPTED


def test_the_agent_probes_and_sends_soon_after_the_daemon_is_back(
    daemon: ScriptedDaemon, tmp_path: Path
) -> None:
    """A real agent and HTTP server: down, the first attempt fails; its back-off is long, but the
    batch goes as soon as a probe sees the server back."""
    config = make_config(
        tmp_path,
        daemon.url,
        backoff_initial_s=120.0,
        backoff_max_s=120.0,
        probe_interval_s=0.05,
        recovery_jitter_s=0.05,
    )
    daemon.down()
    agent = make_agent(config)
    try:
        agent.cycle()
        agent.start_sender()
        wait_for(lambda: agent.retried_sends >= 1 and agent.probes >= 2, 10)
        daemon.up()
        wait_for(lambda: agent.sent_batches == 1, 30)
    finally:
        agent.close()
    [wait] = [w for w in agent.waits if w.ended == ENDED_PROBE]
    assert agent.recoveries == 1 and wait.backoff_s > 60.0 and daemon.probes >= 1, "a back-off cut short"


def test_a_clean_stop_makes_one_attempt_in_the_middle_of_a_back_off(
    daemon: ScriptedDaemon, tmp_path: Path
) -> None:
    """The daemon asked for 120 s (Retry-After); a clean stop (drain, then close) does not wait
    for it: one attempt goes at once, and here it is stored."""
    daemon.script = [Reply(503, {"detail": "daemon busy"}, headers={"Retry-After": "120"})]
    config = make_config(tmp_path, daemon.url, backoff_max_s=300.0)
    agent = make_agent(config)
    try:
        agent.cycle()
        agent.start_sender()
        wait_for(lambda: agent.retried_sends == 1, 10)
        assert agent.drain(timeout_s=20.0), "the final attempt emptied the spool"
    finally:
        agent.close()
    assert [r.status for r in daemon.received] == [503, 200] and agent.sent_batches == 1
