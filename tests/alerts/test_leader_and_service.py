"""One leader among daemons (PostgreSQL advisory lock; SQLite always leads) and the
scheduler hook that adds the alert jobs."""

from __future__ import annotations

import time

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from gpuwatch.config import Settings
from gpuwatch.daemon.alert_jobs import register_alert_jobs
from gpuwatch.daemon.leader import LeaderLock
from gpuwatch.sql.engine import create_engine
from tests.alerts.conftest import make_config


@pytest.mark.postgres
def test_postgres_advisory_lock_has_one_holder(pg_url):
    a_engine, b_engine = create_engine(pg_url), create_engine(pg_url)
    a, b = LeaderLock(a_engine, 4242), LeaderLock(b_engine, 4242)
    try:
        assert a.is_leader() and a.is_leader()
        assert not b.is_leader()
        a.release()
        assert b.is_leader() and not a.is_leader()
        b_engine.dispose()  # b's daemon goes away: its dedicated connection too ...
        b._conn.close()  # (dispose leaves detached connections alone; a dying process closes them)
        b._conn = None
        # ... and the server releases the lock once that backend has exited, which happens
        # after close() returns: a takes it on one of its next tries, as a replica would.
        deadline = time.monotonic() + 10
        while not a.is_leader():
            assert time.monotonic() < deadline, "lock not released 10 s after its holder went away"
            time.sleep(0.05)
    finally:
        a.release()
        b.release()
        a_engine.dispose()
        b_engine.dispose()


def test_sqlite_always_leads(sqlite_url):
    engine = create_engine(sqlite_url)
    try:
        assert LeaderLock(engine, 1).is_leader() and LeaderLock(engine, 1).is_leader()
    finally:
        engine.dispose()


def test_register_alert_jobs(engine):
    scheduler = BackgroundScheduler(timezone="UTC")
    assert register_alert_jobs(scheduler, Settings(), engine) is None  # alerts off by default
    assert scheduler.get_jobs() == []
    service = register_alert_jobs(scheduler, Settings(alerts=make_config()), engine)
    assert service is not None
    assert sorted(j.id for j in scheduler.get_jobs()) == ["alerts-rules", "alerts-send"]
    for job in scheduler.get_jobs():
        job.func()  # one pass each, as the scheduler would run them
    scheduler.start()
    scheduler.shutdown(wait=True)
