"""GPU memory health (remapped rows, retired pages, their flags, PCIe replays) goes through the
daemon as the agent sent it, by wire v1 and v2 alike, on both databases: a value arrives as
the card reported it, and a field the card cannot report stays NULL, never 0."""

from __future__ import annotations

import uuid
from datetime import timedelta

from gpuwatch import wire
from gpuwatch.clock import utcnow
from gpuwatch.sql.gpu_readings import read_gpu_samples
from gpuwatch.sql.schema import PARTITIONED_TABLES
from gpuwatch.wire import v2 as wire_v2
from tests import factories
from tests.factories import MEMORY_HEALTH as HEALTH

#: GPU 0 an H200 with a remap pending, GPU 1 a V100 retiring pages, GPU 2 a K80 (none of both)
SENT = {
    0: (3, 1, True, False, None, None, None, 2**32 - 1),
    1: (None, None, None, None, 2, 1, True, 0),
    2: (None, None, None, None, None, None, None, 5),
}


def _batch() -> wire.Batch:
    start = utcnow() - timedelta(minutes=5)
    samples: list = []
    for cycle in range(2):
        ts = start + timedelta(seconds=10 * cycle)
        for index, values in SENT.items():
            samples.append(factories.gpu_sample(ts, index, **dict(zip(HEALTH, values, strict=True))))
        samples.extend(factories.host_samples(ts))
    return wire.Batch(node="node001", agent_version="test", samples=samples)


def _stored(engine) -> dict[int, set[tuple]]:
    with engine.connect() as conn:
        rows = read_gpu_samples(conn)
    out: dict[int, set[tuple]] = {}
    for row in rows:
        out.setdefault(row.gpu_index, set()).add(tuple(getattr(row, name) for name in HEALTH))
    return out


def test_memory_health_stored_and_read_back_by_v1_and_v2(bundle_api):
    client, tokens, engine, _ = bundle_api
    batch = _batch()
    headers = {"Authorization": f"Bearer {tokens['node001']}"}
    v1 = client.post("/api/v1/ingest/node001", content=batch.model_dump_json(), headers=headers)
    assert v1.status_code == 200, v1.text
    expected = {index: {values} for index, values in SENT.items()}
    assert _stored(engine) == expected
    with engine.begin() as conn:  # empty the tables, keep the nodes
        for table in PARTITIONED_TABLES:
            conn.execute(table.delete())
    renamed = batch.model_copy(update={"batch_id": uuid.uuid4()})
    v2 = client.post(
        "/api/v2/ingest/node001",
        content=wire_v2.encode(renamed, 2),
        headers={**headers, "Content-Type": "application/json"},
    )
    assert v2.status_code == 200, v2.text
    assert _stored(engine) == expected
