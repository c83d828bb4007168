"""Fixtures for end-to-end tests: a real daemon process on each database."""

from __future__ import annotations

import pytest

from tests.daemon_process import DaemonProcess


@pytest.fixture
def daemon_process(db_url, tmp_path):
    from gpuwatch.sql import migrate
    from gpuwatch.sql.engine import create_engine

    engine = create_engine(db_url)
    migrate.upgrade(engine)
    daemon = DaemonProcess(db_url, tmp_path / "daemon.log")
    daemon.start()
    yield daemon, engine
    daemon.stop()
    engine.dispose()
