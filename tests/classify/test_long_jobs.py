"""A job that began before the minutes kept is classified from the hourly rollups (its cgroup
figures from the minutes still kept) and gets the verdicts its minutes gave, on both databases.

Retention drops the minutes older than ``retention.minute_days``; a whole-job window reading
only the minutes would then cover the job's last two weeks while saying it began at its start.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
import sqlalchemy as sa

from gpuwatch.classify.engine import classify_job
from gpuwatch.classify.verdict import Verdict
from gpuwatch.sql.resolution import HOURS, MINUTES, tier_for
from gpuwatch.sql.retention import apply_retention
from gpuwatch.sql.rollups import Rollup
from gpuwatch.sql.schema import gpu_minutes, job_minutes
from tests.classify import corpus

#: one case of each cause the rules tell apart by GPU, host or cgroup signals, and a healthy one
CASES = (
    "idle-all-4-h200",
    "input-cpu-saturated",
    "hostmem-all-signals",
    "comm-nvlink-4",
    "noamp-h200-4",
    "small-h200-1",
    "cpu-only-1gpu",
    "fault-xid79-one-of-four",
    "healthy-training-h200",
)
#: two whole hours: the hourly tier then holds every minute the minute tier held
MINUTES_RUN = 120


def _built() -> tuple[corpus.Built, ...]:
    by_name = {c.name: (i, c) for i, c in enumerate(corpus.cases())}
    return tuple(
        corpus.build(dataclasses.replace(by_name[name][1], minutes=MINUTES_RUN), by_name[name][0])
        for name in CASES
    )


def _whole_job(found: list[Verdict]) -> list[tuple]:
    return [
        (v.cause.value, v.confidence, v.gpus, v.gpu_hours, v.gpu_hours_wasted, v.mean_util_ratio)
        for v in found
        if v.window_kind == "job"
    ]


def test_a_job_older_than_the_minutes_kept_gets_the_verdicts_its_minutes_gave(engine) -> None:
    built = _built()
    corpus.load(engine, built)
    now = built[0].case.now  # 10:00:07, the same for every case
    Rollup(engine, lag=timedelta(0)).run_once(now=now + timedelta(hours=2))  # minutes and hours
    start = built[0].case.start
    with engine.connect() as conn:
        assert tier_for(conn, start) is MINUTES
        before = {b.job_id: classify_job(conn, b.job_id, now) for b in built}
    assert {b.case.label for b in built} <= {v.cause.value for found in before.values() for v in found}, (
        "each case's own cause is among its verdicts"
    )
    for job, found in before.items():
        assert _whole_job(found), job
        assert all("rollups" not in v.evidence["window"] for v in found)

    cut = now.replace(minute=0, second=0) - timedelta(hours=1)  # 09:00: the job's second hour kept
    later = cut + timedelta(days=14)
    apply_retention(engine, raw_days=14, minute_days=14, rollup_days=400, batch_record_days=30, now=later)
    with engine.connect() as conn:
        kept = conn.execute(sa.select(sa.func.min(gpu_minutes.c.minute))).scalar()
        assert kept is not None and kept.replace(tzinfo=cut.tzinfo) == cut
        assert conn.execute(sa.select(sa.func.min(job_minutes.c.minute))).scalar() is not None
        assert tier_for(conn, start) is HOURS
        after = {b.job_id: classify_job(conn, b.job_id, now) for b in built}

    for b in built:
        was, now_is = _whole_job(before[b.job_id]), _whole_job(after[b.job_id])
        assert [row[:3] for row in now_is] == [row[:3] for row in was], b.case.name  # cause, confidence, GPUs
        figures = [x for row in now_is for x in row[3:]]
        assert figures == pytest.approx([x for row in was for x in row[3:]], abs=1e-4), b.case.name
        for v in after[b.job_id]:
            window = v.evidence["window"]
            if v.window_kind == "job":
                assert window["rollups"] == "hourly" and window["cgroup_start"] == cut.isoformat()
                assert v.window_start == b.case.start.replace(second=0)
            else:  # the recent window lies in the minutes kept
                assert "rollups" not in window and "cgroup_start" not in window
