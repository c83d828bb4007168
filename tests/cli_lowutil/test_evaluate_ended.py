"""A job that ended is classified once, at its end, from all of its minutes."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from gpuwatch.classify.runner import evaluate_ended
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.rollups import Rollup
from gpuwatch.sql.schema import slurm_jobs, verdicts
from tests.classify import corpus
from tests.cli_lowutil.conftest import built_cases


def test_ended_job_gets_a_whole_job_verdict_at_its_end(db_url):
    (idle,) = built_cases(("idle-all-4-h200",))
    engine = create_engine(db_url)
    try:
        migrate.upgrade(engine)
        corpus.load(engine, (idle,))
        Rollup(engine).roll(corpus.T0 - timedelta(minutes=1), idle.case.now + timedelta(minutes=1))
        end = idle.case.now
        with engine.begin() as conn:
            conn.execute(
                slurm_jobs.update()
                .where(slurm_jobs.c.job_id == idle.job_id)
                .values(state="CANCELLED", end_at=end)
            )
        assert evaluate_ended(engine, end - timedelta(hours=1), end - timedelta(seconds=1)) == {}  # not yet
        found = evaluate_ended(engine, end - timedelta(hours=1), end + timedelta(minutes=5))
        assert list(found) == [idle.job_id]
        with engine.connect() as conn:
            rows = conn.execute(sa.select(verdicts).where(verdicts.c.job_id == idle.job_id)).mappings().all()
        assert rows and {r["evaluated_at"] for r in rows} == {end}
        assert "idle_allocation" in {r["cause"] for r in rows if r["window_kind"] == "job"}
        # a second pass over the same window replaces, never duplicates
        evaluate_ended(engine, end - timedelta(hours=1), end + timedelta(minutes=5))
        with engine.connect() as conn:
            again = conn.execute(sa.select(sa.func.count()).select_from(verdicts)).scalar()
        assert again == len(rows)
    finally:
        engine.dispose()
