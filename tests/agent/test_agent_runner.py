"""Agent: batches, schedule, outage replay, rejected/retried batches, --once."""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest

import gpuwatch
from gpuwatch.agent import Agent, Outcome, Pusher, PushResult, Spool
from gpuwatch.agent import spool as spool_mod
from gpuwatch.collectors.base import Collector
from gpuwatch.config import AgentConfig, Settings
from gpuwatch.wire import AgentSample, Batch, CpuSample
from gpuwatch.wire.v1 import _Sample
from tests.agent.fakes import NODE, TOKEN, BrokenCollector, CpuCollector, RateCollector, Reply, ScriptedDaemon
from tests.agent.fakes import agent_config as make_config

LogCapture = pytest.LogCaptureFixture


def wait_for(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)


class RecordingSleep:
    """An injected sleep that returns at once and remembers what it was asked to wait."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, stop: threading.Event, seconds: float) -> bool:
        self.calls.append(seconds)
        return stop.is_set()


def make_agent(config: AgentConfig, collectors: Sequence[Collector] | None = None, **kwargs: object) -> Agent:
    spool = Spool(config.spool_dir, config.spool_max_bytes)
    pusher = Pusher(config.daemon_url, config.node, config.resolve_token(), config.push_timeout_s)
    kwargs.setdefault("rng", random.Random(0))
    return Agent(
        config,
        collectors if collectors is not None else [CpuCollector()],
        spool,
        pusher,
        idle_poll_s=0.05,
        **kwargs,  # type: ignore[arg-type]
    )


@contextmanager
def run_until_sent(config: AgentConfig, cycles: int, sent: int) -> Iterator[Agent]:
    """An agent that ran ``cycles`` cycles (its sender thread goes on) until ``sent`` batches went;
    closed on leaving, when what it still holds goes."""
    agent = make_agent(config)
    try:
        agent.run(threading.Event(), max_cycles=cycles)
        wait_for(lambda: agent.sent_batches == sent)
        yield agent
    finally:
        agent.close()


def run_in_thread(agent: Agent, stop: threading.Event, max_cycles: int | None) -> threading.Thread:
    thread = threading.Thread(target=agent.run, args=(stop,), kwargs={"max_cycles": max_cycles})
    thread.start()
    return thread


def test_collect_batch_has_samples_health_and_increasing_seq(tmp_path: Path) -> None:
    config = make_config(tmp_path, "http://127.0.0.1:9")
    with make_agent(config, [CpuCollector(), BrokenCollector()]) as agent:
        first, second = agent.collect_batch(), agent.collect_batch()
    assert first.node == NODE and first.agent_version == gpuwatch.__version__
    assert second.seq == first.seq + 1
    assert first.batch_id != second.batch_id
    kinds = [s.kind for s in first.samples]
    assert kinds == ["cpu", "agent"]
    health = first.samples[-1]
    assert isinstance(health, AgentSample)
    assert health.collector_errors == {"fake_broken": "RuntimeError: sensor on fire"}
    assert set(health.collector_seconds or {}) == {"fake_cpu", "fake_broken"}
    assert health.spool_batches == 0 and health.dropped_batches_total == 0


def test_agent_sample_reports_spool_state(tmp_path: Path) -> None:
    config = make_config(tmp_path, "http://127.0.0.1:9")
    with make_agent(config) as agent:
        for _ in range(3):
            agent.cycle()  # spooled, nothing sent (no sender started)
        batch = agent.collect_batch()
        assert batch.seq == 3
        health = batch.samples[-1]
        assert isinstance(health, AgentSample)
        assert health.spool_batches == 3 and health.spool_bytes == agent.spool.bytes_used > 0  # type: ignore[union-attr]


def test_accepts_whole_settings(tmp_path: Path) -> None:
    settings = Settings(agent=make_config(tmp_path, "http://127.0.0.1:9"))
    agent = Agent.from_settings(settings, [CpuCollector()])
    try:
        assert agent.config.node == NODE
        assert agent.collect_batch().node == NODE
    finally:
        agent.close()


def test_outage_loses_and_duplicates_nothing_and_replays_in_order(
    daemon: ScriptedDaemon, tmp_path: Path
) -> None:
    daemon.down()
    config = make_config(tmp_path, daemon.url, merge_backlog=False)  # merged: test_agent_merge.py
    agent = make_agent(config)
    stop = threading.Event()
    cycles = 25
    thread = run_in_thread(agent, stop, cycles)
    try:
        wait_for(lambda: agent.cycles >= 8)
        assert daemon.requests_count() == 0
        assert agent.retried_sends > 0  # it kept trying during the outage
        daemon.up()
        thread.join(5)
        assert not thread.is_alive()
        assert agent.drain(5)
        wait_for(lambda: agent.sent_batches == cycles)
    finally:
        stop.set()
        thread.join(5)
        agent.close()
    stored = [b for r in daemon.received for b in r.decoded]
    assert len(stored) == cycles  # nothing lost
    assert len({b.batch_id for b in stored}) == cycles  # nothing sent twice
    assert [b.seq for b in stored] == list(range(cycles))  # oldest first, no gaps
    assert all(r.headers["Authorization"] == f"Bearer {TOKEN}" for r in daemon.received)
    # the backlog went back in bundles, not a request per batch
    assert any(r.bundle and len(r.batches) > 1 for r in daemon.received)
    assert len(daemon.received) < cycles
    assert all(r.headers["Content-Type"] == "application/x-ndjson" for r in daemon.received if r.bundle)


def test_backlog_from_a_previous_run_is_sent_first(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, daemon.url, merge_backlog=False)  # batch ids kept on the wire
    with make_agent(config) as first:  # collected, never sent (as if killed before the sender ran)
        old = [first.cycle() for _ in range(4)]
    agent = make_agent(config)
    stop = threading.Event()
    try:
        agent.run(stop, max_cycles=3)
        assert agent.drain(5)
    finally:
        agent.close()
    received = [b for r in daemon.received for b in r.decoded]
    assert [b.batch_id for b in received[:4]] == [b.batch_id for b in old if b is not None]
    assert [b.seq for b in received] == list(range(7))  # seq continues across the restart


def test_422_moves_batch_to_rejected_and_does_not_retry(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    daemon.script = [Reply(422, {"detail": "samples.0.busy_ratio: less than or equal to 1"})]
    config = make_config(tmp_path, daemon.url, bundle_max_batches=1)  # one batch per request
    with make_agent(config) as agent:
        batches = [agent.cycle() for _ in range(3)]
        results = [agent.send_one() for _ in range(4)]
        assert [r.outcome if r else None for r in results] == [Outcome.REJECTED, Outcome.OK, Outcome.OK, None]
        assert agent.rejected_batches == 1 and agent.sent_batches == 2
        [(path, reason)] = agent.spool.rejected()  # type: ignore[union-attr]
    bad = batches[0]
    assert bad is not None
    assert path.parent == config.spool_dir / "rejected"
    assert json.loads(path.read_bytes())["batch_id"] == str(bad.batch_id)
    assert "HTTP 422" in reason and "busy_ratio" in reason
    ids = [r.batch["batch_id"] for r in daemon.received]
    assert ids.count(str(bad.batch_id)) == 1  # not retried
    assert len(ids) == 3


def test_401_is_retried_until_the_token_is_fixed(
    daemon: ScriptedDaemon, tmp_path: Path, caplog: LogCapture
) -> None:
    daemon.script = [Reply(401, {"detail": "invalid token"})] * 3
    config = make_config(tmp_path, daemon.url)
    sleep = RecordingSleep()
    agent = make_agent(config, sleep=sleep)
    try:
        batch = agent.cycle()
        agent.start_sender()
        wait_for(lambda: agent.sent_batches == 1)
    finally:
        agent.close()
    assert batch is not None
    assert [r.batch["batch_id"] for r in daemon.received] == [str(batch.batch_id)] * 4
    assert agent.retried_sends == 3 and len(sleep.calls) == 3
    assert all(0 <= s <= config.backoff_max_s for s in sleep.calls)
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "401" in errors[0].getMessage()


def test_retry_after_is_honoured(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    daemon.script = [Reply(429, headers={"Retry-After": "7"}), Reply(503, headers={"Retry-After": "3"})]
    config = make_config(tmp_path, daemon.url, backoff_initial_s=0.001, backoff_max_s=300.0)
    sleep = RecordingSleep()
    agent = make_agent(config, sleep=sleep)
    try:
        agent.cycle()
        agent.start_sender()
        wait_for(lambda: agent.sent_batches == 1)
    finally:
        agent.close()
    first, second = sleep.calls
    assert 7.0 <= first <= 10.5 and 3.0 <= second <= 4.5, "at least Retry-After, at most 1.5x it"
    assert daemon.requests_count() == 3


def test_retry_after_is_capped_at_backoff_max(tmp_path: Path) -> None:
    config = make_config(tmp_path, "http://127.0.0.1:9", backoff_initial_s=0.001, backoff_max_s=0.5)
    with make_agent(config) as agent:
        assert agent.retry_delay(PushResult(Outcome.RETRY, 429, "busy", retry_after_s=1000.0)) == 0.5
        assert 0.2 <= agent.retry_delay(PushResult(Outcome.RETRY, 503, "busy", retry_after_s=0.2)) <= 0.3
        assert agent.retry_delay(PushResult(Outcome.RETRY, None, "down")) <= 0.5


def test_agents_shed_together_do_not_come_back_together(tmp_path: Path) -> None:
    """A daemon shedding load sends every agent the same Retry-After; exactly that wait would
    bring them all back in the same second. Each waits 1-1.5x it, spread out."""
    delays = []
    for i in range(200):
        config = make_config(
            tmp_path / str(i), "http://127.0.0.1:9", backoff_initial_s=1.0, backoff_max_s=300.0
        )
        with make_agent(config, rng=random.Random(i)) as agent:
            delays.append(agent.retry_delay(PushResult(Outcome.RETRY, 503, "shed", retry_after_s=5.0)))
    assert all(5.0 <= d <= 7.5 for d in delays)
    per_half_second = [sum(1 for d in delays if 5 + k / 2 <= d < 5.5 + k / 2) for k in range(5)]
    assert max(per_half_second) < 0.3 * len(delays), f"clumped: {per_half_second}"


def test_sampling_is_aligned_to_the_monotonic_clock(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    """Collection time does not shift later ticks; an overrun skips ticks instead of drifting."""
    clock = [100.0]
    durations = iter([0.3, 0.3, 2.5, 0.3, 0.3])
    starts: list[float] = []

    class SlowCollector(Collector):
        name = "slow"

        def collect(self, now: datetime) -> Sequence[_Sample]:
            starts.append(clock[0])
            clock[0] += next(durations)
            return []

    def fake_sleep(stop: threading.Event, seconds: float) -> bool:
        clock[0] += seconds
        return stop.is_set()

    config = make_config(tmp_path, daemon.url, interval_s=1.0)
    agent = make_agent(config, [SlowCollector()], clock=lambda: clock[0], sleep=fake_sleep)
    try:
        agent.run(threading.Event(), max_cycles=5)
    finally:
        agent.close()
    assert [round(s - 100.0, 6) for s in starts] == [
        0.0,
        1.0,
        2.0,
        5.0,
        6.0,
    ]  # 2.5 s cycle: ticks 3, 4 skipped
    assert agent.skipped_ticks == 2


def test_run_returns_promptly_when_stopped(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, daemon.url, interval_s=30.0)
    agent = make_agent(config)
    stop = threading.Event()
    thread = run_in_thread(agent, stop, None)
    try:
        wait_for(lambda: agent.sent_batches == 1)
        stop.set()
        thread.join(2)
        assert not thread.is_alive()
    finally:
        stop.set()
        thread.join(5)
        agent.close()
    assert agent.cycles == 1


def test_close_stops_the_sender_during_a_long_backoff(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    daemon.down()
    config = make_config(tmp_path, daemon.url, backoff_initial_s=60.0, backoff_max_s=60.0)
    agent = make_agent(config)  # Random(0): the first delay is ~50 s
    agent.cycle()
    agent.start_sender()
    wait_for(lambda: agent.retried_sends >= 1)
    started = time.monotonic()
    agent.close()
    assert time.monotonic() - started < 2.0
    assert agent._sender is not None and not agent._sender.is_alive()
    with Spool(config.spool_dir, config.spool_max_bytes) as spool:
        assert len(spool) == 1  # kept for the next start


def test_close_closes_collectors(tmp_path: Path) -> None:
    collector = CpuCollector()
    agent = make_agent(make_config(tmp_path, "http://127.0.0.1:9"), [collector])
    agent.close()
    agent.close()  # idempotent
    assert collector.closed


def test_full_disk_never_stops_the_sample_loop(
    daemon: ScriptedDaemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: LogCapture
) -> None:
    real = spool_mod._write_durable

    def full(final: Path, data: bytes) -> None:
        if final.name != spool_mod.STATE_FILE:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(final, data)

    monkeypatch.setattr(spool_mod, "_write_durable", full)
    config = make_config(tmp_path, daemon.url)
    agent = make_agent(config)
    try:
        agent.run(threading.Event(), max_cycles=5)
    finally:
        agent.close()
    assert agent.cycles == 5 and agent.cycle_errors == 0
    assert agent.spool.dropped_total == 5  # type: ignore[union-attr]
    assert "spool disk is full" in caplog.text
    assert daemon.requests_count() == 0


def test_a_failing_cycle_is_logged_and_the_loop_goes_on(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    class Bogus(Collector):
        name = "bogus"

        def collect(self, now: datetime) -> Sequence[_Sample]:
            return ["not a sample"]  # type: ignore[list-item]

    agent = make_agent(make_config(tmp_path, daemon.url), [Bogus()])
    try:
        agent.run(threading.Event(), max_cycles=3)
    finally:
        agent.close()
    assert agent.cycles == 3 and agent.cycle_errors == 3


def test_collect_once_json_takes_two_snapshots_and_sends_nothing(tmp_path: Path) -> None:
    rate = RateCollector()
    sleep = RecordingSleep()
    config = make_config(tmp_path, "http://127.0.0.1:9")
    agent = Agent(config, [CpuCollector(), rate], None, None, sleep=sleep)
    try:
        text = agent.collect_once_json()
    finally:
        agent.close()
    assert rate.calls == 2 and sleep.calls == [1.0]
    batch = Batch.model_validate_json(text)
    assert [s.kind for s in batch.samples] == ["cpu", "nic", "agent"]
    assert "\n  " in text  # pretty
    assert not config.spool_dir.exists()


def test_collect_once_json_gap_is_configurable(tmp_path: Path) -> None:
    sleep = RecordingSleep()
    agent = Agent(make_config(tmp_path, "http://127.0.0.1:9"), [CpuCollector()], None, None, sleep=sleep)
    agent.collect_once_json(gap_s=0.25)
    assert sleep.calls == [0.25]
    with pytest.raises(ValueError):
        agent.run(threading.Event(), max_cycles=1)


def test_samples_are_stamped_by_the_injected_wall_clock(tmp_path: Path) -> None:
    when = datetime.fromisoformat("2026-03-01T12:00:00+00:00")
    agent = Agent(make_config(tmp_path, "http://127.0.0.1:9"), [CpuCollector()], None, None, now=lambda: when)
    batch = agent.collect_batch()
    assert all(s.ts == when for s in batch.samples)
    assert isinstance(batch.samples[0], CpuSample)
