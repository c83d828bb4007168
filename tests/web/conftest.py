"""Demo data (a job of every cause) loaded through the real pipeline, for the web tests."""

from __future__ import annotations

import pytest

from gpuwatch.cli.demo import run_demo
from gpuwatch.config import load_settings


def load_demo(db_url: str, cycles: int = 60):  # type: ignore[no-untyped-def]
    settings = load_settings(database={"url": db_url})
    return run_demo(settings, cycles=cycles, echo=lambda _line: None)


@pytest.fixture
def demo(db_url, engine):  # type: ignore[no-untyped-def]
    """(settings, engine, DemoResult) with the demo's twelve jobs stored and classified."""
    result = load_demo(db_url)
    return load_settings(database={"url": db_url}), engine, result
