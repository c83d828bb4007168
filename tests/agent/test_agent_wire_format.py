"""Agent: which wire format it writes, where each spooled batch goes, and what it does for a
daemon that does not take v2 yet."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from gpuwatch.agent import Outcome
from gpuwatch.agent.push import V1_FALLBACK_S, Pusher
from gpuwatch.wire import v2 as wire_v2
from tests.agent.fakes import ScriptedDaemon
from tests.agent.fakes import agent_config as make_config
from tests.agent.test_agent_runner import make_agent
from tests.factories import batch as make_batch


def _drain(agent) -> None:
    while agent.send_one() is not None:
        pass


def test_agent_writes_and_sends_v2_by_default(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, daemon.url)
    assert config.wire_format == 2
    with make_agent(config) as agent:
        sent = agent.cycle()
        [spooled] = agent.spool.peek_oldest_many(1, 10**6)  # type: ignore[union-attr]
        assert wire_v2.version_of(spooled.data) == 2
        _drain(agent)
    [request] = daemon.received
    assert request.path == f"/api/v2/ingest/{config.node}"
    assert sent is not None and wire_v2.decode(request.body).samples == [
        s for kind in wire_v2.COLUMNS for s in sent.samples if s.kind == kind
    ]


def test_wire_format_1_goes_to_the_v1_endpoint(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, daemon.url, wire_format=1)
    with make_agent(config) as agent:
        agent.cycle()
        _drain(agent)
    [request] = daemon.received
    assert request.path.startswith("/api/v1/ingest/") and "samples" in request.batch


def test_a_spool_of_both_formats_goes_in_order_one_format_per_bundle(
    daemon: ScriptedDaemon, tmp_path: Path
) -> None:
    """After an upgrade the spool holds v1 batches (the old agent's), then v2 ones."""
    old = make_config(tmp_path, daemon.url, wire_format=1)
    with make_agent(old) as agent:
        ids = [str(agent.cycle().batch_id) for _ in range(3)]  # type: ignore[union-attr]
    new = make_config(tmp_path, daemon.url, wire_format=2, merge_backlog=False)
    with make_agent(new) as agent:
        ids += [str(agent.cycle().batch_id) for _ in range(2)]  # type: ignore[union-attr]
        _drain(agent)
    assert [(r.version, len(r.batches)) for r in daemon.received] == [(1, 3), (2, 2)]
    assert daemon.stored_ids() == ids


def test_a_daemon_without_v2_gets_v1_until_the_fallback_expires(
    daemon: ScriptedDaemon, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    pusher = Pusher(daemon.url, "node01", "token", 5.0, clock=lambda: now[0])
    daemon.v2 = False
    first, second = make_batch(seq=0), make_batch(seq=1)
    try:
        result = pusher.send(wire_v2.encode(first, 2))
        assert result.outcome is Outcome.OK and pusher.downgraded == 1
        # the warning names both causes of a 404 (a wrong URL 404s at v1 too, logged as an error)
        (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert "older than v2" in warning and "agent.daemon_url" in warning
        # the 404 from v2, then the same batch as v1: nothing lost, nothing waits for a retry
        assert [(r.version, r.status) for r in daemon.received] == [(2, 404), (1, 200)]
        assert json.loads(daemon.received[1].body)["batch_id"] == str(first.batch_id)
        assert (
            wire_v2.decode(daemon.received[1].body).samples
            == wire_v2.decode(wire_v2.encode(first, 2)).samples
        )
        bundle = pusher.send_bundle([wire_v2.encode(second, 2), wire_v2.encode(first, 2)])
        assert bundle.items is not None and [i.outcome for i in bundle.items] == [Outcome.OK, Outcome.OK]
        assert daemon.received[2].path.endswith("/api/v1/ingest/node01/bundle")  # v1 at once
        now[0] = V1_FALLBACK_S + 1  # the daemon may have been upgraded meanwhile
        daemon.v2 = True
        assert pusher.send(wire_v2.encode(second, 2)).outcome is Outcome.OK
        assert daemon.received[-1].version == 2 and pusher.downgraded == 3
    finally:
        pusher.close()


def test_a_bundle_never_mixes_formats(daemon: ScriptedDaemon) -> None:
    pusher = Pusher(daemon.url, "node01", "token", 5.0)
    batch = make_batch()
    try:
        with pytest.raises(ValueError, match="one wire format"):
            pusher.send_bundle([wire_v2.encode(batch, 1), wire_v2.encode(batch, 2)])
        assert daemon.received == []
    finally:
        pusher.close()
