"""A job's GPU map replaced after its hours were summed: its ``job_hours`` are summed again from
the new map and its ``job_totals`` row goes, so the report reads what a database given the new map
from the start reads; a map replaced by the same GPUs leaves both alone. On both databases."""

from __future__ import annotations

import dataclasses
import math
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from gpuwatch.sql import job_hours
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.jobs import replace_job_gpus
from gpuwatch.sql.migrate import upgrade
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.schema import UTIL_BINS, gpu_minutes, job_totals, slurm_jobs, verdicts
from gpuwatch.sql.schema import job_hours as hours_table
from gpuwatch.views import GroupBy, usage_report
from gpuwatch.views.job_totals import store_job_totals

T0 = datetime(2026, 11, 2, 0, 0, tzinfo=timezone.utc)
NOW = T0 + timedelta(hours=7)
NODE = "n1"
#: each GPU's utilization and energy per minute: every GPU sums to different figures
UTIL = (0.9, 0.0, 0.4, 0.7)
#: job 7 moves from GPUs 0 and 1 to GPUs 1 and 2; job 9 holds GPU 3 throughout
OLD, NEW = {"7": {NODE: [0, 1]}, "9": {NODE: [3]}}, {"7": {NODE: [1, 2]}, "9": {NODE: [3]}}


def _fill(engine: sa.Engine, gpu_map: dict) -> None:
    """Four GPUs measured every minute for five hours; job 7 (two GPUs, 00:10 to 02:50, with a
    whole-job verdict) and job 9 (one GPU, all four hours), mapped by ``gpu_map``."""
    create_token(engine, NODE)
    with engine.connect() as conn:
        node_id = get_node(conn, NODE).id
    rows = [
        {
            **{f"util_bin_{b}": 6 * (b == math.ceil(10 * util)) for b in range(UTIL_BINS)},
            "node_id": node_id, "gpu_index": g, "minute": T0 + timedelta(minutes=m), "samples": 6,
            "lost_samples": 0, "energy_joules": 1000.0 * (g + 1), "energy_power_samples": g,
            "util_gpu_ratio_sum": 6 * util, "util_gpu_ratio_n": 6,
        }
        for g, util in enumerate(UTIL)
        for m in range(300)
    ]  # fmt: skip
    jobs = [
        {"job_id": "7", "start_at": T0 + timedelta(minutes=10), "end_at": T0 + timedelta(hours=2, minutes=50),
         "gpus": 2, "user_name": "alice"},
        {"job_id": "9", "start_at": T0, "end_at": T0 + timedelta(hours=4), "gpus": 1, "user_name": "bob"},
    ]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(gpu_minutes.insert(), rows)
        for job in jobs:
            conn.execute(
                slurm_jobs.insert().values(
                    **job, source="sacct", state="COMPLETED", account="a", partition="gpu",
                    cpus=8, first_seen_at=job["start_at"], updated_at=job["end_at"],
                )
            )  # fmt: skip
        assert replace_job_gpus(conn, gpu_map) == 2
        at = T0 + timedelta(hours=2, minutes=50)
        conn.execute(
            verdicts.insert().values(
                job_id="7", evaluated_at=at, window_kind="job", window_start=T0 + timedelta(minutes=10),
                window_end=at, cause="idle_allocation", confidence=0.9, gpus=2, gpu_hours=16 / 3,
                gpu_hours_wasted=8 / 3, summary="s", fix="f", evidence={}, rules_version="t",
            )
        )  # fmt: skip
        job_hours.advance(conn, T0 + timedelta(hours=6))  # hours summed up to 05:00


def _hours(engine: sa.Engine) -> list[dict]:
    with engine.connect() as conn:
        query = sa.select(hours_table).order_by(hours_table.c.job_id, hours_table.c.hour)
        return [dict(r) for r in conn.execute(query).mappings()]


def _totals(engine: sa.Engine) -> dict[str, dict]:
    with engine.connect() as conn:
        return {r["job_id"]: dict(r) for r in conn.execute(sa.select(job_totals)).mappings()}


def _report(engine: sa.Engine) -> list[dict]:
    rows = usage_report(engine, GroupBy.USER, T0 - timedelta(hours=1), T0 + timedelta(hours=6))
    return [dataclasses.asdict(r) for r in rows]


def _same(left: list[dict] | dict, right: list[dict] | dict) -> None:
    assert len(left) == len(right)
    pairs = zip(left, right, strict=True) if isinstance(left, list) else ((left[k], right[k]) for k in left)
    for a, b in pairs:
        assert a.keys() == b.keys()
        for key, value in a.items():
            if isinstance(value, float):
                assert b[key] == pytest.approx(value, abs=1e-6), key
            else:
                assert b[key] == value, key


def test_a_replaced_gpu_map_sums_the_jobs_hours_again(engine, other_db_url) -> None:  # type: ignore[no-untyped-def]
    _fill(engine, OLD)
    assert store_job_totals(engine, now=NOW) == 2
    old_hours = _hours(engine)
    assert {r["job_id"] for r in old_hours} == {"7", "9"}

    # the same map again: nothing derived from it is touched (a hand-made figure stays)
    with engine.begin() as conn:
        conn.execute(hours_table.update().where(hours_table.c.job_id == "7").values(gpu_minutes=1))
        assert replace_job_gpus(conn, OLD) == 0
    assert {r["gpu_minutes"] for r in _hours(engine) if r["job_id"] == "7"} == {1}
    assert set(_totals(engine)) == {"7", "9"}
    with engine.begin() as conn:  # job 7's hours as they were, its own alone
        job_hours.sum_hours(conn, T0, T0 + timedelta(hours=5), ["7"])
    _same(_hours(engine), old_hours)
    assert store_job_totals(engine, now=NOW) == 1  # job 7's row went with its re-summed hours
    totals_before = _totals(engine)

    # job 7 moves to other GPUs: its hours are summed from the new map, its totals row goes;
    # job 9's rows stay as they were
    with engine.begin() as conn:
        assert replace_job_gpus(conn, NEW) == 1
    assert set(_totals(engine)) == {"9"}
    assert _totals(engine)["9"] == totals_before["9"]
    moved = _hours(engine)
    _same([r for r in moved if r["job_id"] == "9"], [r for r in old_hours if r["job_id"] == "9"])
    assert [r for r in moved if r["job_id"] == "7"] != [r for r in old_hours if r["job_id"] == "7"]
    assert store_job_totals(engine, now=NOW) == 1

    # a database given the new map from the start reads the same hours, totals and report
    fresh = create_engine(other_db_url)
    try:
        upgrade(fresh)
        _fill(fresh, NEW)
        _same(_hours(fresh), moved)
        assert store_job_totals(fresh, now=NOW) == 2
        _same(_totals(fresh), _totals(engine))
        _same(_report(fresh), _report(engine))
    finally:
        fresh.dispose()
    # the figures moved with the map: GPUs 1 and 2 used 5 kJ a minute, GPUs 0 and 1 3 kJ
    assert _energy(moved) == pytest.approx(_energy(old_hours) * 5 / 3)


def _energy(rows: list[dict]) -> float:
    return sum(r["energy_joules"] for r in rows if r["job_id"] == "7")
