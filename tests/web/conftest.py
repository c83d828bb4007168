"""Demo data (a job of every cause) loaded through the real pipeline, for the web tests."""

from __future__ import annotations

import pytest

from gpuwatch.config import load_settings
from tests.demo_data import load_demo


@pytest.fixture
def demo(db_url, engine):  # type: ignore[no-untyped-def]
    """(settings, engine, DemoResult) with the demo's twelve jobs stored and classified."""
    result = load_demo(db_url)
    return load_settings(database={"url": db_url}), engine, result
