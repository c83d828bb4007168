"""Every view answers the same after the newest migrations are undone and done again with the
demo's rows in the tables, on both databases: the check a migration that converts stored data
is held to (the same jobs, causes, GPU-hours, utilization, report rows, job and node pages)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import sqlalchemy as sa

from gpuwatch.clock import utcnow
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.views import (
    GroupBy,
    JobFilters,
    LowUtilFilters,
    cluster_overview,
    job_view,
    jobs_query,
    low_util_jobs,
    node_summaries,
    report_period,
    usage_report,
)
from gpuwatch.views.node import node_view
from tests.demo_data import load_demo

#: undone to here, then done again: the migrations after it (job_gpus' source, job totals)
BACK_TO = "0019"


def _answers(engine: sa.Engine, now: Any, jobs: list[str], nodes: list[str]) -> dict[str, Any]:
    """What the surfaces show, as plain data (dataclasses as dicts)."""
    view = {job: job_view(engine, job, now) for job in jobs}
    overview = cluster_overview(engine, now)
    return {
        "low_util": [dataclasses.asdict(j) for j in low_util_jobs(engine, LowUtilFilters(), now=now)],
        "jobs": [dataclasses.asdict(j) for j in jobs_query(engine, JobFilters(), now=now)],
        "report": [
            dataclasses.asdict(r)
            for r in usage_report(engine, GroupBy.USER, *report_period(timedelta(days=1), now))
        ],
        "job_gpus": {job: [dataclasses.asdict(g) for g in v.gpus] for job, v in view.items() if v},
        "job_shown": {
            job: v.evaluation.shown.cause if v and v.evaluation and v.evaluation.shown else None
            for job, v in view.items()
        },
        "job_usage": {job: dataclasses.asdict(v.usage) if v and v.usage else None for job, v in view.items()},
        "nodes": [dataclasses.asdict(n) for n in node_summaries(engine, now=now)],
        "node_gpus": {n: [dataclasses.asdict(g) for g in node_view(engine, n, now).gpus] for n in nodes},
        "overview": (overview.gpus_reporting, overview.gpus_busy, overview.gpus_wasted, len(overview.cells)),
    }


def test_views_answer_the_same_after_the_newest_migrations_go_down_and_up(db_url) -> None:
    result = load_demo(db_url, cycles=30)
    engine = create_engine(db_url)
    try:
        now = utcnow()
        jobs = sorted(result.expected)
        nodes = [n.name for n in node_summaries(engine, now=now)]
        before = _answers(engine, now, jobs, nodes)
        assert before["low_util"] and before["report"] and before["job_gpus"], "the demo's answers are there"
        migrate.downgrade(engine, BACK_TO)
        assert migrate.current_revision(engine) == BACK_TO
        migrate.upgrade(engine)
        assert migrate.is_up_to_date(engine)
        assert _answers(engine, now, jobs, nodes) == before
    finally:
        engine.dispose()
