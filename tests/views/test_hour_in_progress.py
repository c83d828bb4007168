"""A range older than the minutes kept reads hourly rows up to its end: the hour the rollups have
not folded yet (the hour in progress) is folded from its minutes on the fly, so the node page,
the job page and a job's energy hold the same figures as when every minute was still kept, on
both databases."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from gpuwatch.sql.buckets import as_utc
from gpuwatch.sql.nodes import get_node
from gpuwatch.sql.resolution import tier_for
from gpuwatch.sql.retention import apply_retention
from gpuwatch.sql.rollups import Rollup
from gpuwatch.sql.schema import gpu_minutes
from gpuwatch.views import job_view
from gpuwatch.views.energy import gpus_energy
from gpuwatch.views.node import node_view
from tests.classify import corpus
from tests.figures import rounded

#: a 4-GPU job idle throughout, a 4-GPU job waiting on NVLink, a healthy training job
CASES = ("idle-all-4-h200", "comm-nvlink-4", "healthy-training-h200")
#: 08:00 to 10:30: two whole hours folded, the half hour in progress in the minutes only
MINUTES_RUN = 150
DAYS_14 = timedelta(days=14)


def _drop_minutes_before(engine: sa.Engine, cut: datetime) -> None:
    """Retention as it runs two weeks after ``cut``: the minutes before it go, the hours stay."""
    apply_retention(
        engine, raw_days=14, minute_days=14, rollup_days=400, batch_record_days=30, now=cut + DAYS_14
    )


def test_a_range_older_than_the_minutes_kept_reaches_its_hour_in_progress(engine) -> None:
    built = corpus.built_cases(CASES, MINUTES_RUN)
    corpus.load(engine, built)
    now = built[0].case.now  # 10:30:07
    Rollup(engine, lag=timedelta(0)).run_once(now=now + timedelta(minutes=1))  # hours folded to 10:00
    in_progress, end = now.replace(minute=0, second=0), now.replace(second=0)  # the views end at 10:30
    names = [name for b in built for name in b.batches]

    def answers() -> dict[str, Any]:
        nodes = {name: node_view(engine, name, now, hours=3) for name in names}
        jobs = {b.job_id: job_view(engine, b.job_id, now) for b in built}
        with engine.connect() as conn:
            energy = {
                job: gpus_energy(conn, [(g.node_id, g.gpu_index) for g in v.gpu_refs], job, v.start, v.end)
                for job, v in jobs.items()
                if v is not None
            }
        return {
            "node_gpus": {name: [dataclasses.asdict(g) for g in v.gpus] for name, v in nodes.items() if v},
            "job_gpus": {job: [dataclasses.asdict(g) for g in v.gpus] for job, v in jobs.items() if v},
            "energy": {job: dataclasses.asdict(e) for job, e in energy.items() if e},
        }

    before = answers()
    assert all(before["node_gpus"].values()) and len(before["energy"]) == len(built)
    # each GPU's mean utilization over the hour in progress, from its minutes
    with engine.connect() as conn:
        m = gpu_minutes.c
        hour_mean = {
            (name, int(index)): float(total) / float(n)
            for name in names
            for index, total, n in conn.execute(
                sa.select(m.gpu_index, sa.func.sum(m.util_gpu_ratio_sum), sa.func.sum(m.util_gpu_ratio_n))
                .where(m.node_id == get_node(conn, name).id, m.minute >= in_progress, m.minute < end)
                .group_by(m.gpu_index)
            )
            if n
        }
    assert hour_mean

    cut = in_progress - timedelta(hours=1)  # 09:00: the range (from 07:30) begins before it
    _drop_minutes_before(engine, cut)
    with engine.connect() as conn:
        kept = as_utc(conn, conn.execute(sa.select(sa.func.min(gpu_minutes.c.minute))).scalar())
        assert kept == cut
        assert tier_for(conn, now - timedelta(hours=3), now).hourly

    assert rounded(answers()) == rounded(before)
    for name in names:
        view = node_view(engine, name, now, hours=3)
        assert view is not None
        for index, points in view.util.items():
            last_at, last_util = points[-1]
            assert last_at == in_progress, (name, index)
            assert last_util == pytest.approx(hour_mean[(name, index)], rel=1e-9), (name, index)


def test_the_job_pages_cpu_chart_of_an_old_range_reaches_its_hour_in_progress(engine) -> None:
    """The job's CPU chart on the hourly tier reads ``job_hours``, and the hours not summed yet
    from ``job_minutes``: its last point is the hour in progress, the cores used over the cores
    held in that hour's minutes."""
    from gpuwatch.sql.schema import job_minutes

    built = corpus.built_cases(CASES, MINUTES_RUN)[1:2]  # the 4-GPU job over NVLink
    corpus.load(engine, built)
    now = built[0].case.now
    Rollup(engine, lag=timedelta(0)).run_once(now=now + timedelta(minutes=1))
    in_progress = now.replace(minute=0, second=0)
    job = built[0].job_id
    cut = in_progress - timedelta(hours=1)
    _drop_minutes_before(engine, cut)
    view = job_view(engine, job, now, charts=True)
    assert view is not None and view.charts is not None
    with engine.connect() as conn:
        assert tier_for(conn, view.charts.start, view.charts.end).hourly
        j = job_minutes.c  # the hour in progress is kept: retention never drops a minute not summed
        rows = conn.execute(
            sa.select(j.cpu_used_cores_sum, j.cpu_used_cores_n, j.cpu_allocated_cores).where(
                j.job_id == job, j.minute >= in_progress, j.minute < view.charts.end
            )
        ).all()
    counted = [(total / n, alloc) for total, n, alloc in rows if n and alloc]
    assert counted
    expected = sum(used for used, _ in counted) / sum(alloc for _, alloc in counted)
    points = view.charts.cpu["job CPU of allocated"]
    assert points[-1][0] == in_progress
    assert points[-1][1] == pytest.approx(expected, rel=1e-9)
    assert len(points) == 3  # 08:00, 09:00 (job_hours) and the hour in progress


def test_the_overviews_heat_map_of_an_old_span_reaches_its_hour_in_progress(engine) -> None:
    """A heat map reaching back before the minutes kept has a cell per node-hour, the last one
    the hour in progress: the node's GPUs' mean over that hour's minutes."""
    from gpuwatch.sql.schema import node_minutes
    from gpuwatch.views.overview import cluster_overview

    built = corpus.built_cases(CASES, MINUTES_RUN)
    corpus.load(engine, built)
    now = built[0].case.now
    Rollup(engine, lag=timedelta(0)).run_once(now=now + timedelta(minutes=1))
    in_progress, end = now.replace(minute=0, second=0), now.replace(second=0)
    with engine.connect() as conn:
        n = node_minutes.c
        hour_mean = {
            node_id: float(total) / float(count)
            for node_id, total, count in conn.execute(
                sa.select(n.node_id, sa.func.sum(n.gpu_util_ratio_sum), sa.func.sum(n.gpu_util_ratio_n))
                .where(n.minute >= in_progress, n.minute < end)
                .group_by(n.node_id)
            )
            if count
        }
        names = {get_node(conn, name).id: name for b in built for name in b.batches}
    assert set(hour_mean) == set(names)
    _drop_minutes_before(engine, in_progress - timedelta(hours=1))

    view = cluster_overview(engine, now, minutes=180)  # from 07:30, before the minutes kept (09:00)
    offset = int((in_progress - view.start).total_seconds() // 60)
    last = {view.rows[row]: util for (row, minute), util in view.cells.items() if minute == offset}
    assert last == {name: pytest.approx(hour_mean[node_id], rel=1e-9) for node_id, name in names.items()}
    assert max(minute for _, minute in view.cells) == offset
