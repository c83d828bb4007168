"""The wire format v2 endpoints: the same checks and the same rows as v1."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa

from gpuwatch.clock import utcnow
from gpuwatch.daemon.store.batch_store import count_rows
from gpuwatch.sql.gpu_readings import read_gpu_samples
from gpuwatch.sql.process_packs import count_processes, read_processes
from gpuwatch.sql.readings import read_samples
from gpuwatch.sql.schema import HOST_SAMPLES, PARTITIONED_TABLES
from gpuwatch.wire import v2 as wire_v2
from tests import factories
from tests.daemon.test_ingest_api import _stored


def _v2(minutes_ago: float = 5, node: str = "node001", seq: int = 0) -> bytes:
    batch = factories.batch(node=node, start=utcnow() - timedelta(minutes=minutes_ago), seq=seq)
    return wire_v2.encode(batch, 2)


def _post(client, token, body: bytes, path: str = "/api/v2/ingest/node001"):
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    return client.post(path, content=body, headers=headers)


def _edit(body: bytes, change) -> bytes:
    doc = json.loads(body)
    change(doc)
    return json.dumps(doc).encode()


def test_v2_batch_stored_then_duplicate(bundle_api):
    client, tokens, engine, _ = bundle_api
    body = _v2()
    first = _post(client, tokens["node001"], body)
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "stored" and first.json()["samples"] == 20
    again = _post(client, tokens["node001"], body)
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    with engine.connect() as conn:
        counts = count_rows(conn)
        assert counts["gpu_samples"] == 4 and counts["cpu_samples"] == 2
        assert count_processes(conn) == 4


def _table_rows(engine) -> dict[str, list[tuple]]:
    """Every sample table's rows without node and order: what a batch stored."""
    out = {}
    with engine.connect() as conn:
        for spec in HOST_SAMPLES:
            out[spec.readings] = sorted((tuple(r)[1:] for r in read_samples(conn, spec.kind)), key=repr)
        out["gpu_samples"] = [tuple(r)[1:] for r in read_gpu_samples(conn)]
        far = utcnow() + timedelta(days=1)
        out["processes"] = [
            (p.ts, p.gpu_index, p.pid, p.used_memory_bytes, p.sm_util_ratio, p.job_id)
            for p in read_processes(conn, far - timedelta(days=3), far)
        ]
    return out


def test_v1_and_v2_of_one_batch_store_the_same_rows(bundle_api):
    client, tokens, engine, _ = bundle_api
    batch = factories.batch(start=utcnow() - timedelta(minutes=5))
    v1 = client.post(
        "/api/v1/ingest/node001",
        content=batch.model_dump_json(),
        headers={"Authorization": f"Bearer {tokens['node001']}"},
    )
    assert v1.status_code == 200
    after_v1 = _table_rows(engine)
    assert all(after_v1.values()), after_v1  # every kind and the processes were stored
    with engine.begin() as conn:  # empty the tables, keep the nodes
        for table in PARTITIONED_TABLES:
            conn.execute(table.delete())
    renamed = batch.model_copy(update={"batch_id": uuid.uuid4()})
    assert _post(client, tokens["node001"], wire_v2.encode(renamed, 2)).status_code == 200
    assert _table_rows(engine) == after_v1


CASES = [
    # (id, body transform, status, words in the message)
    ("v1-body", lambda b: factories.batch().model_dump_json().encode(), 400, "takes schema_version 2"),
    ("malformed", lambda b: b[:-10], 400, "not valid JSON"),
    ("short-column", lambda b: _edit(b, lambda d: d["gpu"]["util_gpu_ratio"].pop()), 422, "has 3 values"),
    (
        "out-of-range",
        lambda b: _edit(b, lambda d: d["gpu"]["util_gpu_ratio"].__setitem__(0, 1.7)),
        422,
        "gpu",
    ),
    ("unknown-kind", lambda b: _edit(b, lambda d: d.__setitem__("fpga", {"ts": []})), 422, "fpga"),
    ("other-node", lambda b: _edit(b, lambda d: d.__setitem__("node", "node002")), 403, "own samples"),
    (
        "future-clock",
        lambda b: _edit(
            b, lambda d: d["cpu"]["ts"].__setitem__(0, (utcnow() + timedelta(hours=2)).isoformat())
        ),
        422,
        "ahead of the daemon",
    ),
    (
        "before-year-1",
        lambda b: _edit(b, lambda d: d["memory"]["ts"].__setitem__(0, "0001-01-01T00:00:00+00:02")),
        422,
        "before year 1",
    ),
    (
        "bad-process-row",
        lambda b: _edit(b, lambda d: d["gpu"]["processes"]["sample"].__setitem__(0, 99)),
        422,
        "refers to sample 99",
    ),
]


@pytest.mark.parametrize(("case", "transform", "status", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_v2_requests_refused_and_nothing_stored(bundle_api, case, transform, status, words):
    client, tokens, engine, _ = bundle_api
    response = _post(client, tokens["node001"], transform(_v2()))
    assert response.status_code == status, response.text
    assert words in json.dumps(response.json()["detail"])
    assert _stored(engine) == 0


def test_v2_body_on_the_v1_endpoint_says_where_to_send_it(bundle_api):
    client, tokens, engine, _ = bundle_api
    response = _post(client, tokens["node001"], _v2(), path="/api/v1/ingest/node001")
    assert response.status_code == 400
    assert "v2 at /api/v2/ingest" in response.json()["detail"]
    assert _stored(engine) == 0


def test_v2_bundle_each_line_answered_alone(bundle_api):
    client, tokens, engine, _ = bundle_api
    good = [_v2(10, seq=1), _v2(9, seq=2)]
    bad = _edit(_v2(8), lambda d: d["gpu"]["util_gpu_ratio"].pop())
    response = client.post(
        "/api/v2/ingest/node001/bundle",
        content=b"\n".join([good[0], bad, good[1]]),
        headers={"Authorization": f"Bearer {tokens['node001']}", "Content-Type": "application/x-ndjson"},
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["status"] for r in results] == ["stored", "refused", "stored"]
    assert results[1]["code"] == 422
    with engine.connect() as conn:
        assert count_rows(conn)["gpu_samples"] == 8


def test_openapi_documents_both_formats(bundle_api):
    client, _, _, _ = bundle_api
    doc = client.get("/openapi.json").json()
    assert {"/api/v1/ingest/{node}", "/api/v2/ingest/{node}", "/api/v2/ingest/{node}/bundle"} <= set(
        doc["paths"]
    )
    schemas = doc["components"]["schemas"]
    assert "ColumnarBatch" in schemas and "Batch" in schemas and "GpuColumns" in schemas
    body = doc["paths"]["/api/v2/ingest/{node}"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/ColumnarBatch"}


def test_a_kind_with_no_samples_is_stored_as_nothing(bundle_api):
    """``"cpu": {"ts": [], ...}`` is valid v2 (fuzzing found SQLite answering 503 to it: an
    INSERT of no rows is a syntax error there, and SQLite's errors carry no SQLSTATE)."""
    client, tokens, engine, _ = bundle_api
    empty = {f: [] for f in ("ts", "cores", "busy_ratio", "user_ratio", "system_ratio", "iowait_ratio")}
    body = _edit(_v2(), lambda d: d.__setitem__("cpu", empty))
    response = _post(client, tokens["node001"], body)
    assert response.status_code == 200, response.text
    assert response.json()["samples"] == 18  # 20 less the two cpu samples
    with engine.connect() as conn:
        counts = count_rows(conn)
    assert counts["cpu_samples"] == 0 and counts["gpu_samples"] == 4


@pytest.mark.parametrize("version", [1, 2])
def test_nul_characters_are_removed_and_the_cycle_kept(bundle_api, version):
    """PostgreSQL cannot store U+0000 (SQLite can): on both the strings arrive without it and
    every sample of the batch is stored."""
    client, tokens, engine, _ = bundle_api
    batch = factories.batch(cycles=1, start=utcnow() - timedelta(minutes=5))
    gpu = batch.samples[0].model_copy(
        update={
            "name": "NVIDIA\x00 H200\x00\x00",
            "uuid": "GPU-\x000001",
            "throttle_reasons": ["sw_power\x00_cap"],
        }
    )
    samples = [gpu, *batch.samples[1:]]
    at = next(i for i, s in enumerate(samples) if s.kind == "agent")
    samples[at] = samples[at].model_copy(
        update={"collector_errors": {"nv\x00ml": "NVMLError_Unknown\x00garbage"}}
    )
    batch = batch.model_copy(update={"samples": samples})
    body = wire_v2.encode(batch, version)
    assert b"\\u0000" in body
    response = _post(client, tokens["node001"], body, path=f"/api/v{version}/ingest/node001")
    assert response.status_code == 200, response.text
    assert response.json()["samples"] == len(batch.samples)
    with engine.connect() as conn:
        (row,) = [r for r in read_gpu_samples(conn) if r.gpu_index == 0 and r.ts == gpu.ts]
        errors = [r.collector_errors for r in read_samples(conn, "agent")]
        from gpuwatch.sql.schema import gpus

        name, uuid_text = conn.execute(sa.select(gpus.c.name, gpus.c.uuid).where(gpus.c.gpu_index == 0)).one()
    assert row.throttle_reasons == ["sw_power_cap"]
    assert (name, uuid_text) == ("NVIDIA H200", "GPU-0001")
    assert {"nvml": "NVMLError_Unknowngarbage"} in errors
