"""``gpuwatch report``: GPU-hours held and wasted per user/account/partition, on both databases."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from gpuwatch.cli.main import cli
from gpuwatch.cli.report import REPORT_KEYS
from gpuwatch.sql.schema import slurm_jobs, verdicts
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
    # bob's two causes add to 12 GPU-h, but he held 4: capped, in proportion
    assert (bob.gpu_hours, bob.gpu_hours_wasted, bob.wasted_share) == (4.0, 4.0, 1.0)
    assert bob.top_cause == "input_bound" and bob.top_cause_gpu_hours == pytest.approx(8 / 12 * 4, abs=1e-4)
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
    by_account = CliRunner().invoke(cli, ["--db", db_url, "report", "--by", "account", "--format", "json"])
    assert [r["account"] for r in json.loads(by_account.output)] == ["demo-lab"]


def test_report_cli_refuses_a_time_without_zone(db_url) -> None:  # type: ignore[no-untyped-def]
    out = CliRunner().invoke(cli, ["--db", db_url, "report", "--until", "2026-12-01T00:00"])
    assert out.exit_code == 2 and "give a time zone" in out.output
