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


def test_report_cli_refuses_a_time_without_zone(db_url) -> None:  # type: ignore[no-untyped-def]
    out = CliRunner().invoke(cli, ["--db", db_url, "report", "--until", "2026-12-01T00:00"])
    assert out.exit_code == 2 and "give a time zone" in out.output


def _minutes(
    engine, node: str, gpu: int, start: datetime, count: int, joules: float, estimated: int = 0
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
