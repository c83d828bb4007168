"""``gpuwatch report``: GPU-hours held and wasted per user/account/partition, on both databases."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from gpuwatch.cli.main import cli
from gpuwatch.cli.report import REPORT_KEYS
from gpuwatch.sql.schema import gpu_minutes, slurm_jobs, verdicts
from gpuwatch.views import GroupBy, usage_report
from tests.demo_data import load_demo

T0 = datetime(2026, 11, 30, 0, 0, tzinfo=timezone.utc)
WEEK = (T0, T0 + timedelta(days=7))


def job(
    job_id: str, user: str, gpus: int, start: datetime, end: datetime | None, account: str = "lab"
) -> dict:
    return {
        "job_id": job_id, "source": "test", "user_name": user, "account": account, "partition": "gpu",
        "state": "COMPLETED" if end else "RUNNING", "start_at": start, "end_at": end, "gpus": gpus,
        "first_seen_at": start, "updated_at": end or start,
    }  # fmt: skip


def verdict(job_id: str, cause: str, wasted: float, at: datetime, window: str = "job") -> dict:
    return {
        "job_id": job_id, "evaluated_at": at, "window_kind": window, "window_start": at - timedelta(hours=1),
        "window_end": at, "cause": cause, "confidence": 0.9, "gpus": 1, "gpu_hours": wasted,
        "gpu_hours_wasted": wasted, "summary": "s", "fix": "f", "evidence": {}, "rules_version": "t",
    }  # fmt: skip


@pytest.fixture
def filled(engine) -> sa.Engine:  # type: ignore[no-untyped-def]
    with engine.begin() as conn:
        conn.execute(
            slurm_jobs.insert(),
            [
                # alice: 2 GPUs x 10 h inside the week, idle for 5 h of it (10 GPU-h wasted)
                job("1", "alice", 2, T0 + timedelta(days=1), T0 + timedelta(days=1, hours=10)),
                # alice: 1 GPU from the day before the week to 2 h in: 2 GPU-h inside it
                job("2", "alice", 1, T0 - timedelta(days=1), T0 + timedelta(hours=2)),
                # bob: 4 GPUs, 1 h, judged twice on overlapping windows (12 GPU-h "wasted" > 4 held)
                job("3", "bob", 4, T0 + timedelta(days=2), T0 + timedelta(days=2, hours=1), account="phys"),
                # carol: no GPUs, and a job after the week: neither counts
                job("4", "carol", 0, T0 + timedelta(days=1), T0 + timedelta(days=2)),
                job("5", "carol", 1, T0 + timedelta(days=8), None),
            ],
        )
        conn.execute(
            verdicts.insert(),
            [
                verdict("1", "idle_allocation", 10.0, T0 + timedelta(days=1, hours=10)),
                verdict("2", "healthy", 0.0, T0 + timedelta(hours=2)),
                verdict("3", "input_bound", 8.0, T0 + timedelta(days=2, hours=1)),
                verdict("3", "small_work", 4.0, T0 + timedelta(days=2, hours=1)),
            ],
        )
    return engine


def test_by_user_hand_computed(filled) -> None:  # type: ignore[no-untyped-def]
    rows = {r.group: r for r in usage_report(filled, GroupBy.USER, *WEEK)}
    assert set(rows) == {"alice", "bob"}
    alice, bob = rows["alice"], rows["bob"]
    assert (alice.jobs, alice.jobs_flagged, alice.gpu_hours, alice.gpu_hours_wasted) == (2, 1, 22.0, 10.0)
    assert alice.wasted_share == pytest.approx(10 / 22, abs=1e-4) and alice.top_cause == "idle_allocation"
    # bob's job: two causes (8 and 4 GPU-h) of the same GPU-hours, and he held 4: the largest
    # cause, capped at what he held (the digests count the same way)
    assert (bob.gpu_hours, bob.gpu_hours_wasted, bob.wasted_share) == (4.0, 4.0, 1.0)
    assert bob.top_cause == "input_bound" and bob.top_cause_gpu_hours == 4.0
    assert [r.group for r in usage_report(filled, GroupBy.USER, *WEEK)] == [
        "alice",
        "bob",
    ]  # most wasted first


def test_by_account_and_an_empty_period(filled) -> None:  # type: ignore[no-untyped-def]
    accounts = {r.group: r.gpu_hours for r in usage_report(filled, GroupBy.ACCOUNT, *WEEK)}
    assert accounts == {"lab": 22.0, "phys": 4.0}
    assert usage_report(filled, GroupBy.USER, T0 - timedelta(days=30), T0 - timedelta(days=20)) == []


def test_report_cli_json_keys_on_the_demo(db_url, engine) -> None:  # type: ignore[no-untyped-def]
    result = load_demo(db_url, cycles=None)
    listing = {row.job_id: row for row in result.rows}
    out = CliRunner().invoke(
        cli, ["--db", db_url, "report", "--by", "user", "--since", "1d", "--format", "json"]
    )
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    assert rows and all(set(r) == {"user", *REPORT_KEYS} for r in rows)
    assert sum(r["jobs"] for r in rows) == len(result.expected)  # every demo job, healthy too
    # each flagged demo job's waste is the listing's (the digests' and the CLI's figure)
    wasted = sum(row.gpu_hours_wasted or 0.0 for row in listing.values() if row.cause != "healthy")
    assert sum(r["gpu_hours_wasted"] for r in rows) == pytest.approx(wasted, rel=0.02)
    # one job per demo user: the user's top cause is the cause the listing shows for the job
    # (the CPU-only job is also idle: credited to the more specific cause, as listed)
    listed_cause = {row.user: row.cause for row in listing.values() if (row.gpu_hours_wasted or 0) > 0}
    assert {r["user"]: r["top_cause"] for r in rows if r["jobs_flagged"]} == listed_cause
    by_account = CliRunner().invoke(cli, ["--db", db_url, "report", "--by", "account", "--format", "json"])
    assert [r["account"] for r in json.loads(by_account.output)] == ["demo-lab"]
    # the demo's idle job's user used none of her GPUs; the input-bound one's CPUs were saturated
    cause_of = {row.user: row.cause for row in listing.values()}
    efficiency = {cause_of.get(r["user"]): r for r in rows}
    assert efficiency["idle_allocation"]["gpu_efficiency"] == 0.0
    assert efficiency["input_bound"]["cpu_efficiency"] > 0.9
    assert all(0 <= r["memory_efficiency"] <= 1 for r in rows)
    assert all(r["wasted_share_last_week"] == r["wasted_share"] for r in rows)  # a day is inside the week
    # a table for people: cost only where the site set a price, in its currency
    env = {"GPUWATCH_REPORT__GPU_HOUR_PRICE": "2.5", "GPUWATCH_REPORT__CURRENCY": "EUR"}
    priced = CliRunner().invoke(cli, ["--db", db_url, "report", "--since", "1d"], env=env)
    plain = CliRunner().invoke(cli, ["--db", db_url, "report", "--since", "1d"])
    assert "cost (EUR)" in priced.output and "cost" not in plain.output and "CO2" not in plain.output


def test_report_cli_refuses_a_time_without_zone(db_url) -> None:  # type: ignore[no-untyped-def]
    out = CliRunner().invoke(cli, ["--db", db_url, "report", "--until", "2026-12-01T00:00"])
    assert out.exit_code == 2 and "give a time zone" in out.output


def _minutes(
    engine,
    node: str,
    gpu: int,
    start: datetime,
    count: int,
    joules: float,
    estimated: int = 0,
    util: float | None = None,
) -> None:
    from gpuwatch.sql.nodes import create_token, get_node

    with engine.connect() as conn:
        found = get_node(conn, node)
    if found is None:
        create_token(engine, node)
        with engine.connect() as conn:
            found = get_node(conn, node)
    rows = [
        {
            "node_id": found.id, "gpu_index": gpu, "minute": start + timedelta(minutes=k), "samples": 6,
            "lost_samples": 0, "energy_joules": joules, "energy_power_samples": estimated,
            "util_gpu_ratio_sum": None if util is None else 6 * util,
            "util_gpu_ratio_n": 0 if util is None else 6,
        }
        for k in range(count)
    ]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(gpu_minutes.insert(), rows)


def test_energy_of_the_jobs_gpus_while_they_held_them(filled) -> None:  # type: ignore[no-untyped-def]
    """alice's job 1 holds n1 GPUs 0 and 1 from day 1 00:00 for 10 h; GPU 2 of the same node
    belongs to nobody in the report. Minutes before the job started and after it ended are
    another job's. Hand-computed: 2 GPUs x 600 minutes x 24 kJ = 28.8 MJ = 8 kWh."""
    from gpuwatch.sql.schema import job_gpus

    start = T0 + timedelta(days=1)
    with filled.begin() as conn:
        conn.execute(job_gpus.insert(), [{"job_id": "1", "node": "n1", "gpu_index": g} for g in (0, 1)])
    _minutes(filled, "n1", 0, start - timedelta(minutes=30), 30, 99_000.0)  # before the job
    _minutes(filled, "n1", 0, start, 600, 24_000.0)
    _minutes(filled, "n1", 1, start, 600, 24_000.0, estimated=6)  # no counter: all from power
    _minutes(filled, "n1", 0, start + timedelta(hours=10), 30, 99_000.0)  # after it ended
    _minutes(filled, "n1", 2, start, 600, 50_000.0)  # the node's other GPU: not the job's
    rows = {r.group: r for r in usage_report(filled, GroupBy.USER, *WEEK, co2_kg_per_kwh=0.25)}
    assert rows["alice"].energy_kwh == pytest.approx(8.0)
    assert rows["alice"].energy_estimated_share == pytest.approx(0.5)
    assert rows["alice"].co2_kg == pytest.approx(2.0)
    assert rows["bob"].energy_kwh == 0.0 and rows["bob"].energy_estimated_share is None
    # half the job inside the period: half its energy
    half = usage_report(filled, GroupBy.USER, T0, start + timedelta(hours=5))
    assert {r.group: r.energy_kwh for r in half}["alice"] == pytest.approx(4.0)
    assert usage_report(filled, GroupBy.USER, *WEEK)[0].co2_kg is None  # no intensity configured


def test_demo_energy_is_the_simulated_power_over_time(db_url, engine, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The simulated backend's energy counter is the integral of its polled power: a job's
    energy from the counter equals its GPUs' mean power x time, within the first sample's."""

    load_demo(db_url, cycles=None)
    monkeypatch.setenv("GPUWATCH_REPORT__GRID_CO2_KG_PER_KWH", "0.5")
    out = CliRunner().invoke(
        cli, ["--db", db_url, "report", "--by", "user", "--since", "1d", "--format", "json"]
    )
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    total_kwh = sum(r["energy_kwh"] for r in rows)
    with engine.connect() as conn:
        power = conn.execute(
            sa.select(sa.func.sum(gpu_minutes.c.power_watts_sum * 10.0))  # watts x 10 s per sample
        ).scalar()
    assert total_kwh == pytest.approx(power / 3.6e6, rel=0.03)
    assert all(r["co2_kg"] == pytest.approx(r["energy_kwh"] * 0.5, abs=1e-3) for r in rows)
    assert all(r["energy_estimated_share"] is None or r["energy_estimated_share"] < 0.05 for r in rows)


def _cgroup_minutes(engine, job_id: str, node: str, start: datetime, count: int, cores: float, alloc: float,
                    memory: int, limit: int) -> None:  # fmt: skip
    from gpuwatch.sql.nodes import get_node
    from gpuwatch.sql.schema import job_minutes

    with engine.connect() as conn:
        node_id = get_node(conn, node).id
    rows = [
        {
            "node_id": node_id, "job_id": job_id, "minute": start + timedelta(minutes=k), "samples": 6,
            "cpu_used_cores_sum": 6 * cores, "cpu_used_cores_n": 6, "cpu_allocated_cores": alloc,
            "memory_used_bytes_max": memory, "memory_limit_bytes": limit,
        }
        for k in range(count)
    ]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(job_minutes.insert(), rows)


def test_efficiency_cost_and_trend_hand_computed(filled) -> None:  # type: ignore[no-untyped-def]
    """alice's job 1: GPU 0 at 50 %, GPU 1 at 0 % (GPU efficiency 25 %), 2 of 8 cores busy,
    16 of 64 GiB; bob's job 3 billed 8 units an hour. At 2.00 a GPU-hour and 0.50 a billing-hour:
    alice 22 GPU-h = 44.00 (job 1's 10 of 20 GPU-h wasted: 20.00), bob 8 billing-hours = 4.00
    (all 4 GPU-h wasted). The week before the report's week alice's job 2 held 24 GPU-h, wasted
    none; this week 10 of 22."""
    from gpuwatch.sql.schema import job_gpus
    from gpuwatch.views.report import Prices

    start, gib = T0 + timedelta(days=1), 2**30
    with filled.begin() as conn:
        conn.execute(job_gpus.insert(), [{"job_id": "1", "node": "n1", "gpu_index": g} for g in (0, 1)])
        conn.execute(slurm_jobs.update().where(slurm_jobs.c.job_id == "3").values(tres={"billing": 8}))
    _minutes(filled, "n1", 0, start, 600, 1000.0, util=0.5)
    _minutes(filled, "n1", 1, start, 600, 1000.0, util=0.0)
    _cgroup_minutes(filled, "1", "n1", start, 600, cores=2.0, alloc=8.0, memory=16 * gib, limit=64 * gib)
    rows = {r.group: r for r in usage_report(filled, GroupBy.USER, *WEEK, prices=Prices(2.0, 0.5))}
    alice, bob = rows["alice"], rows["bob"]
    assert alice.gpu_efficiency == pytest.approx(0.25)
    assert alice.cpu_efficiency == pytest.approx(0.25) and alice.memory_efficiency == pytest.approx(0.25)
    assert bob.gpu_efficiency is None and bob.cpu_efficiency is None  # nothing measured
    assert (alice.cost, alice.cost_wasted) == (pytest.approx(44.0), pytest.approx(20.0))
    assert (bob.cost, bob.cost_wasted) == (pytest.approx(4.0), pytest.approx(4.0))
    assert alice.wasted_share_last_week == pytest.approx(10 / 22, abs=1e-4)
    assert alice.wasted_share_week_before == 0.0
    assert bob.wasted_share_week_before is None  # no GPU-hours that week
    unpriced = {r.group: r for r in usage_report(filled, GroupBy.USER, *WEEK)}
    assert unpriced["alice"].cost is None and unpriced["alice"].cost_wasted is None
    # what to request next time, counted over the jobs that ended in the period (job 1: 16 of
    # 64 GiB; no time limit known, 2 of 8 cores is not under a quarter): the memory only
    assert (alice.jobs_advised_memory, alice.jobs_advised_time, alice.jobs_advised_cpus) == (1, 0, 0)
    with filled.begin() as conn:  # a 48 h limit for a job that took 10 h
        conn.execute(slurm_jobs.update().where(slurm_jobs.c.job_id == "1").values(time_limit_s=48 * 3600))
    again = {r.group: r for r in usage_report(filled, GroupBy.USER, *WEEK)}["alice"]
    assert (again.jobs_advised_memory, again.jobs_advised_time) == (1, 1)
    running = {r.group: r for r in usage_report(filled, GroupBy.USER, T0, start + timedelta(hours=5))}
    assert running["alice"].jobs_advised_memory == 0  # job 1 had not ended yet: no advice counted


def test_one_groups_row_read_from_its_own_jobs_equals_the_full_reports(filled) -> None:  # type: ignore[no-untyped-def]
    """A user's page asks for one row (``group=``): the same figures as that user's row of the
    whole report, the trend included, and nothing for a group without jobs."""
    from gpuwatch.views.report import Prices

    prices = Prices(2.0, 0.5)
    for by in (GroupBy.USER, GroupBy.ACCOUNT):
        full = usage_report(filled, by, *WEEK, co2_kg_per_kwh=0.3, prices=prices)
        assert full
        for row in full:
            assert usage_report(filled, by, *WEEK, co2_kg_per_kwh=0.3, prices=prices, group=row.group) == [
                row
            ]
    assert usage_report(filled, GroupBy.USER, *WEEK, group="nobody") == []


def test_a_mig_instance_counts_its_share_of_the_card(engine) -> None:  # type: ignore[no-untyped-def]
    """Slurm counts a MIG slice as one GPU; the report counts it as the share of the card it is
    (``gpus.card_fraction_ratio``), as the verdicts' GPU-hours do: a 2g slice of seven for 7 h
    holds 2 GPU-hours, a whole GPU beside it 7. A job that held a slice and a whole card counts
    their mean share per GPU Slurm gave it."""
    from gpuwatch.sql.nodes import create_token, get_node
    from gpuwatch.sql.schema import gpus, job_gpus

    create_token(engine, "mig1")
    with engine.connect() as conn:
        node = get_node(conn, "mig1")
    start, end = T0 + timedelta(days=1), T0 + timedelta(days=1, hours=7)

    def gpu(index: int, fraction: float | None) -> dict:
        return {"node_id": node.id, "gpu_index": index, "card_fraction_ratio": fraction,
                "first_seen_at": start, "last_seen_at": end}  # fmt: skip

    with engine.begin() as conn:
        conn.execute(gpus.insert(), [gpu(0, None), gpu(1011, 2 / 7), gpu(1012, 1 / 7)])
        conn.execute(
            slurm_jobs.insert(),
            [
                job("m1", "mia", 1, start, end),
                job("w1", "wes", 1, start, end),
                job("x1", "xav", 2, start, end),
            ],
        )
        conn.execute(
            job_gpus.insert(),
            [
                {"job_id": "m1", "node": "mig1", "gpu_index": 1011},
                {"job_id": "w1", "node": "mig1", "gpu_index": 0},
                {"job_id": "x1", "node": "mig1", "gpu_index": 1012},
                {"job_id": "x1", "node": "mig1", "gpu_index": 0},
            ],
        )
    rows = {r.group: r.gpu_hours for r in usage_report(engine, GroupBy.USER, *WEEK)}
    assert rows == {"mia": pytest.approx(2.0, abs=1e-4), "wes": 7.0, "xav": pytest.approx(8.0, abs=1e-4)}


def test_a_period_asked_as_a_length_starts_on_the_hour(engine) -> None:  # type: ignore[no-untyped-def]
    from gpuwatch.views.report import WEEK, report_period, trend_weeks, weekly_history

    end = datetime(2026, 12, 7, 14, 37, 12, tzinfo=timezone.utc)
    assert report_period(timedelta(days=30), end) == (datetime(2026, 11, 7, 14, 0, tzinfo=timezone.utc), end)
    on_the_hour = end.replace(minute=0, second=0)
    assert report_period(WEEK, on_the_hour) == (on_the_hour - WEEK, on_the_hour)  # whole hours: as asked
    last, before = trend_weeks(end)
    assert last == report_period(WEEK, end) and before == (last[0] - WEEK, last[0])
    # the group pages' weeks are the trend's: the last ends at `end`, each starts on the hour
    weeks = weekly_history(engine, GroupBy.USER, "alice", end, weeks=3)
    assert [(w.start, w.end) for w in weeks[-2:]] == [before, last]
    assert weeks[0].end == weeks[1].start and all(w.start.minute == 0 for w in weeks)
