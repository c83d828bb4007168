"""Fixtures for the agent tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from tests.agent.fakes import ScriptedDaemon


@pytest.fixture
def daemon() -> Iterator[ScriptedDaemon]:
    server = ScriptedDaemon()
    try:
        yield server
    finally:
        server.down()


@pytest.fixture(autouse=True)
def _no_stray_threads() -> Iterator[None]:
    """Every test must stop the threads it starts."""
    before = set(threading.enumerate())
    yield
    deadline = threading.Event()
    for _ in range(100):
        stray = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        if not stray:
            return
        deadline.wait(0.02)
    pytest.fail(f"threads left running: {stray}")
