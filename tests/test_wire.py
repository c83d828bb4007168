"""Wire format: round trip, strictness, and docs generated from the code stay current."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from pydantic import ValidationError

from gpuwatch import wire
from gpuwatch.wire import v2 as wire_v2
from tests import factories

DOCS = Path(__file__).resolve().parents[1] / "docs"


def test_round_trip_keeps_every_value():
    batch = factories.batch()
    again = wire.Batch.model_validate_json(batch.model_dump_json())
    assert again == batch
    assert {s.kind for s in again.samples} == set(wire.SAMPLE_KINDS)


def test_timestamps_must_be_aware_and_keep_their_instant():
    naive = datetime(2026, 12, 1, 12, 0, 0)
    with pytest.raises(ValidationError, match="timezone"):
        wire.CpuSample(ts=naive, cores=1, busy_ratio=0, user_ratio=0, system_ratio=0, iowait_ratio=0)
    plus2 = wire.Batch.model_validate_json(
        '{"node": "n1", "agent_version": "t", "samples": [{"kind": "cpu", "ts": "2026-12-01T14:00:00+02:00",'
        ' "cores": 1, "busy_ratio": 0, "user_ratio": 0, "system_ratio": 0, "iowait_ratio": 0}]}'
    )
    assert plus2.samples[0].ts == datetime(2026, 12, 1, 12, 0, 0, tzinfo=timezone.utc)


def test_ratios_are_bounded_and_unknown_fields_refused():
    ts = factories.T0
    with pytest.raises(ValidationError):
        wire.GpuSample(ts=ts, gpu_index=0, util_gpu_ratio=1.5)
    with pytest.raises(ValidationError):
        wire.GpuSample(ts=ts, gpu_index=0, util_gpu_percent=50)


def test_schema_version_is_checked():
    doc = json.loads(factories.batch().model_dump_json())
    doc["schema_version"] = 2
    with pytest.raises(ValidationError, match="schema_version"):
        wire.Batch.model_validate(doc)


def test_committed_json_schema_and_field_reference_are_current():
    assert json.loads((DOCS / "wire-schema-v1.json").read_text()) == wire.json_schema(), (
        "regenerate: gpuwatch wire-schema > docs/wire-schema-v1.json"
    )
    assert json.loads((DOCS / "wire-schema-v2.json").read_text()) == wire_v2.json_schema(), (
        "regenerate: gpuwatch wire-schema --format-version 2 > docs/wire-schema-v2.json"
    )
    assert (DOCS / "wire-fields.md").read_text().strip() == wire.fields_markdown().strip(), (
        "regenerate: gpuwatch wire-schema --markdown > docs/wire-fields.md"
    )


def test_json_schema_validates_a_real_batch():
    import jsonschema

    jsonschema.validate(json.loads(factories.batch().model_dump_json()), wire.json_schema())
