"""The ingest API refuses every kind of bad request with the right status, storing nothing."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa
from fastapi.testclient import TestClient

from gpuwatch.clock import utcnow
from gpuwatch.config import load_settings
from gpuwatch.daemon.app import create_app
from gpuwatch.daemon.store.batch_store import count_rows
from gpuwatch.sql.nodes import create_token
from gpuwatch.sql.schema import ingested_batches
from tests import factories


@pytest.fixture
def api(engine):
    settings = load_settings(None, daemon={"max_batch_bytes": 64 * 1024})
    app = create_app(settings, engine)
    tokens = {n: create_token(engine, n) for n in ("node001", "node002")}
    with TestClient(app) as client:
        yield client, tokens, engine


def _stored(engine) -> int:
    with engine.connect() as conn:
        batches = conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar()
        return batches + sum(count_rows(conn).values())


def _post(client, node, token, body, **headers):
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    headers.setdefault("Content-Type", "application/json")
    return client.post(f"/api/v1/ingest/{node}", content=body, headers=headers)


def test_good_batch_stored_then_duplicate(api):
    client, tokens, engine = api
    body = factories.batch(start=utcnow() - timedelta(minutes=5)).model_dump_json()
    first = _post(client, "node001", tokens["node001"], body)
    assert first.status_code == 200, first.text
    assert first.json()["status"] == "stored" and first.json()["samples"] == 20
    again = _post(client, "node001", tokens["node001"], body)
    assert again.status_code == 200 and again.json()["status"] == "duplicate"
    with engine.connect() as conn:
        assert count_rows(conn)["gpu_samples"] == 4


def _valid_body(node="node001") -> bytes:
    return factories.batch(node=node, start=utcnow() - timedelta(minutes=5)).model_dump_json().encode()


def _with(body: bytes, **changes) -> bytes:
    doc = json.loads(body)
    doc.update(changes)
    return json.dumps(doc).encode()


def _wrong_type(body: bytes) -> bytes:
    doc = json.loads(body)
    doc["samples"][0]["util_gpu_ratio"] = "very busy"
    return json.dumps(doc).encode()


def _out_of_range(body: bytes) -> bytes:
    doc = json.loads(body)
    doc["samples"][0]["util_gpu_ratio"] = 1.7
    return json.dumps(doc).encode()


def _unknown_kind(body: bytes) -> bytes:
    doc = json.loads(body)
    doc["samples"][0]["kind"] = "fpga"
    return json.dumps(doc).encode()


def _stamped(ts: str | int):
    def transform(body: bytes) -> bytes:
        doc = json.loads(body)
        doc["samples"][1]["ts"] = ts
        return json.dumps(doc).encode()

    return transform


def _future(body: bytes) -> bytes:
    doc = json.loads(body)
    doc["samples"][0]["ts"] = (utcnow() + timedelta(hours=2)).isoformat()
    return json.dumps(doc).encode()


CASES = [
    # (id, node in URL, which token, body transform, status, words in the message)
    ("no-token", "node001", None, lambda b: b, 401, "missing bearer token"),
    ("wrong-token", "node001", "gw1_not-a-real-token", lambda b: b, 401, "invalid token"),
    ("unknown-node", "ghost", "node001", lambda b: _with(b, node="ghost"), 403, "not registered"),
    ("token-of-other-node", "node002", "node001", lambda b: _with(b, node="node002"), 403, "belongs to node"),
    ("writes-for-other-node", "node001", "node001", lambda b: _with(b, node="node002"), 403, "own samples"),
    ("malformed-json", "node001", "node001", lambda b: b[:-10], 400, "not valid JSON"),
    ("schema-version", "node001", "node001", lambda b: _with(b, schema_version=2), 400, "schema_version"),
    ("wrong-type", "node001", "node001", _wrong_type, 422, "invalid batch"),
    ("out-of-range", "node001", "node001", _out_of_range, 422, "invalid batch"),
    ("unknown-kind", "node001", "node001", _unknown_kind, 422, "invalid batch"),
    ("extra-field", "node001", "node001", lambda b: _with(b, colour="blue"), 422, "invalid batch"),
    ("future-clock", "node001", "node001", _future, 422, "ahead of the daemon"),
    ("clock-reset", "node001", "node001", _stamped("1970-01-01T00:00:10Z"), 422, "before 2000-01-01"),
    ("before-year-1", "node001", "node001", _stamped("0001-01-01T00:00:00+00:02"), 422, "before year 1"),
    ("unix-time-number", "node001", "node001", _stamped(1_764_000_000), 422, "not a number"),
    ("unix-time-text", "node001", "node001", _stamped("1764000000"), 422, "not RFC 3339"),
    (
        "oversize",
        "node001",
        "node001",
        lambda b: _with(b, agent_version="x" * 70_000),
        413,
        "exceeds the limit",
    ),
]


@pytest.mark.parametrize(
    ("case", "node", "who", "transform", "status", "words"), CASES, ids=[c[0] for c in CASES]
)
def test_bad_requests_refused_and_nothing_stored(api, case, node, who, transform, status, words):
    client, tokens, engine = api
    token = tokens.get(who, who) if who else None
    response = _post(client, node, token, transform(_valid_body()))
    assert response.status_code == status, response.text
    detail = response.json()["detail"]
    text = detail if isinstance(detail, str) else json.dumps(detail)
    assert words in text
    assert _stored(engine) == 0


def test_validation_errors_name_the_field(api):
    client, tokens, _ = api
    response = _post(client, "node001", tokens["node001"], _wrong_type(_valid_body()))
    locs = [e["loc"] for e in response.json()["detail"]["errors"]]
    assert any(loc.startswith("samples.0.gpu.util_gpu_ratio") for loc in locs), locs


def test_oversize_by_streaming_without_content_length(api):
    client, tokens, engine = api
    big = _with(_valid_body(), agent_version="x" * 70_000)

    def chunks():
        for i in range(0, len(big), 8192):
            yield big[i : i + 8192]

    response = client.post(
        "/api/v1/ingest/node001",
        content=chunks(),
        headers={"Authorization": f"Bearer {tokens['node001']}", "Content-Type": "application/json"},
    )
    assert response.status_code == 413
    assert _stored(engine) == 0


def test_health_and_openapi(api):
    client, _, _ = api
    assert client.get("/healthz").json()["status"] == "ok"
    spec = client.get("/openapi.json").json()
    assert "/api/v1/ingest/{node}" in spec["paths"]
    assert "GpuSample" in spec["components"]["schemas"]
    body = spec["paths"]["/api/v1/ingest/{node}"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Batch"}


def test_health_reports_database_outage():
    from gpuwatch.sql.engine import create_engine

    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")
    app = create_app(load_settings(None), engine)
    with TestClient(app) as client:
        response = client.get("/healthz")
    assert response.status_code == 503 and response.json()["status"] == "unavailable"


def test_health_asks_the_database_at_most_once_a_second():
    """Agents probe /healthz while they back off, a thousand of them: one check serves all."""
    from gpuwatch.daemon.app import DatabaseCheck

    class Counting(DatabaseCheck):
        asked = 0

        def _ask(self) -> str | None:
            self.asked += 1
            return None if self.asked == 1 else "OperationalError"

    now = [0.0]
    check = Counting(sa.create_engine("sqlite://"), ttl_s=1.0, clock=lambda: now[0])
    assert [check() for _ in range(100)] == [None] * 100 and check.asked == 1
    now[0] += 1.0
    assert check() == "OperationalError" and check() == "OperationalError" and check.asked == 2
