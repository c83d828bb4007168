"""Bundles: an agent's backlog in one request, each line answered as a single batch would be."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import sqlalchemy as sa

from gpuwatch.clock import utcnow
from gpuwatch.daemon.store.batch_store import count_rows
from gpuwatch.sql.schema import ingested_batches
from tests import factories, refusals
from tests.daemon.test_ingest_api import _future, _out_of_range, _stored, _with


def _batch(minutes_ago: int, node: str = "node001", seq: int = 0) -> bytes:
    batch = factories.batch(node=node, start=utcnow() - timedelta(minutes=minutes_ago), seq=seq)
    return batch.model_dump_json().encode()


def _bundle(client, node, token, lines: list[bytes]):
    headers = {"Content-Type": "application/x-ndjson"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return client.post(f"/api/v1/ingest/{node}/bundle", content=b"\n".join(lines), headers=headers)


def _ids(engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(sa.select(ingested_batches.c.batch_id)).scalars())


def test_each_line_answered_alone_and_the_good_ones_stored_together(bundle_api):
    client, tokens, engine, app = bundle_api
    token = tokens["node001"]
    before = _batch(60)
    assert (
        client.post(
            "/api/v1/ingest/node001", content=before, headers={"Authorization": f"Bearer {token}"}
        ).json()["status"]
        == "stored"
    )
    good = [_batch(m) for m in (50, 40, 30)]
    lines = [
        good[0],
        before,  # stored before: a duplicate
        _out_of_range(_batch(20)),
        good[1],
        _with(_batch(10), node="node002"),  # another node's batch in node001's bundle
        _batch(5)[:-9],  # cut off: not JSON
        _future(_batch(1)),
        good[2],
    ]
    groups = app.state.writer.groups
    response = _bundle(client, "node001", token, lines)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["status"] for r in results] == [
        "stored", "duplicate", "refused", "stored", "refused", "refused", "refused", "stored",
    ]  # fmt: skip
    assert [r.get("code") for r in results] == [None, None, 422, None, 403, 400, 422, None]
    assert "own samples" in results[4]["detail"] and "ahead of the daemon" in results[6]["detail"]
    assert [r["batch_id"] for r in results if r["status"] == "stored"] == [
        json.loads(b)["batch_id"] for b in good
    ]
    assert response.json()["samples"] == 3 * 20
    assert app.state.writer.groups == groups + 1  # the bundle's batches went in one transaction
    assert _ids(engine) == {json.loads(b)["batch_id"] for b in [before, *good]}
    again = _bundle(client, "node001", token, good)
    assert [r["status"] for r in again.json()["results"]] == ["duplicate"] * 3
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar() == 4


def test_a_bundle_stores_the_same_rows_as_its_batches_one_by_one(bundle_api, engine):
    client, tokens, _, _ = bundle_api
    lines = [_batch(m) for m in (40, 30, 20)]
    assert _bundle(client, "node001", tokens["node001"], lines).status_code == 200
    with engine.connect() as conn:
        bundled = count_rows(conn)
    for line in lines:  # the same batch ids, one per request: every one a duplicate, no new rows
        response = client.post(
            "/api/v1/ingest/node001", content=line, headers={"Authorization": f"Bearer {tokens['node001']}"}
        )
        assert response.json()["status"] == "duplicate"
    with engine.connect() as conn:
        assert count_rows(conn) == bundled
    assert bundled["gpu_samples"] == 3 * 4


REFUSED = [
    # (id, node in URL, which token, lines, status, words)
    ("no-token", "node001", None, lambda: [_batch(5)], 401, "missing bearer token"),
    ("token-of-other-node", "node002", "node001", lambda: [_batch(5, "node002")], 403, "belongs to node"),
    ("unknown-node", "ghost", "node001", lambda: [_batch(5, "ghost")], 403, "not registered"),
    ("empty", "node001", "node001", lambda: [b"", b"  "], 400, "empty bundle"),
    ("too-many", "node001", "node001", lambda: [_batch(m) for m in range(1, 10)], 413, "limit of 8 batches"),
    ("too-big", "node001", "node001", lambda: [_with(_batch(5), agent_version="x" * 270_000)], 413, "limit"),
]


@pytest.mark.parametrize(
    ("case", "node", "who", "lines", "status", "words"), REFUSED, ids=[c[0] for c in REFUSED]
)
def test_whole_bundle_refused_and_nothing_stored(bundle_api, case, node, who, lines, status, words):
    client, tokens, engine, _ = bundle_api
    token = tokens.get(who, who) if who else None
    response = _bundle(client, node, token, lines())
    assert response.status_code == status, response.text
    assert words in response.json()["detail"]
    assert _stored(engine) == 0


def test_openapi_describes_the_bundle(bundle_api):
    client, _, _, _ = bundle_api
    spec = client.get("/openapi.json").json()
    body = spec["paths"]["/api/v1/ingest/{node}/bundle"]["post"]["requestBody"]
    assert "application/x-ndjson" in body["content"]


def test_the_same_batch_twice_in_one_bundle_is_stored_once(bundle_api):
    client, tokens, engine, _ = bundle_api
    line = _batch(30)
    response = _bundle(client, "node001", tokens["node001"], [line, _batch(20), line])
    assert [r["status"] for r in response.json()["results"]] == ["stored", "stored", "duplicate"]
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(ingested_batches)).scalar() == 2
        assert count_rows(conn)["gpu_samples"] == 2 * 4


def test_a_batch_the_database_refuses_is_refused_alone_with_the_reason(bundle_api):
    """Answered 422 (the agent moves it to rejected/), not 500 (the agent retried it forever)."""
    client, tokens, engine, _ = bundle_api
    refusals.refuse_seq(engine, 666)
    auth = {"Authorization": f"Bearer {tokens['node001']}"}
    poison = _batch(25, seq=666)
    lines = [_batch(30, seq=1), poison, _batch(20, seq=3)]
    for _ in range(2):  # and again: stored lines are duplicates, the poison one refused again
        response = _bundle(client, "node001", tokens["node001"], lines)
        assert response.status_code == 200, response.text
        results = response.json()["results"]
        assert [r.get("code") for r in results] == [None, 422, None]
        assert results[1]["status"] == "refused" and "poison batch seq 666" in results[1]["detail"]
        assert results[1]["batch_id"] == json.loads(poison)["batch_id"]
    assert [r["status"] for r in results] == ["duplicate", "refused", "duplicate"]
    single = client.post("/api/v1/ingest/node001", content=poison, headers=auth)
    assert single.status_code == 422 and "the database refused this batch" in single.json()["detail"]
    assert _ids(engine) == {json.loads(lines[0])["batch_id"], json.loads(lines[2])["batch_id"]}
