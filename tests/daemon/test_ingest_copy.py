"""``daemon.copy_min_rows``: the daemon's store loads large tables by COPY, over real HTTP."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gpuwatch.config import load_settings
from gpuwatch.daemon.app import create_app
from gpuwatch.daemon.store.batch_store import count_rows
from gpuwatch.sql.nodes import create_token
from gpuwatch.wire import v2 as wire_v2
from tests import factories


@pytest.mark.postgres
def test_a_multi_cycle_batch_by_copy_is_stored_once(pg_engine):
    settings = load_settings(None, daemon={"copy_min_rows": 16})
    app = create_app(settings, pg_engine)
    assert app.state.store.copy_min_rows == 16
    token = create_token(pg_engine, "node001")
    batch = factories.batch(cycles=6, gpus=8)  # 48 GPU rows: COPY; 6 of each host kind: unnest
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    with TestClient(app) as client:
        first = client.post("/api/v2/ingest/node001", content=wire_v2.encode(batch, 2), headers=headers)
        assert first.status_code == 200, first.text
        # the same samples under another batch id (an old spool copy): stored once, not refused
        again = batch.model_copy(update={"batch_id": factories.batch(cycles=0).batch_id})
        second = client.post("/api/v2/ingest/node001", content=wire_v2.encode(again, 2), headers=headers)
        assert second.status_code == 200, second.text
    assert app.state.store.conflict_retries == 1
    with pg_engine.connect() as conn:
        counts = count_rows(conn)
    assert counts["gpu_samples"] == 48
    assert counts["cpu_samples"] == 6
