"""Agent: a spool backlog goes in bundles; each batch of a bundle is acked, rejected or kept
by its own answer; older daemons and smaller limits make the agent send less per request."""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pytest

from gpuwatch.agent import Outcome
from gpuwatch.agent.runner import BUNDLE_RETRY_AFTER_S
from gpuwatch.wire import v2 as wire_v2
from tests.agent.fakes import Reply, ScriptedDaemon, agent_config
from tests.agent.test_agent_runner import make_agent, run_until_sent


def make_config(tmp_path: Path, url: str, **overrides: object):
    """An agent that bundles its backlog (merging it is tested in test_agent_merge.py)."""
    return agent_config(tmp_path, url, **{"merge_backlog": False, **overrides})


def _spooled(agent, n: int) -> list[str]:
    batches = [agent.cycle() for _ in range(n)]
    return [str(b.batch_id) for b in batches if b is not None]


def test_backlog_goes_in_bundles_of_the_configured_size(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, daemon.url, bundle_max_batches=4)
    with make_agent(config) as agent:
        ids = _spooled(agent, 10)
        while agent.send_one() is not None:
            pass
        assert len(agent.spool) == 0  # type: ignore[arg-type]
        assert agent.sent_batches == 10 and agent.bundles_sent == 3
    assert [len(r.batches) for r in daemon.received] == [4, 4, 2]
    assert [r.bundle for r in daemon.received] == [True, True, True]
    assert daemon.stored_ids() == ids  # oldest first, each once


def test_bundle_bytes_are_bounded(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    # v1: a CPU-only v2 batch is so small that 2.5 of them are under the smallest limit allowed
    probe = make_config(tmp_path / "probe", daemon.url, wire_format=1)
    with make_agent(probe) as agent:
        size = len(wire_v2.encode(agent.collect_batch(), probe.wire_format))
    config = make_config(tmp_path, daemon.url, bundle_max_bytes=int(size * 2.5), wire_format=1)
    with make_agent(config) as agent:
        _spooled(agent, 5)
        while agent.send_one() is not None:
            pass
    assert [len(r.batches) for r in daemon.received] == [2, 2, 1]
    assert all(len(r.body) <= size * 2.5 for r in daemon.received)


def test_each_batch_of_a_bundle_settled_by_its_own_answer(
    daemon: ScriptedDaemon, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = make_config(tmp_path, daemon.url)
    with make_agent(config) as agent:
        ids = _spooled(agent, 5)
        daemon.refuse = {
            ids[1]: (422, "samples.0.gpu.util_gpu_ratio: less than or equal to 1"),
            ids[3]: (403, "batch is for node 'x'; node 'node01' may only write its own samples"),
        }
        first = agent.send_one()
        # the 403 is kept for another try (an admin can fix it), so the sender backs off
        assert first is not None and first.outcome is Outcome.RETRY and first.status == 403
        assert agent.sent_batches == 3 and agent.rejected_batches == 1
        [(path, reason)] = agent.spool.rejected()  # type: ignore[union-attr]
        assert json.loads(path.read_bytes())["batch_id"] == ids[1]
        assert "HTTP 422" in reason and "util_gpu_ratio" in reason
        assert len(agent.spool) == 1  # type: ignore[arg-type]
        del daemon.refuse[ids[3]]
        second = agent.send_one()
        assert second is not None and second.outcome is Outcome.OK
        assert agent.send_one() is None
    assert daemon.stored_ids() == [ids[0], ids[2], ids[4], ids[3]]
    assert not daemon.received[1].bundle  # the one left went alone
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("403" in m and "own samples" in m for m in errors)  # logged as a config problem
    assert any("rejected batch" in m and ids[1] in m for m in errors)


def test_daemon_without_bundles_gets_one_batch_per_request(
    daemon: ScriptedDaemon, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    daemon.bundles = False
    config = make_config(tmp_path, daemon.url)
    with make_agent(config) as agent:
        ids = _spooled(agent, 4)
        results = []
        while (result := agent.send_one()) is not None:
            results.append(result.outcome)
        assert results == [Outcome.OK] * 4 and agent.sent_batches == 4
    # a daemon without bundles predates wire format v2 as well: the v2 bundle's 404 makes the
    # agent try v1 (404 again, so no bundles), then one v1 batch per request
    assert [(r.bundle, r.version) for r in daemon.received] == [(True, 2), (True, 1)] + [(False, 1)] * 4
    assert daemon.stored_ids() == ids
    assert any("one batch per request" in r.getMessage() for r in caplog.records)


def test_413_for_a_bundle_halves_the_bundles(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    daemon.script = [Reply(413, {"detail": "body of 99999 bytes exceeds the limit"})]
    config = make_config(tmp_path, daemon.url, bundle_max_batches=8)
    with make_agent(config) as agent:
        ids = _spooled(agent, 9)
        while agent.send_one() is not None:
            pass
        assert agent.rejected_batches == 0 and agent.sent_batches == 9
    # refused bundle of 8; the oldest alone; then bundles of at most 4
    assert [len(r.batches) for r in daemon.received] == [8, 1, 4, 4]
    assert daemon.stored_ids() == ids


def test_bundle_retried_whole_when_the_daemon_is_unavailable(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    daemon.script = [Reply(503, headers={"Retry-After": "2"})]
    config = make_config(tmp_path, daemon.url)
    with make_agent(config) as agent:
        ids = _spooled(agent, 3)
        first = agent.send_one()
        assert first is not None and first.outcome is Outcome.RETRY and first.retry_after_s == 2
        assert len(agent.spool) == 3 and agent.retried_sends == 1  # type: ignore[arg-type]
        assert agent.send_one().outcome is Outcome.OK  # type: ignore[union-attr]
    assert daemon.stored_ids() == ids


def test_unexpected_answer_to_a_bundle_keeps_everything(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    daemon.script = [Reply(200, {"results": [{"status": "stored"}]})]  # one result for three lines
    config = make_config(tmp_path, daemon.url)
    with make_agent(config) as agent:
        _spooled(agent, 3)
        result = agent.send_one()
        assert result is not None and result.outcome is Outcome.RETRY
        assert "unexpected answer" in result.reason
        assert len(agent.spool) == 3 and agent.sent_batches == 0  # type: ignore[arg-type]


def test_push_every_sends_one_bundle_per_n_cycles(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    # bundles of at most 4 too: a sender that wakes late still sends 4 at a time
    config = make_config(tmp_path, daemon.url, push_every=4, bundle_max_batches=4)
    with run_until_sent(config, cycles=10, sent=8) as agent:
        time.sleep(0.2)  # the 2 left wait for 2 more cycles
        assert agent.sent_batches == 8 and len(agent.spool) == 2  # type: ignore[arg-type]
    # the 2 held went at shutdown, as one more bundle
    assert [len(r.batches) for r in daemon.received] == [4, 4, 2]
    assert all(r.bundle for r in daemon.received)
    seqs = [b["seq"] for r in daemon.received for b in r.batches]
    assert seqs == list(range(10))


def test_push_every_does_not_hold_back_a_retry(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    daemon.script = [Reply(503)]
    with run_until_sent(make_config(tmp_path, daemon.url, push_every=5), cycles=5, sent=5):
        pass
    # the bundle of 5 refused once (503), then sent again at once, not after 5 more cycles
    assert [(r.status, len(r.batches)) for r in daemon.received] == [(503, 5), (200, 5)]


def test_batches_held_by_push_every_go_out_at_shutdown(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    """A node shut down for maintenance does not keep its last minute until it is back."""
    config = make_config(tmp_path, daemon.url, push_every=6)
    agent = make_agent(config)
    agent.run(threading.Event(), max_cycles=3)
    time.sleep(0.1)
    assert agent.sent_batches == 0  # held: fewer than 6
    agent.close()
    assert agent.sent_batches == 3 and [len(r.batches) for r in daemon.received] == [3]


def test_held_batches_stay_spooled_when_the_daemon_is_down_at_shutdown(
    daemon: ScriptedDaemon, tmp_path: Path
) -> None:
    daemon.down()
    config = make_config(tmp_path, daemon.url, push_every=6)
    agent = make_agent(config)
    agent.run(threading.Event(), max_cycles=2)
    started = time.monotonic()
    agent.close()
    assert time.monotonic() - started < config.push_timeout_s + 1  # one try, not a wait for ever
    again = make_agent(config)  # the next start finds them
    try:
        assert len(again.spool) == 2  # type: ignore[arg-type]
    finally:
        again.close()


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_full_bundles_tried_again_an_hour_after_a_413(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    daemon.script = [Reply(413, {"detail": "body of 99999 bytes exceeds the limit"})]
    clock = _Clock()
    config = make_config(tmp_path, daemon.url, bundle_max_batches=8)
    with make_agent(config, clock=clock) as agent:
        ids = _spooled(agent, 9)
        agent.send_one()  # 413 for 8: the oldest alone, bundles of 4 from now on
        agent.send_one()
        clock.now += BUNDLE_RETRY_AFTER_S - 1
        ids += _spooled(agent, 8)
        agent.send_one()
        clock.now += 1  # an hour since the 413 (a proxy's limit raised meanwhile): 8 again
        while agent.send_one() is not None:
            pass
    assert [len(r.batches) for r in daemon.received] == [8, 1, 4, 4, 8]  # 4 + 4 before the hour
    assert daemon.stored_ids() == ids


def test_bundles_tried_again_an_hour_after_a_daemon_without_them(
    daemon: ScriptedDaemon, tmp_path: Path
) -> None:
    daemon.bundles = False
    clock = _Clock()
    config = make_config(tmp_path, daemon.url)
    with make_agent(config, clock=clock) as agent:
        ids = _spooled(agent, 2)
        agent.send_one()  # 404: the oldest alone, one per request from now on
        daemon.bundles = True  # the daemon is upgraded
        ids += _spooled(agent, 2)
        agent.send_one()
        clock.now += BUNDLE_RETRY_AFTER_S
        agent.send_one()
        assert agent.send_one() is None
    # (the first bundle goes as v2, 404, then as v1, 404: a daemon without bundles predates v2
    # too, so the agent's v2 batches go as v1 for a while, the retried bundle included)
    assert [(r.bundle, r.version, len(r.batches)) for r in daemon.received] == [
        (True, 2, 2),
        (True, 1, 2),
        (False, 1, 1),
        (False, 1, 1),
        (True, 1, 2),
    ]
    assert daemon.stored_ids() == ids
