"""Fixtures shared by the daemon's ingest tests."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from gpuwatch.config import load_settings
from gpuwatch.daemon.app import create_app
from gpuwatch.sql.nodes import create_token


@pytest.fixture
def bundle_api(engine):
    """(client, tokens, engine, app): a daemon app with room for bundles (256 KiB bodies, at
    most 8 batches per bundle), nodes node001 and node002 registered."""
    settings = load_settings(None, daemon={"max_batch_bytes": 256 * 1024, "max_bundle_batches": 8})
    app = create_app(settings, engine)
    tokens = {n: create_token(engine, n) for n in ("node001", "node002")}
    with TestClient(app) as client:
        yield client, tokens, engine, app
