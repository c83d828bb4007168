"""Hourly rollups on both databases: each hour's row is its minutes folded, folding again
changes nothing, a late minute re-folds its hour, and retention keeps the hours past the minutes."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from gpuwatch import wire
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql import hours, progress
from gpuwatch.sql.folding import MAX, MIN, SUM, fold_kind
from gpuwatch.sql.job_hours import resum_jobs
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.retention import apply_retention
from gpuwatch.sql.rollups import Rollup, framework_names, xid_codes
from gpuwatch.sql.schema import (
    gpu_hours,
    gpu_minutes,
    job_hours,
    job_minutes,
    node_hours,
    node_minutes,
    slurm_jobs,
)
from tests import factories

H0 = factories.T0.replace(hour=12, minute=0, second=0)  # 12:00 UTC


def _node(engine, name: str = "node001") -> int:
    create_token(engine, name)
    with engine.connect() as conn:
        return get_node(conn, name).id


def _minute(start, gpu: int, util: float, xid: list[int] | None = None, frameworks=None) -> list:
    """Six samples 10 s apart from ``start`` of one GPU, with a host CPU sample each."""
    out: list = []
    for k in range(6):
        ts = start + timedelta(seconds=10 * k)
        extra = {} if xid is None else {"xid_errors": xid}
        if frameworks is not None:
            extra["frameworks"] = frameworks
        out.append(factories.gpu_sample(ts, gpu, util=util, memory_used_bytes=(gpu + 1) * 1000 + k, **extra))
        out.append(
            wire.CpuSample(
                ts=ts, cores=8, busy_ratio=util, user_ratio=util, system_ratio=0.0, iowait_ratio=0.1
            )
        )
        memory = {"total_bytes": 100, "used_bytes": 50, "available_bytes": 50 - k * gpu}
        out.append(wire.MemorySample(ts=ts, **memory, swap_in_bytes_per_s=0, swap_out_bytes_per_s=0))
    return out


def _store(engine, node_id: int, samples: list) -> None:
    BatchStore(engine).store(node_id, wire.Batch(node="node001", agent_version="t", samples=samples))


def _fill(engine, node_id: int) -> None:
    """Two hours and a bit of minutes on two GPUs, with XIDs and frameworks in some."""
    samples: list = []
    for m in range(0, 130, 7):
        start = H0 + timedelta(minutes=m)
        samples += _minute(start, 0, (m % 10) / 10, xid=[31] if m == 14 else None, frameworks=["pytorch"])
        samples += _minute(start + timedelta(seconds=1), 1, 0.5, xid=[43, 45] if m == 21 else None)
    _store(engine, node_id, samples)


def _hand_folded(conn: sa.Connection, minutes: sa.Table, keys: tuple[str, ...]) -> dict:
    """Each hour's expected row, folded in Python from the minute rows."""
    out: dict = {}
    for r in conn.execute(sa.select(minutes)).mappings():
        t = r["minute"].replace(minute=0)
        row = out.setdefault((*(r[k] for k in keys), t), {"minutes": 0})
        row["minutes"] += 1
        for name, value in r.items():
            if (
                name in keys
                or name == "minute"
                or name in ("xid_codes", "frameworks", "simulated", "gpu_simulated")
            ):
                continue
            kind, old = fold_kind(name), row.get(name)
            if value is None:
                row.setdefault(name, None)
            elif old is None:
                row[name] = value
            elif kind == SUM:
                row[name] = old + value
            elif kind == MAX:
                row[name] = max(old, value)
            elif kind == MIN:
                row[name] = min(old, value)
    return out


def _rows(conn: sa.Connection, hourly: sa.Table, keys: tuple[str, ...]) -> dict:
    return {(*(r[k] for k in keys), r["hour"]): dict(r) for r in conn.execute(sa.select(hourly)).mappings()}


def _minute_rows(conn: sa.Connection) -> dict:
    return {
        (r["node_id"], r["gpu_index"], r["minute"]): dict(r)
        for r in conn.execute(sa.select(gpu_minutes)).mappings()
    }


def _close(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(a - b) < 1e-9 * max(1.0, abs(a))
    return a == b


def test_each_complete_hour_is_its_minutes_folded(engine):
    node_id = _node(engine)
    _fill(engine, node_id)
    report = Rollup(engine).run_once(now=H0 + timedelta(minutes=140))
    with engine.connect() as conn:
        assert hours.state(conn, hours.STATE) == H0 + timedelta(hours=2), "folded up to the hour rolled"
        assert report.hours_folded == 2
        for hourly, minutes, keys in (
            (gpu_hours, gpu_minutes, ("node_id", "gpu_index")),
            (node_hours, node_minutes, ("node_id",)),
        ):
            got = _rows(conn, hourly, keys)
            want = {
                k: v for k, v in _hand_folded(conn, minutes, keys).items() if k[-1] < H0 + timedelta(hours=2)
            }
            assert sorted(got) == sorted(want) and len(got) == 2 * len(keys)
            for key, row in want.items():
                for name, value in row.items():
                    assert _close(got[key][name], value), (hourly.name, key, name, got[key][name], value)
        first = _rows(conn, gpu_hours, ("node_id", "gpu_index"))
        gpu0, gpu1 = first[(node_id, 0, H0)], first[(node_id, 1, H0)]
        assert xid_codes(gpu0["xid_codes"]) == (31,) and xid_codes(gpu1["xid_codes"]) == (43, 45)
        assert framework_names(gpu0["frameworks"]) == ("pytorch",) and bool(gpu0["simulated"])
        assert gpu0["minutes"] == 9 and gpu0["samples"] == 54  # minutes 0, 7, ..., 56


def test_folding_again_changes_nothing_and_a_late_minute_refolds_its_hour(engine):
    node_id = _node(engine)
    _fill(engine, node_id)
    rollup = Rollup(engine)
    rollup.run_once(now=H0 + timedelta(minutes=140))
    with engine.begin() as conn:
        once = _rows(conn, gpu_hours, ("node_id", "gpu_index"))
        hours.fold(conn, H0, H0 + timedelta(hours=2))
    with engine.connect() as conn:
        assert _rows(conn, gpu_hours, ("node_id", "gpu_index")) == once
    # GPU 2's samples of 12:30 arrive an hour late (a spool replay)
    _store(engine, node_id, _minute(H0 + timedelta(minutes=30), 2, 1.0))
    report = rollup.run_once(now=H0 + timedelta(minutes=141))
    assert report.late_ranges == 1
    with engine.connect() as conn:
        after = _rows(conn, gpu_hours, ("node_id", "gpu_index"))
        late = after[(node_id, 2, H0)]
        assert late["minutes"] == 1 and late["util_gpu_ratio_sum"] == 6.0
        assert {k: v for k, v in after.items() if k[1] != 2} == once
        node = _rows(conn, node_hours, ("node_id",))[(node_id, H0)]
        assert node["gpu_util_ratio_n"] == sum(r["util_gpu_ratio_n"] for k, r in after.items() if k[2] == H0)


def test_a_late_minute_and_its_hour_are_rewritten_in_one_transaction(engine, monkeypatch):
    """The re-rolled minutes, job-hours and hours of a late batch commit together: a failure
    while folding the hour leaves the minutes as they were (and the next pass does it all), so
    no reader ever sums a stale hour beside fresh minutes."""
    node_id = _node(engine)
    _fill(engine, node_id)
    rollup = Rollup(engine)
    rollup.run_once(now=H0 + timedelta(minutes=140))
    with engine.connect() as conn:
        minutes_before = _minute_rows(conn)
        hours_before = _rows(conn, gpu_hours, ("node_id", "gpu_index"))
    _store(engine, node_id, _minute(H0 + timedelta(minutes=30), 2, 1.0))  # an hour late

    def broken_refold(*args, **kwargs):
        raise RuntimeError("the database went away mid-pass")

    with monkeypatch.context() as patch:
        patch.setattr(hours, "refold", broken_refold)
        with pytest.raises(RuntimeError):
            rollup.run_once(now=H0 + timedelta(minutes=141))
    with engine.connect() as conn:
        assert _minute_rows(conn) == minutes_before
        assert _rows(conn, gpu_hours, ("node_id", "gpu_index")) == hours_before
    report = rollup.run_once(now=H0 + timedelta(minutes=142))
    assert report.late_ranges == 1
    with engine.connect() as conn:
        late = _minute_rows(conn)[(node_id, 2, H0 + timedelta(minutes=30))]
        assert late["util_gpu_ratio_sum"] == 6.0
        assert _rows(conn, gpu_hours, ("node_id", "gpu_index"))[(node_id, 2, H0)]["minutes"] == 1


def test_retention_keeps_the_hours_and_drops_the_minutes_past_minute_days(engine):
    node_id = _node(engine)
    _fill(engine, node_id)
    Rollup(engine).run_once(now=H0 + timedelta(minutes=140))
    with engine.connect() as conn:
        folded = _rows(conn, gpu_hours, ("node_id", "gpu_index"))
    now = H0 + timedelta(days=20, minutes=90)  # 14 days back is 12:30 + 6 days, after the hours folded
    apply_retention(engine, raw_days=14, minute_days=14, rollup_days=400, batch_record_days=30, now=now)
    with engine.connect() as conn:
        cut = hours.state(conn, hours.MINUTES_FROM)
        assert cut == H0 + timedelta(hours=2), "minutes go only as far as the hours folded"
        for table in (gpu_minutes, node_minutes, job_minutes):
            left = conn.execute(sa.select(table.c.minute)).scalars().all()
            assert all(minute >= cut for minute in left) and (left or table is job_minutes), table.name
        assert _rows(conn, gpu_hours, ("node_id", "gpu_index")) == folded, "hours kept"
    apply_retention(
        engine,
        raw_days=14,
        minute_days=14,
        rollup_days=400,
        batch_record_days=30,
        now=now + timedelta(days=400),
    )
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(gpu_hours)).scalar() == 0, (
            "gone after rollup_days"
        )
        assert conn.execute(sa.select(sa.func.count()).select_from(node_hours)).scalar() == 0


def test_minutes_not_folded_yet_are_not_dropped(engine):
    node_id = _node(engine)
    _fill(engine, node_id)
    Rollup(engine).roll(H0, H0 + timedelta(minutes=130))  # rolled, but no pass has folded them
    with engine.connect() as conn:
        kept = conn.execute(sa.select(sa.func.count()).select_from(gpu_minutes)).scalar()
    apply_retention(
        engine,
        raw_days=14,
        minute_days=14,
        rollup_days=400,
        batch_record_days=30,
        now=H0 + timedelta(days=20),
    )
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(gpu_minutes)).scalar() == kept


def test_the_minutes_are_cut_at_a_whole_hour(engine):
    node_id = _node(engine)
    _fill(engine, node_id)
    Rollup(engine).run_once(now=H0 + timedelta(minutes=140))
    apply_retention(
        engine,
        raw_days=14,
        minute_days=14,
        rollup_days=400,
        batch_record_days=30,
        now=H0 + timedelta(days=14, minutes=90),
    )
    with engine.connect() as conn:
        assert hours.state(conn, hours.MINUTES_FROM) == H0 + timedelta(hours=1)
        left = conn.execute(sa.select(gpu_minutes.c.minute)).scalars().all()
        assert min(left) == H0 + timedelta(hours=1, minutes=3), "the first minute of 13:00 kept (13:03)"


def test_a_job_summed_again_keeps_its_hours_older_than_the_minutes(engine):
    """A job's GPU map replaced after retention dropped its minutes: its old job-hours stay."""
    old = {
        "job_id": "77",
        "hour": H0,
        "gpu_minutes": 60,
        "util_gpu_ratio_sum": 180.0,
        "util_gpu_ratio_n": 360,
    }
    with engine.begin() as conn:
        conn.execute(
            slurm_jobs.insert().values(
                job_id="77", source="test", start_at=H0, end_at=H0 + timedelta(hours=1),
                first_seen_at=H0, updated_at=H0,
            )
        )  # fmt: skip
        conn.execute(job_hours.insert().values(**old))
        progress.set_done_until(conn, "job_hours", H0 + timedelta(days=20))
        progress.set_done_until(conn, hours.MINUTES_FROM, H0 + timedelta(days=6))
        resum_jobs(conn, ["77"])
        kept = conn.execute(sa.select(job_hours)).mappings().one()
    assert {k: kept[k] for k in old} == old
