"""A range older than the minutes kept is read from the hourly rollups and answers the same
means and totals the minutes gave before retention dropped them (node page, energy), on both
databases."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.resolution import tier_for
from gpuwatch.sql.retention import apply_retention
from gpuwatch.sql.rollups import Rollup, floor_minute
from gpuwatch.sql.schema import gpu_minutes, gpus
from gpuwatch.views import job_view, node_summaries
from gpuwatch.views.energy import gpus_energy
from gpuwatch.views.node import node_view
from gpuwatch.views.period import jobs_in_period
from tests.demo_data import load_demo
from tests.figures import rounded


def test_a_range_before_the_minutes_reads_the_hours_and_answers_the_same(db_url) -> None:
    result = load_demo(db_url, cycles=30)
    engine = create_engine(db_url)
    try:
        last = result.evaluated_at
        assert last is not None
        Rollup(engine).run_once(now=last + timedelta(hours=2))  # the demo's hour complete and folded
        at = floor_minute(last) + timedelta(minutes=5)
        start = at - timedelta(hours=24)
        names = [n.name for n in node_summaries(engine, now=at)]
        with engine.connect() as conn:
            held = [tuple(r) for r in conn.execute(sa.select(gpus.c.node_id, gpus.c.gpu_index)).all()]

        def answers() -> dict[str, Any]:
            with engine.connect() as conn:
                energy = gpus_energy(conn, held, "all", start, at)
            nodes = {
                name: [dataclasses.asdict(g) for g in node_view(engine, name, at).gpus] for name in names
            }
            views = {job: job_view(engine, job, at) for job in sorted(result.expected)}
            jobs = {job: [dataclasses.asdict(g) for g in v.gpus] for job, v in views.items() if v}
            job_energy = {job: dataclasses.asdict(v.energy) for job, v in views.items() if v and v.energy}
            whole = dataclasses.asdict(energy) if energy else None
            period = {job: dataclasses.asdict(p) for job, p in jobs_in_period(engine, start, at).items()}
            figures = {
                "nodes": nodes,
                "energy": whole,
                "jobs": jobs,
                "job_energy": job_energy,
                "period": period,
            }
            return rounded(figures)

        with engine.connect() as conn:
            assert not tier_for(conn, start, start + timedelta(hours=1)).hourly
        before = answers()
        assert before["energy"] and before["jobs"] and before["period"] and any(before["nodes"].values()), (
            "the minutes are there"
        )
        later = last + timedelta(days=20)
        apply_retention(engine, raw_days=14, minute_days=14, rollup_days=400, batch_record_days=30, now=later)
        with engine.connect() as conn:
            assert conn.execute(sa.select(sa.func.count()).select_from(gpu_minutes)).scalar() == 0
            assert tier_for(conn, start, start + timedelta(hours=1)).hourly
        assert answers() == before
    finally:
        engine.dispose()
