"""Against the live cluster of tests/slurm/start-slurm.sh (skips without it, fails in CI)."""

from __future__ import annotations

import os
import pwd
import subprocess
import time
from datetime import datetime, timedelta, timezone

import pytest

from gpuwatch.slurm.commands import SlurmClient
from gpuwatch.slurm.model import SlurmJob

pytestmark = [pytest.mark.slurm, pytest.mark.slow]


def _wait_for(client: SlurmClient, job_id: str, predicate, timeout_s: float = 45) -> SlurmJob:
    deadline = time.monotonic() + timeout_s
    last: SlurmJob | None = None
    while time.monotonic() < deadline:
        last = next((j for j in client.jobs() if j.job_id == job_id), None)
        if last is not None and predicate(last):
            return last
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not get there in {timeout_s} s; last seen: {last}")


def test_sbatch_gpu2_job_is_parsed(slurm_cluster: None) -> None:
    user = pwd.getpwuid(os.getuid()).pw_name
    since = datetime.now(timezone.utc) - timedelta(seconds=5)
    job_id = subprocess.run(
        ["sbatch", "--parsable", "-J", "gpuwatch-live", "--gres=gpu:2", "-t", "5", "-o", "/dev/null",
         "-D", "/tmp", "--wrap", "sleep 120"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.strip().split(";")[0]  # fmt: skip
    client = SlurmClient(timeout_s=30)
    try:
        job = _wait_for(client, job_id, lambda j: j.state == "RUNNING")
        assert client.squeue_json is True
        assert (job.user, job.uid, job.name, job.state) == (user, os.getuid(), "gpuwatch-live", "RUNNING")
        assert job.gpus == 2
        ((node, indices),) = job.gpu_indices.items()
        assert node in job.nodes
        assert len(indices) == 2 and all(0 <= i < 64 for i in indices)
        # the fallback parser sees the same allocation
        fallback = SlurmClient(timeout_s=30)
        fallback.squeue_json = False
        again = next(j for j in fallback.jobs() if j.job_id == job_id)
        assert (again.user, again.state, again.gpu_indices) == (user, "RUNNING", job.gpu_indices)
    finally:
        subprocess.run(["scancel", job_id], timeout=30, check=False)
    _wait_for(client, job_id, lambda j: j.finished)
    deadline = time.monotonic() + 30
    while True:  # slurmdbd records the end asynchronously
        ended = {j.job_id: j for j in client.finished_jobs(since)}
        if job_id in ended and ended[job_id].state == "CANCELLED":
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"sacct never showed job {job_id} CANCELLED: {ended.get(job_id)}")
        time.sleep(1)
    assert (ended[job_id].user, ended[job_id].gpus) == (user, 2)
