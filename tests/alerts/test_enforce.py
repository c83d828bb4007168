"""Enforcement: warn, then scancel jobs whose GPUs all stay at 0%; allow-list; dry run.

``scancel`` here is a fake on PATH that records its arguments; the one live test (marked
``slurm``) cancels a real sleeping job on the test cluster."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from datetime import timedelta

import pytest
import sqlalchemy as sa

from gpuwatch.alerts import outbox
from gpuwatch.alerts.enforce import Enforcer
from gpuwatch.alerts.worker import Worker
from gpuwatch.sql.schema import enforcement_actions
from gpuwatch.views import idle_jobs
from tests.alerts.conftest import T0, Clock, add_job, add_verdict, make_config
from tests.slurm.conftest import slurm_cluster  # noqa: F401  (the live cluster fixture)

HALF_HOUR = 1800


@pytest.fixture
def fake_scancel(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "scancel.log"
    script = bin_dir / "scancel"
    script.write_text(f'#!/bin/sh\necho "$@" >> {log}\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def calls(log) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def idle_for(engine, job_id: str, until, half_hours: int, **kw) -> None:
    for k in range(half_hours):
        add_verdict(
            engine, job_id, evaluated_at=until - timedelta(seconds=k * HALF_HOUR), window_s=HALF_HOUR, **kw
        )


def _cfg(mode: str, smtp_port: int | None = None, **enforcement):
    return make_config(
        smtp_port=smtp_port,
        slack_url="http://127.0.0.1:9/hook",
        enforcement={
            "mode": mode,
            "warn_after_s": 3600,
            "cancel_after_s": 7200,
            "min_warning_s": 1800,
            **enforcement,
        },
    )


def test_idle_streak_starts_after_the_last_busy_evaluation(engine):
    add_job(engine, "1")
    idle_for(engine, "1", T0, 3)
    add_verdict(engine, "1", "input_bound", evaluated_at=T0 - timedelta(seconds=3 * HALF_HOUR), mean_util=0.4)
    idle_for(engine, "1", T0 - timedelta(seconds=4 * HALF_HOUR), 4)
    add_job(engine, "2")
    idle_for(engine, "2", T0, 3, mean_util=0.02)  # low, but not 0%
    add_job(engine, "3", state="COMPLETED")
    idle_for(engine, "3", T0, 3)
    add_job(engine, "4")
    # one of 4 GPUs was not idle (the shape the idle rule writes)
    idle_for(engine, "4", T0, 3, evidence={"signals": {"idle_gpus": ["n/gpu0", "n/gpu1", "n/gpu2"]}})
    cfg = _cfg("on")
    since = T0 - timedelta(seconds=cfg.lookback_s)
    [job] = idle_jobs(engine, evaluated_since=since, max_util_ratio=cfg.enforcement.idle_util_max_ratio)
    assert job.job_id == "1" and job.idle_since == T0 - timedelta(seconds=3 * HALF_HOUR)
    assert job.idle_s == 3 * HALF_HOUR


def test_off_does_nothing(engine, fake_scancel):
    add_job(engine, "5")
    idle_for(engine, "5", T0, 8)
    assert Enforcer(engine, _cfg("off")).run_once(T0) == []
    assert calls(fake_scancel) == [] and outbox.list_rows(engine) == []


def test_warn_then_cancel_once(engine, fake_scancel, smtp_server):
    cfg = _cfg("on", smtp_port=smtp_server.port, command_prefix=["env", "GPUWATCH_ENFORCE=1"])
    clock = Clock(T0)
    add_job(engine, "6", user="frank")
    idle_for(engine, "6", T0, 2)  # idle 1 h: warn
    enforcer = Enforcer(engine, cfg)
    assert [(a.action, a.dry_run) for a in enforcer.run_once(clock.now)] == [("warn", False)]
    assert enforcer.run_once(clock.now) == []
    warn = next(r for r in outbox.list_rows(engine) if r.channel == "email")
    assert warn.recipient == "frank@example.edu" and "will be cancelled" in warn.subject
    # idle 2 h, but the warning has not been sent yet (the mail worker has not run): no cancel
    clock.advance(2 * HALF_HOUR)
    idle_for(engine, "6", clock.now, 2)
    assert enforcer.run_once(clock.now) == []
    assert (
        Worker(engine, cfg, clock=clock, channels={"email": Worker(engine, cfg).channels["email"]})
        .run_once()
        .sent
    )
    assert [m["To"] for m in smtp_server.messages] == ["frank@example.edu"]
    assert (
        "have been at 0% utilization since 2026-12-02 11:00 UTC"
        in smtp_server.messages[0].get_body(("plain",)).get_content()
    )
    # sent just now: wait min_warning_s
    clock.advance(HALF_HOUR)
    idle_for(engine, "6", clock.now, 1)
    [cancel] = enforcer.run_once(clock.now)
    assert cancel.action == "cancel" and cancel.returncode == 0
    assert cancel.command == ["env", "GPUWATCH_ENFORCE=1", "scancel", "6"]
    assert calls(fake_scancel) == ["6"]
    clock.advance(HALF_HOUR)
    idle_for(engine, "6", clock.now, 1)
    assert enforcer.run_once(clock.now) == []
    assert calls(fake_scancel) == ["6"]
    subjects = sorted(r.subject for r in outbox.list_rows(engine) if r.channel == "email")
    assert subjects == [
        "[gpuwatch] Job 6 was cancelled: its GPUs stayed idle",
        "[gpuwatch] Job 6 will be cancelled: its GPUs are idle",
    ]
    with engine.connect() as conn:
        row = conn.execute(
            sa.select(enforcement_actions).where(enforcement_actions.c.action == "cancel")
        ).one()
    assert row.returncode == 0 and row.dry_run is False


def test_dry_run_cancels_nothing_and_tells_only_admins(engine, fake_scancel, smtp_server):
    cfg = _cfg("dry_run", smtp_port=smtp_server.port)
    add_job(engine, "7", user="gina")
    idle_for(engine, "7", T0, 6)  # idle 3 h
    enforcer = Enforcer(engine, cfg)
    assert [(a.action, a.dry_run) for a in enforcer.run_once(T0)] == [("warn", True)]
    later = T0 + timedelta(seconds=HALF_HOUR)
    idle_for(engine, "7", later, 1)
    [cancel] = enforcer.run_once(later)
    assert (cancel.action, cancel.dry_run, cancel.command) == ("cancel", True, ["scancel", "7"])
    assert calls(fake_scancel) == []
    rows = outbox.list_rows(engine)
    assert {r.channel for r in rows} == {"slack"}
    assert all(r.subject.startswith("[dry run] would have") for r in rows)
    # switching to 'on' later is not blocked by the dry-run records
    assert [a.action for a in Enforcer(engine, _cfg("on", smtp_port=smtp_server.port)).run_once(later)] == [
        "warn"
    ]


def test_allow_list(engine, fake_scancel):
    for job, kw in (("8", {"user": "vip"}), ("9", {"account": "protected"}), ("10", {"partition": "debug"})):
        add_job(engine, job, **kw)
        idle_for(engine, job, T0, 8)
    cfg = _cfg("on", allow_users=["vip"], allow_accounts=["protected"], allow_partitions=["debug"])
    assert Enforcer(engine, cfg).run_once(T0) == []


@pytest.mark.slurm
@pytest.mark.slow
def test_live_scancel_of_a_sleeping_job(sqlite_url, slurm_cluster, smtp_server):  # noqa: F811
    from gpuwatch.sql import migrate
    from gpuwatch.sql.engine import create_engine

    engine = create_engine(sqlite_url)
    migrate.upgrade(engine)
    proc = subprocess.run(
        [
            "sbatch",
            "--parsable",
            "-J",
            "gpuwatch-enforce",
            "-t",
            "5",
            "-o",
            "/dev/null",
            "--wrap",
            "sleep 300",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    job_id = proc.stdout.strip().split(";")[0]
    try:
        add_job(engine, job_id, user="slurmuser")
        idle_for(engine, job_id, T0, 2)
        cfg = _cfg("on", smtp_port=smtp_server.port, min_warning_s=0)
        enforcer = Enforcer(engine, cfg)
        assert [a.action for a in enforcer.run_once(T0)] == ["warn"]
        assert Worker(engine, cfg, clock=Clock(T0)).run_once().sent == 1
        later = T0 + timedelta(seconds=2 * HALF_HOUR)
        idle_for(engine, job_id, later, 2)
        [cancel] = enforcer.run_once(later)
        assert cancel.returncode == 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = subprocess.run(
                ["squeue", "-h", "-j", job_id, "-o", "%T"],
                capture_output=True,
                text=True,
                timeout=15,
                check=False,
            ).stdout.strip()
            if state in ("", "CANCELLED", "COMPLETING"):
                break
            time.sleep(0.5)
        assert state in ("", "CANCELLED", "COMPLETING")
    finally:
        if shutil.which("scancel"):
            subprocess.run(["scancel", job_id], timeout=30, check=False)
        engine.dispose()
