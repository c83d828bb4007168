"""A job that began before the minutes kept is classified from the hourly rollups (its cgroup
figures from the minutes still kept) and gets the verdicts its minutes gave, on both databases.

Retention drops the minutes older than ``retention.minute_days``; a whole-job window reading
only the minutes would then cover the job's last two weeks while saying it began at its start.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from gpuwatch.classify import features, segments
from gpuwatch.classify.engine import classify_job
from gpuwatch.classify.verdict import Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS
from gpuwatch.sql import hours, job_hours, resolution
from gpuwatch.sql.buckets import as_utc
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.resolution import tier_for
from gpuwatch.sql.retention import apply_retention
from gpuwatch.sql.rollups import Rollup
from gpuwatch.sql.schema import gpu_minutes, job_minutes
from gpuwatch.views import _job_series as job_series
from gpuwatch.views import job_view
from gpuwatch.views.evidence import evidence_sentences
from tests.classify import corpus
from tests.figures import rounded

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
#: two and a half hours: two whole hours folded, the half hour in progress in the minutes only
MINUTES_RUN = 150


def _whole_job(found: list[Verdict]) -> list[tuple]:
    return [
        (v.cause.value, v.confidence, v.gpus, v.gpu_hours, v.gpu_hours_wasted, v.mean_util_ratio)
        for v in found
        if v.window_kind == "job"
    ]


def test_a_job_older_than_the_minutes_kept_gets_the_verdicts_its_minutes_gave(engine) -> None:
    built = corpus.built_cases(CASES, MINUTES_RUN)
    corpus.load(engine, built)
    now = built[0].case.now  # 10:30:07, the same for every case
    Rollup(engine, lag=timedelta(0)).run_once(now=now + timedelta(minutes=1))  # hours folded to 10:00
    start = built[0].case.start
    with engine.connect() as conn:
        assert not tier_for(conn, start, start + timedelta(hours=1)).hourly
        before = {b.job_id: classify_job(conn, b.job_id, now) for b in built}
    assert {b.case.label for b in built} <= {v.cause.value for found in before.values() for v in found}, (
        "each case's own cause is among its verdicts"
    )
    for job, found in before.items():
        assert _whole_job(found), job
        assert all("rollups" not in v.evidence["window"] for v in found)

    cut = now.replace(minute=0, second=0) - timedelta(hours=1)  # 09:00: the job's second hour on kept
    later = cut + timedelta(days=14)
    apply_retention(engine, raw_days=14, minute_days=14, rollup_days=400, batch_record_days=30, now=later)
    with engine.connect() as conn:
        kept = conn.execute(sa.select(sa.func.min(gpu_minutes.c.minute))).scalar()
        assert kept is not None and kept.replace(tzinfo=cut.tzinfo) == cut
        assert conn.execute(sa.select(sa.func.min(job_minutes.c.minute))).scalar() is not None
        assert tier_for(conn, start, start + timedelta(hours=1)).hourly
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
                assert any("hourly rollups" in text for text in evidence_sentences(v.evidence))
                assert v.window_start == b.case.start.replace(second=0)
            else:  # the recent window lies in the minutes kept
                assert "rollups" not in window and "cgroup_start" not in window


def test_a_window_inside_the_minutes_reads_its_folded_hours_and_gets_the_same_features(
    engine, monkeypatch
) -> None:
    """A long window reads its whole folded hours from the hourly tables and only the minutes
    around them: the same sums as every minute, so the same features, and the same per-GPU
    table on the job page."""
    built = corpus.built_cases(CASES, MINUTES_RUN)
    corpus.load(engine, built)
    now = built[0].case.now  # 10:30:07
    Rollup(engine, lag=timedelta(0)).run_once(now=now + timedelta(minutes=1))

    def whole_jobs() -> dict[str, dict]:
        with engine.connect() as conn:
            found = {}
            for b in built:
                windows = features.job_windows(
                    conn, features.load_scope(conn, b.job_id), now, DEFAULT_THRESHOLDS
                )
                assert windows is not None
                found[b.job_id] = windows[1].to_dict()
            return found

    def gpu_tables() -> dict[str, list]:
        """Each job's per-GPU table, floats to 9 digits (hours add in another order)."""
        views = {b.job_id: job_view(engine, b.job_id, now) for b in built}
        return {
            job: [rounded(dataclasses.asdict(g)) for g in view.gpus] for job, view in views.items() if view
        }

    with engine.connect() as conn:
        start = built[0].case.start.replace(second=0)
        pieces = resolution.spans(conn, start, now.replace(second=0))
    assert [(p.tier, p.start.hour, p.end.hour, p.end.minute) for p in pieces] == [
        (resolution.HOURS, 8, 10, 0),
        (resolution.MINUTES, 10, 10, 30),
    ]

    def timelines() -> list[float | None]:
        """Each GPU's utilization in two columns of an hour each (at 10:00: whole hours)."""
        at = now.replace(minute=0)
        views = [job_view(engine, b.job_id, at, columns=2) for b in built]
        return [x for view in views if view for values in view.timeline.values() for x in values]

    hybrid, tables, columns = whole_jobs(), gpu_tables(), timelines()
    assert len(tables) == len(built) and all(tables.values())
    assert len(columns) == 2 * sum(len(t) for t in tables.values()) and any(columns)

    def minutes_only(conn, start, end):
        return (resolution.Span(resolution.MINUTES, start, end),)

    monkeypatch.setattr(features, "spans", minutes_only)
    monkeypatch.setattr(job_series, "spans", minutes_only)
    assert whole_jobs() == hybrid
    assert gpu_tables() == tables
    assert [x is None for x in timelines()] == [x is None for x in columns]
    # an hour row's mean is over its samples, a minute column's over its minutes: alike within 0.1 %
    assert [x for x in timelines() if x is not None] == pytest.approx(
        [x for x in columns if x is not None], rel=1e-3, abs=1e-6
    )


def _six_day_gpu(engine: sa.Engine, change_at: timedelta) -> tuple[features.JobScope, datetime, datetime]:
    """One GPU busy (~80 %) for six days but idle from ``change_at`` on: its minutes, folded
    into hours as the rollup pass does."""
    create_token(engine, "long01")
    start = corpus.T0.replace(second=0)
    end = start + timedelta(days=6)
    rows = []
    for k in range(int((end - start) // timedelta(minutes=1))):
        minute = start + timedelta(minutes=k)
        util = 0.0 if minute - start >= change_at else 0.75 + 0.1 * ((k * 7919) % 11) / 10
        rows.append(
            dict(
                node_id=None,
                gpu_index=0,
                minute=minute,
                samples=6,
                lost_samples=0,
                util_gpu_ratio_sum=6 * util,
                util_gpu_ratio_n=6,
                sm_active_ratio_sum=6 * util * 0.8,
                sm_active_ratio_n=6,
                util_bin_0=6 if util == 0 else 0,
            )
        )
    with engine.begin() as conn:
        node = get_node(conn, "long01")
        assert node is not None
        for row in rows:
            row["node_id"] = node.id
        conn.execute(gpu_minutes.insert(), rows)
        hours.advance(conn, end)
        job_hours.advance(conn, end)
    scope = features.JobScope(
        job_id="long",
        start=start,
        end=None,
        state="RUNNING",
        cpus=8,
        memory_bytes=None,
        gpus=(features.GpuRef(node.id, "long01", 0),),
        gpu_source="job_gpus",
    )
    return scope, start, end


def test_a_long_job_s_phase_is_searched_in_hours_and_placed_to_the_minute(engine, monkeypatch) -> None:
    """Six days: buckets of whole clock hours, read from the hourly rollups; the change placed
    to the minute from the minutes kept, the minute a search in minute buckets finds; and with
    the minutes gone, to the hour."""
    change_at = timedelta(days=5, hours=3, minutes=17)
    scope, start, end = _six_day_gpu(engine, change_at)
    changed = start + change_at
    with engine.connect() as conn:
        found = segments.latest_change(conn, scope, start, end, DEFAULT_THRESHOLDS)
        assert found == changed + timedelta(minutes=1), "the minute after the change: no busy sample in it"
        with monkeypatch.context() as patch:
            patch.setattr(segments, "HOURLY_BUCKETS_FROM_MIN", 10**9)  # minute buckets throughout
            assert segments.latest_change(conn, scope, start, end, DEFAULT_THRESHOLDS) == found

    later = end + timedelta(days=1)  # the minutes go, up to the hours folded and summed
    apply_retention(engine, raw_days=1, minute_days=1, rollup_days=400, batch_record_days=30, now=later)
    with engine.connect() as conn:
        kept = conn.execute(sa.select(sa.func.min(gpu_minutes.c.minute))).scalar()
        assert kept is not None and as_utc(conn, kept) >= changed + timedelta(hours=12)
        assert tier_for(conn, start, start + timedelta(hours=1)).hourly
        found = segments.latest_change(conn, scope, start, end, DEFAULT_THRESHOLDS)
    assert found is not None and abs(found - changed) <= timedelta(hours=1)
