"""Stored job totals (``job_totals``): the report gives the same answer with them as without, and
a row stops counting when what it was made from changes. On both databases."""

from __future__ import annotations

import dataclasses
import math
import random
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from gpuwatch.sql import job_hours
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.schema import UTIL_BINS as BINS
from gpuwatch.sql.schema import (
    gpu_minutes,
    job_gpus,
    job_minutes,
    job_totals,
    slurm_jobs,
    verdicts,
)
from gpuwatch.views import GroupBy, usage_report
from gpuwatch.views.job_totals import store_job_totals
from gpuwatch.views.report import Prices, weekly_history

T0 = datetime(2026, 11, 2, 0, 0, tzinfo=timezone.utc)
DAYS = 10
NODES, GPUS = ("t1", "t2"), 2
GIB = 2**30
CAUSES = ("idle_allocation", "input_bound", "small_work", "no_mixed_precision")


def _scenario(engine: sa.Engine, seed: int = 7) -> list[dict]:
    """Two nodes of two GPUs for ten days: jobs back to back (30 min to 20 h, some starting off
    the hour, some with billing, a time limit, a timeout), every minute measured, a recent
    verdict every two hours and a whole-job one at the end; the hours summed as the rollup does."""
    rnd = random.Random(seed)
    end_of_data = T0 + timedelta(days=DAYS)
    jobs, gpu_rows, host_rows, verdict_rows, gpu_map = [], [], [], [], []
    for n, node in enumerate(NODES):
        create_token(engine, node)
        with engine.connect() as conn:
            node_id = get_node(conn, node).id
        at, k = T0 - timedelta(hours=3), 0
        while at < end_of_data:
            length = timedelta(minutes=rnd.randrange(30, 20 * 60))
            end = at + length
            running = end >= end_of_data
            job_id, gpus = f"{node}-{k}", rnd.choice((1, 2))
            jobs.append(
                {
                    "job_id": job_id, "source": "test", "user_name": f"u{rnd.randrange(4)}",
                    "account": f"a{n}", "partition": "gpu",
                    "state": "RUNNING" if running else rnd.choice(("COMPLETED", "COMPLETED", "TIMEOUT")),
                    "start_at": at, "end_at": None if running else end, "gpus": gpus, "cpus": 8,
                    "time_limit_s": rnd.choice((None, 48 * 3600, int(length.total_seconds()) + 60)),
                    "tres": rnd.choice((None, {"billing": 4.0})), "first_seen_at": at, "updated_at": at,
                }
            )  # fmt: skip
            gpu_map += [{"job_id": job_id, "node": node, "gpu_index": g} for g in range(gpus)]
            util, mem = rnd.random(), rnd.randrange(1, 64) * GIB
            idle_second = gpus == 2 and rnd.random() < 0.4  # fewer GPUs would do
            minute = at.replace(second=0, microsecond=0)
            while minute < min(end, end_of_data):
                if minute >= T0:
                    for g in range(GPUS):
                        busy = 0.0 if g >= gpus or (g and idle_second) else util
                        gpu_rows.append(
                            {
                                # the six samples' histogram: all at 0 % (bin 0) or all in busy's bin
                                **{f"util_bin_{b}": 6 * (b == math.ceil(10 * busy)) for b in range(BINS)},
                                "node_id": node_id, "gpu_index": g, "minute": minute, "samples": 6,
                                "lost_samples": 0, "energy_joules": 24_000.0 + g,
                                "energy_power_samples": rnd.choice((0, 0, 6)),
                                "util_gpu_ratio_sum": 6 * busy,
                                "util_gpu_ratio_n": 6,
                            }
                        )  # fmt: skip
                    host_rows.append(
                        {
                            "node_id": node_id, "job_id": job_id, "minute": minute, "samples": 6,
                            "cpu_used_cores_sum": 6 * 8 * util, "cpu_used_cores_n": 6,
                            "cpu_allocated_cores": 8.0, "memory_used_bytes_max": mem,
                            "memory_limit_bytes": 64 * GIB,
                        }
                    )  # fmt: skip
                minute += timedelta(minutes=1)
            cause = rnd.choice(CAUSES)
            t = at + timedelta(hours=2)
            while t < min(end, end_of_data):
                verdict_rows.append(_verdict(job_id, cause, rnd.random() * gpus * 2, t, "recent"))
                t += timedelta(hours=2)
            if not running:
                whole = rnd.choice((*CAUSES, "healthy"))
                wasted = 0.0 if whole == "healthy" else rnd.random() * gpus * length.total_seconds() / 3600
                verdict_rows.append(_verdict(job_id, whole, wasted, end, "job"))
            at, k = end + timedelta(minutes=rnd.choice((0, 0, 7, 60))), k + 1
    with engine.begin() as conn:
        conn.execute(slurm_jobs.insert(), jobs)
        conn.execute(job_gpus.insert(), gpu_map)
        conn.execute(gpu_minutes.insert(), gpu_rows)
        conn.execute(job_minutes.insert(), host_rows)
        conn.execute(verdicts.insert(), verdict_rows)
        job_hours.advance(conn, end_of_data)
    if engine.dialect.name == "postgresql":  # statistics, as autovacuum keeps them: without, the
        # planner takes nested loops over the freshly filled minutes (seconds per job)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(sa.text("ANALYZE"))
    return jobs


def _verdict(job_id: str, cause: str, wasted: float, at: datetime, window: str) -> dict:
    return {
        "job_id": job_id, "evaluated_at": at, "window_kind": window, "window_start": at - timedelta(hours=2),
        "window_end": at, "cause": cause, "confidence": 0.9, "gpus": 1, "gpu_hours": 2.0,
        "gpu_hours_wasted": wasted, "summary": "s", "fix": "f", "evidence": {}, "rules_version": "t",
    }  # fmt: skip


PRICES = Prices(gpu_hour=2.0, billing_hour=0.5)
PERIODS = {
    "all, on the hour": (T0, T0 + timedelta(days=DAYS)),
    "all, off the hour": (T0 + timedelta(minutes=17), T0 + timedelta(days=DAYS, minutes=-43)),
    "three days inside": (T0 + timedelta(days=3), T0 + timedelta(days=6)),
    "three days, off the hour": (T0 + timedelta(days=3, minutes=31), T0 + timedelta(days=6, minutes=29)),
    "a week": (T0 + timedelta(days=2), T0 + timedelta(days=9)),
}


def _answers(engine: sa.Engine) -> dict:
    out: dict = {}
    for name, (start, end) in PERIODS.items():
        for by in (GroupBy.USER, GroupBy.ACCOUNT):
            out[name, by] = usage_report(engine, by, start, end, co2_kg_per_kwh=0.3, prices=PRICES)
        out[name, "u1"] = usage_report(engine, GroupBy.USER, start, end, prices=PRICES, group="u1")
    out["history"] = weekly_history(engine, GroupBy.USER, "u2", T0 + timedelta(days=DAYS), weeks=2)
    return out


#: figures of the whole run, stored with a job's totals only: no job has them without
WHOLE_RUN = ("jobs_advised_gpus", "jobs_advised_gpu_size", "saving_gpu_hours")


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        left = [dataclasses.asdict(r) for r in a[key]]
        right = [dataclasses.asdict(r) for r in b[key]]
        assert len(left) == len(right), key
        for x, y in zip(left, right, strict=True):
            assert x.keys() == y.keys()
            for field, value in x.items():
                if field in WHOLE_RUN:
                    continue
                if isinstance(value, float):
                    assert y[field] == pytest.approx(value, abs=2e-4), (key, field)
                else:
                    assert y[field] == value, (key, field)


def _store_all(engine: sa.Engine) -> int:
    stored = 0
    while n := store_job_totals(engine, batch=7):  # several batches
        stored += n
    return stored


def _count(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(sa.select(sa.func.count()).select_from(job_totals)).scalar_one()


def test_the_report_is_the_same_with_stored_totals_as_without(engine) -> None:  # type: ignore[no-untyped-def]
    jobs = _scenario(engine)
    before = _answers(engine)
    stored = _store_all(engine)
    with engine.connect() as conn:
        until = job_hours.summed_until(conn)
    # every ended job whose hours are all summed, the hour after its end too
    ready = [j for j in jobs if j["end_at"] is not None and j["end_at"] <= until - timedelta(hours=1)]
    assert stored == len(ready) > 0
    assert store_job_totals(engine) == 0  # all current: nothing to do
    with engine.connect() as conn:  # the stored rows are used: a job inside a period is covered
        wasted = conn.execute(sa.select(sa.func.sum(job_totals.c.gpu_hours_wasted))).scalar_one()
    assert wasted > 0
    after = _answers(engine)
    _same(before, after)
    _whole_run_figures_are_the_job_views(engine, after)
    # with rows whose figures are wrong, the answers change: the report reads them
    with engine.begin() as conn:
        conn.execute(job_totals.update().values(gpu_hours=job_totals.c.gpu_hours + 1.0))
    changed = _answers(engine)
    assert changed[PERIODS_ALL, GroupBy.USER] != before[PERIODS_ALL, GroupBy.USER]


PERIODS_ALL = "all, on the hour"


def _whole_run_figures_are_the_job_views(engine: sa.Engine, answers: dict) -> None:
    """Each user's GPU advice and estimated saving over the whole span: what ``gpuwatch job ID``
    advises for each of the user's jobs with totals that the span holds whole, summed."""
    from gpuwatch.views import job_view

    start, end = PERIODS[PERIODS_ALL]
    t = job_totals.c
    with engine.connect() as conn:
        stored = conn.execute(
            sa.select(slurm_jobs.c.job_id, slurm_jobs.c.user_name)
            .join(job_totals, t.job_id == slurm_jobs.c.job_id)
            .where(t.data_from >= start, t.data_to <= end)
        ).all()
    expected: dict[str, list] = {}
    for job_id, user in stored:
        view = job_view(engine, job_id, T0 + timedelta(days=DAYS + 1), columns=1)
        kinds = {a.kind for a in view.advice}
        e = expected.setdefault(user, [0, 0, None])
        e[0] += "gpus" in kinds
        e[1] += "gpu_size" in kinds
        if view.saving is not None:
            e[2] = (e[2] or 0.0) + view.saving.gpu_hours
    rows = {r.group: r for r in answers[PERIODS_ALL, GroupBy.USER]}
    assert sum(e[0] for e in expected.values()) > 0  # the scenario has jobs with an idle GPU
    assert sum(r.jobs_advised_gpus for r in rows.values()) < sum(r.jobs for r in rows.values())
    for user, (gpus, size, saving) in expected.items():
        row = rows[user]
        assert (row.jobs_advised_gpus, row.jobs_advised_gpu_size) == (gpus, size), user
        assert row.saving_gpu_hours == (None if saving is None else pytest.approx(saving, abs=2e-4))


def test_a_row_stops_counting_when_what_it_rests_on_changes(engine) -> None:  # type: ignore[no-untyped-def]
    jobs = _scenario(engine, seed=11)
    _store_all(engine)
    stored = _count(engine)
    job = next(j for j in jobs[3:] if j["state"] == "COMPLETED")  # COMPLETED: time advice counts
    job_id = job["job_id"]

    def has_row() -> bool:
        with engine.connect() as conn:
            return (
                conn.execute(sa.select(job_totals.c.job_id).where(job_totals.c.job_id == job_id)).first()
                is not None
            )

    assert has_row()
    # a new verdict of the job: the trigger deletes its row; the next pass makes it again
    at = job["end_at"] + timedelta(minutes=5)
    with engine.begin() as conn:
        conn.execute(verdicts.insert(), [_verdict(job_id, "idle_allocation", 50.0, at, "job")])
    assert not has_row() and _count(engine) == stored - 1
    fresh = _answers(engine)
    assert store_job_totals(engine) == 1 and has_row()
    _same(fresh, _answers(engine))
    # the same evaluation stored again (delete, then insert at the same time)
    with engine.begin() as conn:
        conn.execute(verdicts.delete().where(verdicts.c.job_id == job_id, verdicts.c.evaluated_at == at))
        conn.execute(verdicts.insert(), [_verdict(job_id, "input_bound", 1.0, at, "job")])
    assert not has_row()
    assert store_job_totals(engine) == 1
    # Slurm changes a fact the row rests on: the row is not current, the report reads the job
    # as if it had none, and the next pass replaces it
    with engine.begin() as conn:
        conn.execute(slurm_jobs.update().where(slurm_jobs.c.job_id == job_id).values(time_limit_s=3 * 86400))
    assert has_row()
    changed = _answers(engine)
    with engine.begin() as conn:
        conn.execute(job_totals.delete())
    _same(_answers(engine), changed)
    _store_all(engine)
    assert _count(engine) == stored
    with engine.connect() as conn:
        after = conn.execute(
            sa.select(job_totals.c.advised_time).where(job_totals.c.job_id == job_id)
        ).scalar()
    assert after == 1  # a three-day limit for a job of at most 20 hours
    _same(changed, _answers(engine))
    # an hour summed again (a node's late batch) deletes the rows of the jobs in it
    hour = job_hours.floor_hour(job["start_at"])  # the job has minutes in the hour it started
    assert has_row()
    with engine.begin() as conn:
        job_hours.sum_hours(conn, hour, hour + timedelta(hours=1))
    assert not has_row()
