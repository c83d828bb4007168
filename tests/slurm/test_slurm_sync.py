"""SlurmSync with recorded 22.05 answers (no cluster needed), its errors, and its scheduler jobs."""

from __future__ import annotations

import logging
import subprocess
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from gpuwatch.config import Settings, SlurmConfig
from gpuwatch.daemon.scheduler import build_scheduler
from gpuwatch.daemon.slurm_sync import MAX_LOOKBACK, SlurmSync
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.slurm.commands import SlurmClient
from gpuwatch.sql.schema import job_gpus, slurm_jobs

from .conftest import V2205

NOW = datetime(2026, 12, 2, 13, 34, 0, tzinfo=timezone.utc)


class FakeSlurm:
    """A runner for SlurmClient: answers per command name, records every call."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.answers = {
            "squeue": (0, (V2205 / "squeue.json").read_text(), ""),
            "sacct": (0, (V2205 / "sacct.json").read_text(), ""),
        }

    def __call__(self, argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
        self.calls.append(argv)
        code, out, err = self.answers[argv[0]]
        return subprocess.CompletedProcess(argv, code, out, err)


@pytest.fixture
def fake() -> FakeSlurm:
    return FakeSlurm()


@pytest.fixture
def sync(engine, fake) -> SlurmSync:
    return SlurmSync(engine, SlurmClient(runner=fake), SlurmConfig(enabled=True), now=lambda: NOW)


def states(engine) -> dict[str, str]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(slurm_jobs.c.job_id, slurm_jobs.c.state)).all())


def test_running_then_finished(sync, fake, engine, ids) -> None:
    result = sync.sync_running()
    assert result is not None and result.jobs == 30 and result.gpu_jobs_changed > 0
    assert fake.calls == [["squeue", "--json", "--all"]]
    assert states(engine)[ids["gpu2"]] == "RUNNING"
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(job_gpus)).scalar_one() > 0
    assert sync.sync_running().gpu_jobs_changed == 0  # steady: nothing rewritten

    asked = record_since(sync)
    finished = sync.sync_finished()
    assert finished is not None and finished.jobs == 8  # the recording's ended jobs 23..30
    assert fake.calls[-1][:4] == ["sacct", "--json", "-a", "-X"]
    assert asked == [NOW - timedelta(hours=1)]  # nothing stale: the configured lookback
    got = states(engine)
    assert (got[ids["gpu2"]], got[ids["gpu1"]], got[ids["cpu"]]) == ("CANCELLED", "FAILED", "COMPLETED")
    assert got[ids["pending"]] == "CANCELLED"


def test_sacct_running_jobs_are_left_to_squeue(sync, fake, engine) -> None:
    doc = (V2205 / "sacct.json").read_text().replace('"CANCELLED"', '"RUNNING"')
    fake.answers["sacct"] = (0, doc, "")
    sync.sync_finished()
    assert "CANCELLED" not in set(states(engine).values())
    assert "RUNNING" not in set(states(engine).values())  # those rows were not written at all


def record_since(sync: SlurmSync) -> list[datetime]:
    asked: list[datetime] = []
    real = sync.client.finished_jobs

    def finished_jobs(since, until=None):
        asked.append(since)
        return real(since, until)

    sync.client.finished_jobs = finished_jobs  # type: ignore[method-assign]
    return asked


def test_window_widens_for_rows_gone_from_squeue(sync, fake, engine) -> None:
    asked = record_since(sync)
    sync.sync_finished()  # before any squeue answer: nothing is known to be gone
    sync.sync_running()
    # the daemon was down: jobs that started 13:33:16 left squeue unseen; squeue now lists nobody
    fake.answers["squeue"] = fake.answers["sacct"] = (0, '{"meta": {}, "errors": [], "jobs": []}', "")
    sync._now = lambda: NOW + timedelta(hours=5)
    sync.sync_running()
    sync.sync_finished()
    sync._now = lambda: NOW + MAX_LOOKBACK * 3
    sync.sync_finished()
    oldest_start = datetime(2026, 12, 2, 13, 32, 16, tzinfo=timezone.utc)  # 13:33:16 - 1 min
    assert asked[0] == NOW - timedelta(hours=1)
    assert asked[1] <= oldest_start  # back before the oldest unfinished row's start
    assert asked[2] == NOW + MAX_LOOKBACK * 2  # bounded by MAX_LOOKBACK


def test_failures_logged_once_per_message_and_recovery(sync, fake, engine, caplog) -> None:
    caplog.set_level(logging.INFO, logger="gpuwatch.daemon.slurm_sync")
    fake.answers["squeue"] = (1, "", "slurm_load_jobs error: Unable to contact slurm controller")
    assert [sync.sync_running() for _ in range(3)] == [None, None, None]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "Unable to contact slurm controller" in warnings[0].getMessage()
    assert not warnings[0].exc_info  # expected trouble: no traceback
    fake.answers["squeue"] = (0, "<html>proxy error</html>", "")
    assert sync.sync_running() is None
    assert "SlurmParseError" in caplog.records[-1].getMessage()
    fake.answers["squeue"] = (0, (V2205 / "squeue.json").read_text(), "")
    assert sync.sync_running() is not None
    assert caplog.records[-1].getMessage() == "slurm sync_running works again"
    assert sync.failures == {}


def test_database_failure_does_not_raise(fake, caplog) -> None:
    broken = sa.create_engine("sqlite:///file:/nonexistent-dir/x.db?mode=ro&uri=true")
    try:
        sync = SlurmSync(broken, SlurmClient(runner=fake), SlurmConfig(enabled=True))
        assert sync.sync_running() is None
        assert "OperationalError" in sync.failures["sync_running"]
    finally:
        broken.dispose()


def test_unexpected_error_is_logged_with_traceback(sync, caplog, monkeypatch) -> None:
    monkeypatch.setattr(sync.client, "jobs", lambda: 1 / 0)
    assert sync.sync_running() is None
    assert caplog.records[-1].exc_info


def test_scheduler_adds_the_two_passes_only_when_enabled(engine) -> None:
    store = BatchStore(engine)
    off = build_scheduler(Settings(), store)
    assert off.get_job("slurm-running") is None
    settings = Settings().with_overrides(
        slurm={"enabled": True, "sync_interval_s": 15, "sacct_interval_s": 120, "command_prefix": ["env"]}
    )
    on = build_scheduler(settings, store)
    running, finished = on.get_job("slurm-running"), on.get_job("slurm-finished")
    assert running.trigger.interval == timedelta(seconds=15)
    assert finished.trigger.interval == timedelta(seconds=120)
    sync = running.func.__wrapped__.__self__  # the jobs run through the leader-only wrapper
    assert isinstance(sync, SlurmSync) and finished.func.__wrapped__.__self__ is sync
    assert sync.client.prefix == ["env"] and sync.engine is engine
