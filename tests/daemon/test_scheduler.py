"""The daemon's scheduled jobs: every one listed, and the once-per-cluster ones only on the leader."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from gpuwatch.clock import utcnow
from gpuwatch.config import load_settings
from gpuwatch.daemon.scheduler import build_scheduler
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.schema import gpu_minutes, rollup_state
from tests import factories


def test_jobs_and_leadership_between_two_replicas(pg_url):
    engines = [create_engine(pg_url) for _ in range(2)]
    migrate.upgrade(engines[0])
    settings = load_settings(None)
    schedulers = [build_scheduler(settings, BatchStore(e)) for e in engines]
    try:
        ids = {job.id for job in schedulers[0].get_jobs()}
        assert {"partitions", "rollup", "classify", "retention"} <= ids
        create_token(engines[0], "node001")
        with engines[0].connect() as conn:
            node_id = get_node(conn, "node001").id
        start = (utcnow() - timedelta(minutes=10)).replace(second=0, microsecond=0)
        BatchStore(engines[0]).store(node_id, factories.batch(start=start, cycles=3))

        # the second replica runs its rollup job first: it leads from then on ...
        schedulers[1].get_job("rollup").func()
        with engines[1].connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(gpu_minutes)).scalar() > 0
            conn.execute(sa.delete(gpu_minutes))
            conn.execute(sa.delete(rollup_state))  # so a leader would roll the same minutes again
            conn.commit()
        # ... so the first replica's jobs do nothing while it lives
        schedulers[0].get_job("rollup").func()
        schedulers[0].get_job("classify").func()
        with engines[0].connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(gpu_minutes)).scalar() == 0
        schedulers[1].get_job("rollup").func()  # the leader still does
        with engines[0].connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(gpu_minutes)).scalar() > 0
    finally:
        for s in schedulers:
            s.start(paused=True)
            s.shutdown(wait=False)  # the shutdown listener releases the lock
        for e in engines:
            e.dispose()
