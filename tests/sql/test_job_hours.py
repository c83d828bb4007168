"""Job-hours on both databases: the hour sums equal the minutes', the report reads either way the
same figures, and the rollup pass sums an hour once it is complete and again after late data."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql import job_hours as hours
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.rollups import Rollup
from gpuwatch.sql.schema import gpu_minutes, job_gpus, job_hours, job_minutes, rollup_state, slurm_jobs
from gpuwatch.views.period import jobs_in_period
from tests.sql.test_rollups import _minute_batch

H10 = datetime(2026, 12, 1, 10, 0, tzinfo=timezone.utc)
GIB = 2**30


def _fill(engine) -> int:  # type: ignore[no-untyped-def]
    """Job "a" holds n1 GPUs 0 and 1 from 10:20 to 12:40: GPU 0 at 0.5, GPU 1 at 0.25, 1 kJ
    per GPU-minute (GPU 1's minutes estimated from power), 2 of 8 cores, 10..40 GiB of 64.
    n1 GPU 2 runs job "b" from 10:00 on (running). Minutes from 09:00 to 13:00 everywhere."""
    create_token(engine, "n1")
    with engine.connect() as conn:
        node_id = get_node(conn, "n1").id
    with engine.begin() as conn:
        conn.execute(
            slurm_jobs.insert(),
            [
                {"job_id": "a", "source": "t", "state": "COMPLETED", "gpus": 2,
                 "start_at": H10 + timedelta(minutes=20), "end_at": H10 + timedelta(hours=2, minutes=40),
                 "first_seen_at": H10, "updated_at": H10},
                {"job_id": "b", "source": "t", "state": "RUNNING", "gpus": 1, "start_at": H10, "end_at": None,
                 "first_seen_at": H10, "updated_at": H10},
            ],
        )  # fmt: skip
        conn.execute(
            job_gpus.insert(),
            [{"job_id": "a", "node": "n1", "gpu_index": 0}, {"job_id": "a", "node": "n1", "gpu_index": 1},
             {"job_id": "b", "node": "n1", "gpu_index": 2}],
        )  # fmt: skip
        minutes = [H10 - timedelta(hours=1) + timedelta(minutes=k) for k in range(240)]
        conn.execute(
            gpu_minutes.insert(),
            [
                {"node_id": node_id, "gpu_index": gpu, "minute": m, "samples": 6, "lost_samples": 0,
                 "util_gpu_ratio_sum": 6 * util, "util_gpu_ratio_n": 6, "energy_joules": 1000.0,
                 "energy_power_samples": 6 if gpu == 1 else 0}
                for m in minutes
                for gpu, util in ((0, 0.5), (1, 0.25), (2, 1.0))
            ],
        )  # fmt: skip
        conn.execute(
            job_minutes.insert(),
            [
                {"node_id": node_id, "job_id": "a", "minute": m, "samples": 6, "cpu_used_cores_sum": 12.0,
                 "cpu_used_cores_n": 6, "cpu_allocated_cores": 8.0, "memory_limit_bytes": 64 * GIB,
                 "memory_used_bytes_max": (10 + i % 31) * GIB}
                for i, m in enumerate(minutes)
                if H10 + timedelta(minutes=20) <= m < H10 + timedelta(hours=2, minutes=40)
            ],
        )  # fmt: skip
    return node_id


def _state(engine, value: datetime | None) -> None:  # type: ignore[no-untyped-def]
    with engine.begin() as conn:
        conn.execute(rollup_state.delete().where(rollup_state.c.name == hours.STATE))
        if value is not None:
            conn.execute(rollup_state.insert().values(name=hours.STATE, done_until=value))


def test_an_hour_is_the_sum_of_its_minutes(engine) -> None:  # type: ignore[no-untyped-def]
    _fill(engine)
    with engine.begin() as conn:
        assert hours.sum_hours(conn, H10, H10 + timedelta(hours=3)) == 6  # a and b: 10, 11 and 12
        rows = {(r["job_id"], r["hour"]): r for r in conn.execute(sa.select(job_hours)).mappings()}
    ten = rows[("a", H10)]
    # 40 minutes of the 10:00 hour, two GPUs: 80 GPU-minutes
    assert ten["gpu_minutes"] == 80 and ten["util_gpu_ratio_n"] == 480
    assert ten["util_gpu_ratio_sum"] == pytest.approx(40 * 6 * (0.5 + 0.25))
    assert ten["energy_joules"] == pytest.approx(80_000.0) and ten["energy_samples"] == 480
    assert ten["energy_power_samples"] == 240  # GPU 1's
    assert ten["cpu_used_cores"] == pytest.approx(40 * 2.0) and ten["cpu_allocated_cores"] == pytest.approx(
        320
    )
    assert ten["memory_limit_bytes"] == 64 * GIB
    assert rows[("a", H10 + timedelta(hours=2))]["gpu_minutes"] == 80  # 12:00 to 12:40
    assert rows[("b", H10 + timedelta(hours=1))]["gpu_minutes"] == 60
    assert ("a", H10 - timedelta(hours=1)) not in rows  # before it started


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (H10 + timedelta(minutes=5), H10 + timedelta(hours=2, minutes=50)),  # both ends inside an hour
        (H10, H10 + timedelta(hours=3)),  # whole hours only
        (H10 + timedelta(minutes=30), H10 + timedelta(minutes=50)),  # inside one hour
    ],
)
def test_a_period_reads_the_same_from_hours_as_from_minutes(engine, start, end) -> None:  # type: ignore[no-untyped-def]
    _fill(engine)
    _state(engine, None)
    from_minutes = jobs_in_period(engine, start, end)
    with engine.begin() as conn:
        hours.sum_hours(conn, H10 - timedelta(hours=1), H10 + timedelta(hours=2))
    _state(engine, H10 + timedelta(hours=2))  # 12:00 on from the minutes
    from_hours = jobs_in_period(engine, start, end)
    assert from_hours.keys() == from_minutes.keys() == {"a", "b"}
    for job, m in from_minutes.items():
        h = from_hours[job]
        assert h.util_sum == pytest.approx(m.util_sum) and h.util_samples == m.util_samples
        assert h.cpu_used_cores == pytest.approx(m.cpu_used_cores)
        assert h.cpu_allocated_cores == pytest.approx(m.cpu_allocated_cores)
        assert (h.memory_used_max_bytes, h.memory_limit_bytes) == (
            m.memory_used_max_bytes,
            m.memory_limit_bytes,
        )
        assert h.energy is not None and m.energy is not None
        assert h.energy.joules == pytest.approx(m.energy.joules)
        assert h.energy.estimated_share == pytest.approx(m.energy.estimated_share)


def test_many_job_ids_are_read_a_chunk_at_a_time(engine, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A group's jobs named in chunks (one statement binds a bounded number of ids) add up to
    the same figures as every job read at once, hours and minutes alike."""
    from gpuwatch.views import period

    _fill(engine)
    with engine.begin() as conn:
        hours.sum_hours(conn, H10 - timedelta(hours=1), H10 + timedelta(hours=2))
    _state(engine, H10 + timedelta(hours=2))
    start, end = H10 + timedelta(minutes=5), H10 + timedelta(hours=2, minutes=50)
    everything = jobs_in_period(engine, start, end)
    monkeypatch.setattr(period, "IDS_PER_READ", 1)  # each job its own statement
    chunked = jobs_in_period(engine, start, end, job_ids=["b", "a", "a", "nobody"])
    assert chunked == everything and set(chunked) == {"a", "b"}
    assert jobs_in_period(engine, start, end, job_ids=[]) == {}


def test_the_rollup_pass_sums_settled_hours_and_resums_after_late_data(engine) -> None:  # type: ignore[no-untyped-def]
    """Raw samples through the store and the rollup pass: an hour is summed after it is complete
    and settled, not before; a late batch in a summed hour re-sums it."""
    node_id = _node_with_job(engine)
    store = BatchStore(engine)
    for k in (0, 1, 59):  # minutes 10:00, 10:01 and 10:59 of job 123 on GPU 0
        store.store(node_id, _minute_batch("node001", H10 + timedelta(minutes=k), [0.5] * 6))
    rollup = Rollup(engine, lag=timedelta(minutes=1))
    assert rollup.run_once(now=H10 + timedelta(hours=1, minutes=5)).job_hours == 0  # not settled yet
    report = rollup.run_once(now=H10 + timedelta(hours=1, minutes=12))
    assert report.job_hours == 1
    with engine.connect() as conn:
        [row] = conn.execute(sa.select(job_hours)).mappings().all()
    assert (row["job_id"], row["hour"], row["gpu_minutes"]) == ("123", H10, 3)
    # a node replays a minute of the summed hour: the hour is summed again
    store.store(node_id, _minute_batch("node001", H10 + timedelta(minutes=30), [0.5] * 6))
    report = rollup.run_once(now=H10 + timedelta(hours=1, minutes=13))
    assert report.late_ranges == 1 and report.job_hours == 1
    with engine.connect() as conn:
        [row] = conn.execute(sa.select(job_hours)).mappings().all()
    assert row["gpu_minutes"] == 4 and row["util_gpu_ratio_sum"] == pytest.approx(4 * 6 * 0.5)


def _node_with_job(engine) -> int:  # type: ignore[no-untyped-def]
    create_token(engine, "node001")
    with engine.begin() as conn:
        conn.execute(
            slurm_jobs.insert().values(
                job_id="123",
                source="t",
                state="RUNNING",
                gpus=1,
                start_at=H10,
                first_seen_at=H10,
                updated_at=H10,
            )
        )
        conn.execute(job_gpus.insert().values(job_id="123", node="node001", gpu_index=0))
    with engine.connect() as conn:
        return get_node(conn, "node001").id


#: (job, GPUs of n1, start, end): jobs that hold a whole hour, start or end inside one (on and off
#: the minute, one at the report's end), share a GPU with another job, or still run
_EDGE_JOBS = [
    ("a", (0, 1), H10 + timedelta(minutes=20, seconds=30), H10 + timedelta(hours=2, minutes=37)),
    ("b", (2,), H10, None),
    ("c", (0,), H10 + timedelta(hours=2, minutes=37), None),
    (
        "d",
        (3,),
        H10 + timedelta(hours=2, minutes=5, seconds=59),
        H10 + timedelta(hours=2, minutes=20, seconds=1),
    ),
    ("e", (1, 3), H10 + timedelta(hours=1), H10 + timedelta(hours=2, minutes=37, seconds=30)),
    ("f", (2,), H10 + timedelta(hours=2, minutes=7, seconds=10), None),
]


def _edge_fill(engine, seed: int) -> tuple[int, list[dict]]:  # type: ignore[no-untyped-def]
    """n1's GPUs 0-3 with random minutes from 09:00 to 13:00 (some without utilization or energy)
    and :data:`_EDGE_JOBS`; the minutes as stored."""
    rng = random.Random(seed)
    create_token(engine, "n1")
    with engine.connect() as conn:
        node_id = get_node(conn, "n1").id
    rows = [_random_minute(rng, node_id, gpu, H10 - timedelta(hours=1) + timedelta(minutes=k))
            for k in range(240) for gpu in range(4)]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(
            slurm_jobs.insert(),
            [{"job_id": job, "source": "t", "state": "RUNNING" if end is None else "COMPLETED",
              "gpus": len(held), "start_at": start, "end_at": end, "first_seen_at": H10, "updated_at": H10}
             for job, held, start, end in _EDGE_JOBS],
        )  # fmt: skip
        conn.execute(
            job_gpus.insert(),
            [
                {"job_id": job, "node": "n1", "gpu_index": gpu}
                for job, held, _, _ in _EDGE_JOBS
                for gpu in held
            ],
        )
        conn.execute(gpu_minutes.insert(), rows)
    return node_id, rows


def _random_minute(rng: random.Random, node_id: int, gpu: int, minute: datetime) -> dict:
    samples, lost = 6, rng.choice((0, 0, 1))
    util = None if rng.random() < 0.1 else rng.random()
    energy = None if rng.random() < 0.1 else 900 + 200 * rng.random()
    return {
        "node_id": node_id, "gpu_index": gpu, "minute": minute, "samples": samples, "lost_samples": lost,
        "util_gpu_ratio_sum": None if util is None else samples * util,
        "util_gpu_ratio_n": 0 if util is None else samples,
        "energy_joules": energy, "energy_power_samples": rng.choice((0, 2, 6)),
    }  # fmt: skip


def _by_hand(rows: list[dict], start: datetime, end: datetime) -> dict[str, dict]:
    """Each job's GPU sums over ``[start, end)`` counted minute by minute: the minutes of its GPUs
    from the minute it started in to its end."""
    out: dict[str, dict] = {}
    for job, held, job_start, job_end in _EDGE_JOBS:
        first = job_start.replace(second=0)
        mine = [r for r in rows if r["gpu_index"] in held and start <= r["minute"] < end
                and r["minute"] >= first and (job_end is None or r["minute"] < job_end)]  # fmt: skip
        if not mine:
            continue
        energy = [r for r in mine if r["energy_joules"] is not None]
        out[job] = {
            "gpu_minutes": len(mine),
            "util_sum": sum(r["util_gpu_ratio_sum"] or 0.0 for r in mine),
            "util_samples": sum(r["util_gpu_ratio_n"] for r in mine),
            "joules": sum(r["energy_joules"] for r in energy) if energy else None,
            "power_samples": sum(r["energy_power_samples"] for r in mine),
            "energy_samples": sum(r["samples"] - r["lost_samples"] for r in energy),
        }
    return out


def _assert_by_hand(engine, rows: list[dict], start: datetime, end: datetime) -> None:  # type: ignore[no-untyped-def]
    want, got = _by_hand(rows, start, end), jobs_in_period(engine, start, end)
    assert got.keys() == want.keys()
    for job, w in want.items():
        g = got[job]
        assert (g.gpu_minutes, g.util_samples) == (w["gpu_minutes"], w["util_samples"]), job
        assert g.util_sum == pytest.approx(w["util_sum"]), job
        if w["joules"] is None:
            assert g.energy is None, job
            continue
        assert g.energy is not None and g.energy.joules == pytest.approx(w["joules"]), job
        share = w["power_samples"] / w["energy_samples"] if w["energy_samples"] else 0.0
        assert g.energy.estimated_share == pytest.approx(share), job


@pytest.mark.parametrize("seed", [1, 2])
def test_a_period_that_ends_now_counts_the_current_hours_minutes_by_hand(engine, seed) -> None:  # type: ignore[no-untyped-def]
    """A report that ends inside the current hour (``gpuwatch report --since``) reads that hour's
    minutes: its jobs' GPU sums equal the ones counted minute by minute, for jobs that hold the
    whole hour, start or end in it (on the report's end too), or share a GPU; and again after
    late data changed minutes of the current hour and of a summed one (re-rolled, re-summed)."""
    node_id, rows = _edge_fill(engine, seed)
    with engine.begin() as conn:
        hours.sum_hours(conn, H10 - timedelta(hours=1), H10 + timedelta(hours=2))
    _state(engine, H10 + timedelta(hours=2))  # 12:00 is the current hour
    now = H10 + timedelta(hours=2, minutes=37, seconds=20)
    periods = [
        (H10 - timedelta(hours=1), now),
        (H10 + timedelta(minutes=20, seconds=30), now),
        (H10, H10 + timedelta(hours=2, minutes=37)),
        (H10 + timedelta(hours=2, minutes=6), now),
    ]
    for start, end in periods:
        _assert_by_hand(engine, rows, start, end)
    # late batches: minutes of the current hour and of the summed 11:00 hour rolled again
    rng = random.Random(seed + 100)
    late = {
        (r["gpu_index"], r["minute"])
        for r in rows
        if r["minute"].minute in (7, 30) and r["minute"].hour in (11, 12)
    }
    rows = [
        _random_minute(rng, node_id, r["gpu_index"], r["minute"])
        if (r["gpu_index"], r["minute"]) in late
        else r
        for r in rows
    ]
    with engine.begin() as conn:
        conn.execute(gpu_minutes.delete().where(gpu_minutes.c.minute.in_(sorted({m for _, m in late}))))
        conn.execute(gpu_minutes.insert(), [r for r in rows if (r["gpu_index"], r["minute"]) in late])
        hours.resum(conn, H10 + timedelta(hours=1), H10 + timedelta(hours=2, minutes=31))
    for start, end in periods:
        _assert_by_hand(engine, rows, start, end)
