"""Agent: a spool backlog of v2 batches goes as ONE merged batch (``agent.merge_backlog``);
a merged batch the daemon refuses goes again as a bundle, so only a bad batch is rejected."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from gpuwatch.agent import Outcome, merge
from gpuwatch.wire import v2 as wire_v2
from tests.agent.fakes import Reply, ScriptedDaemon
from tests.agent.fakes import agent_config as make_config
from tests.agent.test_agent_runner import make_agent, run_until_sent


def _spool(agent, n: int) -> list:
    """``n`` cycles spooled and never sent; the batches as made."""
    return [agent.cycle() for _ in range(n)]


def _drain(agent) -> list[Outcome]:
    outcomes = []
    while (result := agent.send_one()) is not None:
        outcomes.append(result.outcome)
    return outcomes


def test_backlog_goes_as_one_batch_with_every_sample(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, daemon.url)
    with make_agent(config) as agent:
        made = _spool(agent, 10)
        assert _drain(agent) == [Outcome.OK]
        assert len(agent.spool) == 0  # type: ignore[arg-type]
        assert agent.sent_batches == 10 and agent.merged_sends == 1 and agent.bundles_sent == 0
    (request,) = daemon.received
    assert not request.bundle and request.version == 2
    (sent,) = request.decoded
    assert sent.batch_id == merge.merged_id([str(b.batch_id) for b in made])
    assert sent.seq == made[-1].seq
    expected = [s for b in made for s in b.samples]
    assert sorted(sent.samples, key=lambda s: (s.kind, s.ts)) == sorted(
        expected, key=lambda s: (s.kind, s.ts)
    )


def test_merged_batches_respect_the_bundle_limits(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    config = make_config(tmp_path, daemon.url, bundle_max_batches=4)
    with make_agent(config) as agent:
        made = _spool(agent, 10)
        _drain(agent)
        assert agent.merged_sends == 3 and agent.sent_batches == 10
    assert [len(r.decoded[0].samples) for r in daemon.received] == [
        sum(len(b.samples) for b in made[i : i + 4]) for i in (0, 4, 8)
    ]
    # the last two are merged too (a single batch would go as it is, with its own id)
    assert daemon.received[2].decoded[0].batch_id == merge.merged_id([str(b.batch_id) for b in made[8:]])
    assert not any(r.bundle for r in daemon.received)


def test_a_lone_batch_is_not_merged(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    with make_agent(make_config(tmp_path, daemon.url)) as agent:
        (made,) = _spool(agent, 1)
        _drain(agent)
        assert agent.merged_sends == 0
    assert daemon.stored_ids() == [str(made.batch_id)]


def test_a_retried_merged_batch_keeps_its_id(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    """A lost answer or a 503: the batch goes again as the same batch (which the daemon stores
    once), not regrouped with the cycles spooled since; those go in the next one."""
    daemon.script = [Reply(503, headers={"Retry-After": "1"})]
    with make_agent(make_config(tmp_path, daemon.url)) as agent:
        made = _spool(agent, 5)
        first = agent.send_one()
        assert first is not None and first.outcome is Outcome.RETRY and first.retry_after_s == 1
        assert len(agent.spool) == 5 and agent.sent_batches == 0  # type: ignore[arg-type]
        later = _spool(agent, 3)  # sampling goes on while the sender backs off
        assert _drain(agent) == [Outcome.OK, Outcome.OK] and agent.sent_batches == 8
    assert [r.status for r in daemon.received] == [503, 200, 200]
    ids = [r.batch["batch_id"] for r in daemon.received]
    assert ids[0] == ids[1] == str(merge.merged_id([str(b.batch_id) for b in made]))
    assert ids[2] == str(merge.merged_id([str(b.batch_id) for b in later]))


def test_a_merged_batch_whose_answer_was_lost_goes_again_as_the_same_batch(
    daemon: ScriptedDaemon, tmp_path: Path
) -> None:
    """A timeout: the daemon may have stored it. The same batch again is answered duplicate."""
    daemon.script = [Reply(200, {"status": "stored", "samples": 0}, delay_s=1.0)]
    with make_agent(make_config(tmp_path, daemon.url, push_timeout_s=0.3)) as agent:
        made = _spool(agent, 3)
        first = agent.send_one()
        assert first is not None and first.outcome is Outcome.RETRY and first.maybe_stored
        _spool(agent, 2)
        assert _drain(agent) == [Outcome.OK, Outcome.OK] and agent.sent_batches == 5
    ids = [r.batch["batch_id"] for r in daemon.received]
    assert ids[0] == ids[1] == str(merge.merged_id([str(b.batch_id) for b in made]))
    assert daemon.received[1].answer["status"] == "duplicate"  # type: ignore[index]


def test_a_maybe_stored_merged_batch_stays_the_same_batch_through_an_outage(
    daemon: ScriptedDaemon, tmp_path: Path
) -> None:
    """A timeout (maybe stored), then the daemon is down (connection refused): the window stays
    pinned until a definitive answer. Regrouped, it would go under a new id, its samples would
    be deduplicated by key but its process readings stored again as another pack."""
    daemon.script = [Reply(200, {"status": "stored", "samples": 0}, delay_s=1.0)]
    with make_agent(make_config(tmp_path, daemon.url, push_timeout_s=0.3)) as agent:
        made = _spool(agent, 3)
        first = agent.send_one()
        assert first is not None and first.outcome is Outcome.RETRY and first.maybe_stored
        daemon.down()
        refused = agent.send_one()
        assert refused is not None and refused.outcome is Outcome.RETRY and not refused.maybe_stored
        later = _spool(agent, 2)
        daemon.up()
        assert _drain(agent) == [Outcome.OK, Outcome.OK] and agent.sent_batches == 5
    ids = [r.batch["batch_id"] for r in daemon.received]
    assert ids[0] == ids[1] == str(merge.merged_id([str(b.batch_id) for b in made]))
    assert daemon.received[1].answer["status"] == "duplicate"  # type: ignore[index]
    assert ids[2] == str(merge.merged_id([str(b.batch_id) for b in later]))


def test_a_merged_batch_that_never_reached_the_daemon_is_regrouped(
    daemon: ScriptedDaemon, tmp_path: Path
) -> None:
    """Connection refused: nothing can have been stored, so the backlog goes as one batch."""
    daemon.down()
    with make_agent(make_config(tmp_path, daemon.url)) as agent:
        made = _spool(agent, 3)
        first = agent.send_one()
        assert first is not None and first.outcome is Outcome.RETRY and not first.maybe_stored
        made += _spool(agent, 2)
        daemon.up()
        assert _drain(agent) == [Outcome.OK] and agent.sent_batches == 5
    (request,) = daemon.received
    assert request.batch["batch_id"] == str(merge.merged_id([str(b.batch_id) for b in made]))


def test_a_refused_merged_batch_goes_again_as_a_bundle_and_only_the_bad_batch_is_rejected(
    daemon: ScriptedDaemon, tmp_path: Path
) -> None:
    with make_agent(make_config(tmp_path, daemon.url)) as agent:
        made = _spool(agent, 6)
        ids = [str(b.batch_id) for b in made]
        bad = "samples.3.gpu.util_gpu_ratio: less than or equal to 1"
        daemon.script = [Reply(422, {"detail": bad})]  # the merged batch
        daemon.refuse = {ids[3]: (422, bad)}  # its bad constituent, as a bundle line
        result = agent.send_one()
        assert result is not None and result.outcome is Outcome.OK
        assert agent.sent_batches == 5 and agent.rejected_batches == 1 and agent.merged_sends == 0
        [(path, reason)] = agent.spool.rejected()  # type: ignore[union-attr]
        assert json.loads(path.read_bytes())["batch_id"] == ids[3] and "util_gpu_ratio" in reason
        # later cycles are merged again
        later = _spool(agent, 3)
        assert _drain(agent) == [Outcome.OK] and agent.merged_sends == 1
    assert [(r.bundle, r.status) for r in daemon.received] == [(False, 422), (True, 200), (False, 200)]
    assert daemon.stored_ids() == [i for i in ids if i != ids[3]] + [
        str(merge.merged_id([str(b.batch_id) for b in later]))
    ]


def test_merged_without_the_bundle_endpoint_and_alone_after_a_refusal(
    daemon: ScriptedDaemon, tmp_path: Path
) -> None:
    """A daemon from before bundles (and v2) still takes merged batches, as v1 (a batch is a
    batch); if it refuses one, the constituents go one per request."""
    daemon.bundles = daemon.v2 = False
    with make_agent(make_config(tmp_path, daemon.url)) as agent:
        made = _spool(agent, 3)
        daemon.script = [Reply(413, {"detail": "body exceeds the limit"})]
        outcomes = _drain(agent)
        assert outcomes == [Outcome.OK] * 3 and agent.sent_batches == 3 and agent.merged_sends == 0
        more = _spool(agent, 2)
        assert _drain(agent) == [Outcome.OK] and agent.merged_sends == 1
    # the scripted 413; the bundle's 404 at v2 and at v1 (no v2, no bundles: an old daemon);
    # then each batch alone, and the next backlog merged, as v1
    assert [(r.version, r.bundle, r.status) for r in daemon.received] == [
        (2, False, 413),
        (2, True, 404),
        (1, True, 404),
    ] + [(1, False, 200)] * 4
    assert daemon.stored_ids() == [str(b.batch_id) for b in made] + [
        str(merge.merged_id([str(b.batch_id) for b in more]))
    ]


def test_v1_batches_go_in_a_bundle_and_the_v2_ones_after_them_merged(
    daemon: ScriptedDaemon, tmp_path: Path
) -> None:
    """After an upgrade the spool holds the old agent's v1 batches, then v2 ones."""
    with make_agent(make_config(tmp_path, daemon.url, wire_format=1)) as agent:
        old = _spool(agent, 3)
    with make_agent(make_config(tmp_path, daemon.url)) as agent:
        new = _spool(agent, 2)
        _drain(agent)
        assert agent.merged_sends == 1 and agent.bundles_sent == 1
    assert [(r.version, r.bundle, len(r.batches)) for r in daemon.received] == [(1, True, 3), (2, False, 1)]
    assert daemon.stored_ids() == [str(b.batch_id) for b in old] + [
        str(merge.merged_id([str(b.batch_id) for b in new]))
    ]


def test_merged_batch_goes_as_v1_to_a_daemon_without_v2(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    daemon.v2 = False
    with make_agent(make_config(tmp_path, daemon.url)) as agent:
        made = _spool(agent, 4)
        assert _drain(agent) == [Outcome.OK] and agent.merged_sends == 1
    assert [(r.version, r.status) for r in daemon.received] == [(2, 404), (1, 200)]
    (sent,) = daemon.received[1].decoded
    assert sent.batch_id == merge.merged_id([str(b.batch_id) for b in made])
    assert len(sent.samples) == sum(len(b.samples) for b in made)


def test_merging_can_be_turned_off(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    with make_agent(make_config(tmp_path, daemon.url, merge_backlog=False)) as agent:
        made = _spool(agent, 3)
        _drain(agent)
        assert agent.merged_sends == 0 and agent.bundles_sent == 1
    assert daemon.stored_ids() == [str(b.batch_id) for b in made]


def test_an_unreadable_spool_file_is_sent_in_a_bundle_for_the_daemon_to_refuse(
    daemon: ScriptedDaemon, tmp_path: Path
) -> None:
    with make_agent(make_config(tmp_path, daemon.url)) as agent:
        made = _spool(agent, 3)
        # a batch file whose content is no longer a valid batch (e.g. edited by hand)
        victim = next(p for p in agent.spool.dir.glob("*.json") if str(made[1].batch_id) in p.name)  # type: ignore[union-attr]
        victim.write_bytes(wire_v2.encode(made[1], 2).replace(b'"seq":1', b'"seq":-1'))
        daemon.refuse = {str(made[1].batch_id): (422, "seq: greater than or equal to 0")}
        _drain(agent)
        assert agent.merged_sends == 0 and agent.rejected_batches == 1 and agent.sent_batches == 2
    assert daemon.received[0].bundle


def test_push_every_sends_n_cycles_as_one_merged_batch(daemon: ScriptedDaemon, tmp_path: Path) -> None:
    """A large cluster's steady state: one request of N cycles, one batch, and what is held at
    shutdown goes merged too."""
    config = make_config(tmp_path, daemon.url, push_every=4, bundle_max_batches=4)
    with run_until_sent(config, cycles=10, sent=8) as agent:
        assert agent.merged_sends == 2 and len(agent.spool) == 2  # type: ignore[arg-type]
    assert [(r.bundle, len(r.decoded), r.decoded[0].seq) for r in daemon.received] == [
        (False, 1, 3),
        (False, 1, 7),
        (False, 1, 9),
    ]
    stamps = [s.ts for r in daemon.received for s in r.decoded[0].samples if s.kind == "agent"]
    assert len(stamps) == 10 and stamps == sorted(stamps)  # every cycle once, in order


def test_settle_leaves_what_push_every_holds_and_drain_sends_it(
    daemon: ScriptedDaemon, tmp_path: Path
) -> None:
    """``settle`` (a virtual-clock driver's wait) sends what is due and no more; ``drain`` sends
    the held cycles at once, merged, and holding back resumes after it."""
    config = make_config(tmp_path, daemon.url, push_every=4)
    with run_until_sent(config, cycles=6, sent=4) as agent:
        assert agent.settle(5) and len(agent.spool) == 2  # type: ignore[arg-type]
        assert agent.drain(5) and agent.sent_batches == 6
        agent.run(threading.Event(), max_cycles=3)
        assert agent.settle(5) and len(agent.spool) == 3  # type: ignore[arg-type]
        assert agent.sent_batches == 6
    # four due, two drained, three held until the close
    assert [r.decoded[0].seq for r in daemon.received] == [3, 5, 8]


def test_the_default_config_holds_cycles_for_one_merged_push() -> None:
    """A large cluster's steady state by default: docs/scaling.md's figures are of this value."""
    from gpuwatch.config.settings import AgentConfig

    defaults = AgentConfig.model_fields
    assert defaults["push_every"].default == 18 and defaults["merge_backlog"].default is True
    assert defaults["push_every"].default * defaults["interval_s"].default == 180.0
