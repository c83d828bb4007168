"""Merging spooled v2 batches into one multi-cycle batch: the same samples, nothing more."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from gpuwatch import wire
from gpuwatch.agent import merge
from gpuwatch.wire import v2 as wire_v2
from tests import factories


def _cycle(seq: int, gpus: int = 2, **gpu_fields) -> wire.Batch:
    """One agent cycle; ``gpu_fields`` override every GPU sample's fields."""
    batch = factories.batch(cycles=1, gpus=gpus, start=factories.T0 + timedelta(seconds=10 * seq), seq=seq)
    samples = [s.model_copy(update=gpu_fields) if s.kind == "gpu" else s for s in batch.samples]
    return batch.model_copy(update={"samples": samples})


def _parsed(*batches: wire.Batch) -> list:
    return merge.parse([wire_v2.encode(b, 2) for b in batches])


def _by_kind(samples: list) -> dict[str, list]:
    return {kind: [s for s in samples if s.kind == kind] for kind in wire.SAMPLE_KINDS}


def test_merged_batch_holds_every_sample_of_its_constituents_in_order():
    cycles = [_cycle(seq) for seq in range(3)]
    body = merge.encode(merge.merge(_parsed(*cycles)))
    back = wire_v2.decode(body)  # what the daemon parses: a valid v2 batch
    assert _by_kind(back.samples) == _by_kind([s for c in cycles for s in c.samples])
    assert len(back.samples) == sum(len(c.samples) for c in cycles)


def test_envelope_is_the_last_cycles_with_an_id_made_from_the_constituents():
    cycles = [_cycle(seq) for seq in range(3)]
    merged = merge.merge(_parsed(*cycles))
    assert merged.seq == 2 and merged.created_at == cycles[-1].created_at
    assert merged.node == cycles[0].node and merged.agent_version == cycles[0].agent_version
    ids = [str(c.batch_id) for c in cycles]
    assert merged.batch_id == merge.merged_id(ids)  # the same backlog: the same id, again
    assert merge.merge(_parsed(*cycles)).batch_id == merged.batch_id
    assert merge.merged_id(ids[::-1]) != merged.batch_id and merge.merged_id(ids[:2]) != merged.batch_id
    assert merged.batch_id.version == 5


def test_a_column_some_constituents_left_out_gets_their_defaults():
    # the first cycle's GPUs have GPM (sm_occupancy) and no state; the second's are lost, no GPM
    with_gpm = _cycle(0, sm_occupancy_ratio=0.25)
    lost = _cycle(1, state="lost", sm_active_ratio=None, tensor_active_ratio=None)
    first, second = _parsed(with_gpm, lost)
    assert first.gpu.sm_occupancy_ratio is not None and second.gpu.sm_occupancy_ratio is None
    assert first.gpu.state is None and second.gpu.state is not None  # "ok" is the default: left out
    merged = merge.merge([first, second])
    assert merged.gpu.sm_occupancy_ratio == [0.25, 0.25, None, None]
    assert [str(s) for s in merged.gpu.column("state")] == ["ok", "ok", "lost", "lost"]
    assert merged.gpu.fp64_active_ratio is None  # every constituent left it out: still left out
    assert "fp64_active_ratio" not in json.loads(merge.encode(merged))["gpu"]
    back = wire_v2.decode(merge.encode(merged))
    assert _by_kind(back.samples)["gpu"] == _by_kind([*with_gpm.samples, *lost.samples])["gpu"]


def test_processes_stay_with_their_gpu_samples():
    quiet = _cycle(0, processes=None)
    busy = _cycle(1, processes=[wire.GpuProcess(pid=7, job_id="77"), wire.GpuProcess(pid=8)])
    also = _cycle(2)  # factories: one process each, with memory
    merged = merge.merge(_parsed(quiet, busy, also))
    procs = merged.gpu.processes
    assert procs.sample == [2, 2, 3, 3, 4, 5]  # rows 0-1 (quiet) have none
    assert procs.pid == [7, 8, 7, 8, 4242, 4243]
    assert procs.used_memory_bytes == [None] * 4 + [39 * 2**30] * 2
    back = _by_kind(wire_v2.decode(merge.encode(merged)).samples)["gpu"]
    assert [s.processes for s in back] == [
        s.processes for c in (quiet, busy, also) for s in c.samples if s.kind == "gpu"
    ]


def test_kinds_only_some_constituents_have_are_merged_too():
    gpu_only = _cycle(0).model_copy(update={"samples": [s for s in _cycle(0).samples if s.kind == "gpu"]})
    host_only = _cycle(1).model_copy(update={"samples": [s for s in _cycle(1).samples if s.kind != "gpu"]})
    back = wire_v2.decode(merge.encode(merge.merge(_parsed(gpu_only, host_only))))
    assert _by_kind(back.samples) == _by_kind([*gpu_only.samples, *host_only.samples])


def test_mergeable_prefix_stops_at_another_node_agent_version_or_the_sample_limit(monkeypatch):
    cycles = [_cycle(seq) for seq in range(4)]
    assert merge.mergeable_prefix(_parsed(*cycles)) == 4
    upgraded = cycles[2].model_copy(update={"agent_version": "test2"})
    assert merge.mergeable_prefix(_parsed(cycles[0], cycles[1], upgraded, cycles[3])) == 2
    other = cycles[1].model_copy(update={"node": "node002"})
    assert merge.mergeable_prefix(_parsed(cycles[0], other)) == 1
    per_cycle, parsed = len(cycles[0].samples), _parsed(*cycles)
    monkeypatch.setattr(wire, "MAX_SAMPLES_PER_BATCH", per_cycle * 3)
    assert merge.mergeable_prefix(parsed) == 3
    monkeypatch.setattr(wire, "MAX_SAMPLES_PER_BATCH", per_cycle - 1)
    assert merge.mergeable_prefix(parsed) == 1  # one batch always goes (alone)
    assert merge.mergeable_prefix([]) == 0


def test_only_valid_v2_batches_are_parsed():
    with pytest.raises(ValueError):
        merge.parse([wire_v2.encode(_cycle(0), 1)])  # v1
    with pytest.raises(ValueError):
        merge.parse([b'{"schema_version":2,"batch_id":'])  # torn
    with pytest.raises(ValueError):
        merge.merge([])
