"""Wire format v2 (columns): the same samples as v1, validated as strictly."""

from __future__ import annotations

import json
from datetime import timedelta, timezone

import pytest
from pydantic import ValidationError

from gpuwatch import wire
from gpuwatch.wire import v1 as wire_v1
from gpuwatch.wire import v2 as wire_v2
from gpuwatch.wire.v2 import ColumnarBatch
from tests import factories


def _mixed_batch() -> wire.Batch:
    """Every kind, processes on some GPU samples only, a zone other than UTC, agent errors."""
    batch = factories.batch(cycles=3, gpus=3)
    samples = list(batch.samples)
    samples[0] = samples[0].model_copy(update={"processes": None, "state": "lost", "xid_errors": [79]})
    east = factories.T0.astimezone(timezone(timedelta(hours=2)))
    samples.append(factories.gpu_sample(east, 7, processes=[wire.GpuProcess(pid=1), wire.GpuProcess(pid=2)]))
    samples.append(
        wire.AgentSample(ts=factories.T0, collector_errors={"nic": "boom"}, dropped_batches_total=3)
    )
    return batch.model_copy(update={"samples": samples})


def _v2_json(batch: wire.Batch) -> bytes:
    return wire_v2.encode(batch, 2)


def _same_batch(got: wire.Batch, sent: wire.Batch) -> bool:
    """Same envelope and, kind by kind, the same samples in the same order (v2 groups the
    samples by kind, so a v1 batch's interleaving of kinds is not kept)."""

    def by_kind(batch: wire.Batch) -> dict[str, list]:
        return {kind: [s for s in batch.samples if s.kind == kind] for kind in wire.SAMPLE_KINDS}

    envelope = {"samples"}
    return got.model_dump(exclude=envelope) == sent.model_dump(exclude=envelope) and by_kind(got) == by_kind(
        sent
    )


def test_round_trip_holds_exactly_the_v1_samples():
    batch = _mixed_batch()
    body = _v2_json(batch)
    assert body.startswith(b'{"schema_version":2')
    back = wire_v2.decode(body)
    assert _same_batch(back, batch)  # every field of every sample
    assert wire_v2.sample_count(ColumnarBatch.model_validate_json(body)) == len(batch.samples)


def test_a_third_of_v1_bytes_for_an_agent_cycle():
    batch = factories.batch(cycles=1, gpus=8)
    assert len(_v2_json(batch)) * 2 < len(batch.model_dump_json())


def test_columns_equal_to_their_default_are_left_out_and_read_back_as_the_default():
    batch = factories.batch(cycles=2, gpus=2)
    doc = json.loads(_v2_json(batch))
    assert "sm_occupancy_ratio" not in doc["gpu"]  # None everywhere: not sent
    assert "state" not in doc["gpu"]  # "ok" everywhere
    assert doc["gpu"]["tensor_active_ratio"] == [0.0] * 4  # a zero is data, not a default
    parsed = ColumnarBatch.model_validate_json(json.dumps(doc))
    assert parsed.gpu.column("state") == ["ok"] * 4
    assert parsed.gpu.column("sm_occupancy_ratio") == [None] * 4


def _gpu_doc(**columns) -> dict:
    ts = [factories.T0.isoformat()] * 2
    return {"node": "n1", "agent_version": "t", "gpu": {"ts": ts, "gpu_index": [0, 1], **columns}}


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({"util_gpu_ratio": [0.5]}, "column 'util_gpu_ratio' has 1 values; ts has 2"),
        ({"util_gpu_ratio": [0.5, 1.5]}, "less than or equal to 1"),  # v1's bound, per element
        ({"uuid": ["x" * 97, None]}, "at most 96 characters"),
        ({"state": ["ok", "melted"]}, "'ok', 'lost' or 'error'"),
        ({"power_watts": [1.0, float("inf")]}, "finite number"),
        ({"processes": {"sample": [0, 2], "pid": [1, 2]}}, "refers to sample 2; there are 2"),
        ({"processes": {"sample": [0], "pid": [1, 2]}}, "processes column 'pid' has 2 values"),
        ({"processes": {"sample": [0], "pid": [1], "job_id": ["bad id"]}}, "pattern"),
        ({"colour": ["red", "blue"]}, "Extra inputs are not permitted"),
    ],
)
def test_invalid_columns_are_refused_with_the_reason(columns, message):
    with pytest.raises(ValidationError) as err:
        ColumnarBatch.model_validate_json(json.dumps(_gpu_doc(**columns)))
    assert message in str(err.value)


def test_required_v1_fields_are_required_columns():
    doc = _gpu_doc()
    del doc["gpu"]["gpu_index"]
    with pytest.raises(ValidationError, match="gpu_index"):
        ColumnarBatch.model_validate(doc)
    assert ColumnarBatch.model_validate(_gpu_doc()).gpu.column("util_gpu_ratio") == [None, None]


def test_stamps_need_a_zone():
    doc = _gpu_doc()
    doc["gpu"]["ts"] = ["2026-12-01T10:00:00", "2026-12-01T10:00:10"]
    with pytest.raises(ValidationError, match="timezone"):
        ColumnarBatch.model_validate(doc)


def test_samples_of_one_stamp_share_one_datetime_and_errors_keep_their_index():
    """A cycle's stamp is validated once from JSON and shared by its samples (the daemon then
    hashes one object per cycle); the values are the ones a sample-by-sample parse gives."""
    batch = factories.batch(cycles=3, gpus=4)
    parsed = ColumnarBatch.model_validate_json(wire_v2.encode(batch, 2))
    ts = parsed.gpu.ts
    assert ts == [s.ts for s in batch.samples if s.kind == "gpu"]
    assert ts[0] is ts[3] and ts[4] is ts[7] and ts[3] is not ts[4]
    assert len({id(t) for t in ts}) == 3
    doc = _gpu_doc(gpu_index=[0, 1, 2])
    stamp = doc["gpu"]["ts"][0]
    doc["gpu"]["ts"] = [stamp, stamp, "2026-12-01T10:00:10"]  # the third has no zone
    with pytest.raises(ValidationError) as refused:
        ColumnarBatch.model_validate_json(json.dumps(doc))
    assert [e["loc"] for e in refused.value.errors()] == [("gpu", "ts", 2)]


def test_at_most_max_samples_per_batch_over_all_kinds(monkeypatch):
    monkeypatch.setattr(wire_v1, "MAX_SAMPLES_PER_BATCH", 5)
    doc = _gpu_doc()
    doc["disk"] = {
        "ts": [factories.T0.isoformat()] * 4,
        **{f: [0.0] * 4 for f in ("read_bytes_per_s", "write_bytes_per_s", "reads_per_s", "writes_per_s")},
        "busy_ratio": [0.0] * 4,
        "device": ["sda"] * 4,
    }
    with pytest.raises(ValidationError, match="6 samples; a batch holds at most 5"):
        ColumnarBatch.model_validate(doc)
    doc["disk"] = {k: v[:3] for k, v in doc["disk"].items()}
    assert wire_v2.sample_count(ColumnarBatch.model_validate(doc)) == 5


def test_an_empty_batch_is_valid():
    empty = ColumnarBatch.model_validate({"node": "n1", "agent_version": "t"})
    assert wire_v2.sample_count(empty) == 0 and wire_v2.to_v1(empty).samples == []


def test_version_of_tells_the_formats_apart():
    batch = factories.batch(cycles=1, gpus=1)
    assert wire_v2.version_of(wire_v2.encode(batch, 1)) == 1
    assert wire_v2.version_of(wire_v2.encode(batch, 2)) == 2
    assert wire_v2.version_of(b'{"node": "n", "schema_version": 2}') == 2  # any key order, parsed
    assert wire_v2.version_of(b'{"node": "n"}') == 1  # v1 may leave it out
    assert wire_v2.version_of(b"not json") == 1  # the v1 endpoint says what is wrong


def test_downgraded_is_the_same_batch_in_v1():
    batch = _mixed_batch()
    v1 = wire_v2.downgraded(_v2_json(batch))
    assert wire_v2.version_of(v1) == 1 and _same_batch(wire.Batch.model_validate_json(v1), batch)
    assert wire_v2.downgraded(b'{"schema_version":2, "broken"') == b'{"schema_version":2, "broken"'


def test_columns_follow_the_v1_models():
    """A field added to a v1 sample model appears in v2 with the same element type."""
    for kind, model in wire.SAMPLE_KINDS.items():
        columns = wire_v2.COLUMNS[kind].model_fields
        assert set(columns) == set(model.model_fields) - {"kind"}, kind
    assert wire_v2.json_schema()["$id"] == "urn:gpuwatch:wire:batch:v2"


@pytest.mark.parametrize("stamp", [1_764_000_000, "1764000000", 1.5])
def test_a_unix_time_is_not_a_stamp(stamp) -> None:  # type: ignore[no-untyped-def]
    doc = _gpu_doc()
    doc["gpu"]["ts"] = [stamp, stamp]
    with pytest.raises(ValidationError, match="RFC 3339"):
        ColumnarBatch.model_validate_json(json.dumps(doc))
