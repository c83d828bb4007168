"""MIG instances end to end, on SQLite and PostgreSQL: the fake NVML behind the real backend,
agent (GPU and attribution collectors) -> HTTP -> daemon -> rollups -> classifier ->
``gpuwatch jobs --low-util --format json``.

A mixed node: card 0 a whole H200 running nobody's job, card 1 an H200 in MIG mode with a 1g,
a 1g, a 2g and a 3g instance. Job A holds the first 1g instance and keeps its graphics engine
85 % busy; job B holds the 2g instance, has 6 GiB in it and computes nothing. The Slurm prolog
named both by their MIG UUIDs (CUDA_VISIBLE_DEVICES). NVML utilization is not supported on a
MIG instance, so the only activity signal is GPM's graphics-engine activity
(``nvmlGpmMigSampleGet``): B must be listed as an idle allocation of 2/7 of a card — its
GPU-hours are the instance's share of the card, not whole GPU-hours — and A must not be listed.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from click.testing import CliRunner

from gpuwatch.collectors.nvml_backend import NvmlBackend, mig_index
from tests.gpu.fake_pynvml import FakeNvml
from tests.live_daemon import paused_daemon, recent_span, run_agent

pytestmark = pytest.mark.slow

MINUTES = 8
INTERVAL_S = 10.0
GIB = 1024**3


def _mixed_node() -> tuple[FakeNvml, dict[str, str]]:
    """The node, and job id -> the MIG UUID its prolog file names."""
    fake = FakeNvml(["H200", "H200"])
    whole, card = fake.gpus
    whole.util_gpu, whole.power_mw = 0, 90_000
    card.power_mw, card.temperature = 250_000, 50
    busy, _spare, idle, _large = card.enable_mig([1, 1, 2, 3])
    busy.busy(85.0)
    busy.memory_used, busy.processes = 12 * GIB, [(4101, 12 * GIB)]
    idle.busy(0.0)  # GPM answers, and says the engine did nothing
    idle.memory_used, idle.processes = 6 * GIB, [(4202, 6 * GIB)]
    return fake, {"7001": busy.uuid, "7002": idle.uuid}


def test_mig_jobs_through_agent_daemon_classifier_and_cli(tmp_path: Path, db_url: str) -> None:
    from gpuwatch.classify.runner import evaluate_running
    from gpuwatch.cli.main import cli
    from gpuwatch.collectors.attribution import AttributionCollector
    from gpuwatch.collectors.gpu import GpuCollector
    from gpuwatch.collectors.gpu_processes import GPU_PROCESSES
    from gpuwatch.config import HostPaths
    from gpuwatch.sql.rollups import Rollup
    from gpuwatch.sql.schema import gpus, slurm_jobs
    from gpuwatch.workload.validate import validate_thresholds

    fake, jobs = _mixed_node()
    backend = NvmlBackend(nvml=fake, start_poller=False, clock=fake.clock, watch_events=False)
    host = HostPaths(
        proc=tmp_path / "proc", run=tmp_path / "run", sys=tmp_path / "sys", cgroup=tmp_path / "cg"
    )
    host.gpu_map_dir.mkdir(parents=True)
    for job, uuid in jobs.items():  # what deploy/slurm/prolog.sh writes for a MIG job
        (host.gpu_map_dir / uuid).write_text(
            f"job_id={job}\nuid=2001\nuser=alice\nstep=\ngpu_index=\ngpu_uuid={uuid}\nwritten_at=1\n"
        )
    span = recent_span(MINUTES, INTERVAL_S)
    start, end = span.start, span.end
    node = "h200-mig01"

    def poll() -> None:
        fake.advance(INTERVAL_S)
        backend.poll()

    try:
        with paused_daemon(db_url) as server:
            # the GPU collector publishes its samples on the process-wide board, which the
            # attribution collector reads in the same cycle
            collectors = [GpuCollector(backend), AttributionCollector(host, max_age_s=INTERVAL_S / 2)]
            run_agent(server, node, collectors, span, tmp_path, poll)
            engine = server.engine
            with engine.begin() as conn:
                conn.execute(
                    slurm_jobs.insert(),
                    [
                        {"job_id": job, "source": "squeue", "user_name": "alice", "state": "RUNNING",
                         "start_at": start, "account": "lab", "partition": "mig",
                         "first_seen_at": start, "updated_at": end}
                        for job in jobs
                    ],
                )  # fmt: skip
            Rollup(engine).roll(start - timedelta(minutes=1), end + timedelta(minutes=1))
            evaluated = evaluate_running(engine, end + timedelta(minutes=1), validate_thresholds(MINUTES))
            with engine.connect() as conn:
                stored = {r.gpu_index: r for r in conn.execute(sa.select(gpus))}
    finally:
        backend.close()
        GPU_PROCESSES.clear()

    # the daemon knows the instances as GPUs of their own, with their card and share of it
    idle_index = mig_index(1, 2)
    assert sorted(stored) == [0, 1, 1010, 1011, 1012, 1013]
    assert stored[idle_index].uuid == jobs["7002"] and stored[idle_index].parent_gpu_index == 1
    assert stored[idle_index].card_fraction_ratio == pytest.approx(2 / 7)
    assert stored[1].card_fraction_ratio is None  # the card itself: a whole GPU row, no job on it

    busy_job = next(v for v in evaluated["7001"] if v.window_kind == "job")
    idle_job = next(v for v in evaluated["7002"] if v.window_kind == "job")
    assert busy_job.cause.value == "healthy", busy_job
    assert idle_job.cause.value == "idle_allocation", idle_job
    assert idle_job.evidence["signals"]["idle_gpus"] == [f"{node}/gpu{idle_index}"]
    mig = idle_job.evidence["mig"]
    assert mig["util_signal"] == "gr_engine_active" and mig["cards"] == pytest.approx(2 / 7, abs=1e-4)
    assert mig["card_fraction"] == {f"{node}/gpu{idle_index}": pytest.approx(2 / 7, abs=1e-4)}
    assert busy_job.mean_util_ratio == pytest.approx(0.85, abs=0.01)  # graphics-engine activity

    result = CliRunner().invoke(
        cli,
        ["--db", db_url, "jobs", "--low-util", "--since", "1000w", "--format", "json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    listed = {row["job_id"]: row for row in json.loads(result.output)}
    assert "7001" not in listed
    row = listed["7002"]
    assert row["cause"] == "idle_allocation" and row["gpus"] == 1 and row["mean_util_ratio"] == 0.0
    # MINUTES-odd minutes of a 2/7 instance: 2/7 of those GPU-hours, all of them wasted
    minutes = round(row["gpu_hours"] * 60 * 7 / 2)
    assert MINUTES <= minutes <= MINUTES + 2, row
    assert row["gpu_hours"] == pytest.approx(minutes / 60 * 2 / 7, abs=1e-3)
    assert row["gpu_hours_wasted"] == pytest.approx(row["gpu_hours"], abs=1e-3)
