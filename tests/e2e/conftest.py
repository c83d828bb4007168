"""Fixtures for end-to-end tests: a real daemon process on each database."""

from __future__ import annotations

import pytest

from tests.conftest import migrated_engine
from tests.daemon_process import DaemonProcess


@pytest.fixture
def daemon_process(db_url, tmp_path):
    with migrated_engine(db_url) as engine:
        daemon = DaemonProcess(db_url, tmp_path / "daemon.log")
        daemon.start()
        yield daemon, engine
        daemon.stop()
