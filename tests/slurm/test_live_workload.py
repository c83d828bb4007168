"""The reference workload as a real Slurm job: Slurm, the agent's attribution and the
workload-driven GPU simulation agree on which job holds which GPU and what it does with it."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from gpuwatch.collectors.attribution import AttributionCollector
from gpuwatch.collectors.gpu_processes import GpuProcessBoard
from gpuwatch.config import HostPaths, SlurmConfig
from gpuwatch.daemon.slurm_sync import SlurmSync
from gpuwatch.slurm.commands import SlurmClient
from gpuwatch.sql.schema import job_gpus, slurm_jobs
from gpuwatch.wire import GpuProcess, GpuSample
from tests.slurm.test_live_sync import gpus_given, job_env, wait_pids

pytest.importorskip("torch")
pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def test_input_bound_workload_job(slurm_cluster: None, engine: sa.Engine, tmp_path: Path) -> None:
    from gpuwatch.collectors.activity_stream import read_stream, shares
    from gpuwatch.collectors.workload_backend import WorkloadDrivenBackend

    activity = tmp_path / "activity.jsonl"
    tmp_path.chmod(0o777)
    # as root: this venv's interpreter lives under /root, which the test user cannot read
    command = f"{sys.executable} -m gpuwatch workload --scenario input-bound --duration 12"
    command += f" --activity-file {activity}"
    out = subprocess.run(  # --mem: torch needs more than the test cluster's 256 MB per CPU
        ["sbatch", "--parsable", "-J", "gw-workload", "-t", "3", "--gres=gpu:1", "--mem=2G",
         "-o", str(tmp_path / "out"), "-D", str(tmp_path), "--wrap", command],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    job = out.strip().split(";")[0]
    try:
        deadline = time.monotonic() + 60
        while not (activity.exists() and len(activity.read_text().splitlines()) > 5):
            assert time.monotonic() < deadline, (
                (tmp_path / "out").read_text() if (tmp_path / "out").exists() else ""
            )
            time.sleep(0.5)
        pids = wait_pids(job)
        (gpu,) = gpus_given(job_env(pids[0]))

        sync = SlurmSync(engine, SlurmClient(timeout_s=30), SlurmConfig(enabled=True))
        assert sync.sync_running() is not None, sync.failures
        with engine.connect() as conn:
            row = conn.execute(sa.select(slurm_jobs).where(slurm_jobs.c.job_id == job)).mappings().one()
            held = (
                conn.execute(sa.select(job_gpus.c.gpu_index).where(job_gpus.c.job_id == job)).scalars().all()
            )
        assert row["name"] == "gw-workload" and row["state"] == "RUNNING" and held == [gpu]

        # the agent: the workload's processes on the job's GPU -> attributed through their cgroup
        now = datetime.now(timezone.utc)
        board = GpuProcessBoard()
        board.publish([GpuSample(ts=now, gpu_index=gpu, processes=[GpuProcess(pid=p) for p in pids])])
        got = AttributionCollector(HostPaths(run=tmp_path / "no-prolog"), board).collect(now)
        assert [(s.gpu_index, s.job_id, s.source) for s in got] == [(gpu, job, "process")]
    finally:
        subprocess.run(["scancel", job], timeout=30, check=False)

    # what the job did, seen through the simulated GPU its own step timing drives
    stream = read_stream(activity)
    assert stream.header.scenario == "input-bound"
    steps = [r for r in stream.records if r.kind == "step"]
    # most of each step waits on the loader; 0.39 measured with two CPU hogs on a 2-core
    # machine (the loader and the CPU-side "GPU" step slow down together), so not 0.4
    assert shares(steps)["wait_share"] > 0.25, "input-bound: the GPU waits on the data loader"
    start = datetime.fromtimestamp(stream.header.wall_time, timezone.utc)
    backend = WorkloadDrivenBackend(activity, gpus=1, poll_interval_s=0.1, interval_s=6.0, start=start)
    (sample,) = backend.sample(start + timedelta(seconds=min(steps[-1].end, 10.0)))
    assert sample.simulated and sample.util_gpu_idle_fraction_ratio is not None
    assert sample.util_gpu_idle_fraction_ratio > 0.3 and (sample.util_gpu_ratio or 0) < 0.6
    backend.close()
