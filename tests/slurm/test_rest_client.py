"""slurmrestd as the sync's source: the same jobs, users and GPU indices as the commands give."""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuwatch.slurm.commands import SlurmClient, SlurmCommandError
from gpuwatch.slurm.rest import SlurmRestClient
from tests.slurm.test_live_sync import Jobs

REST_SOCK = os.environ.get("SLURM_REST_SOCK", "/run/slurmrestd/slurmrestd.sock")


@pytest.fixture
def rest(slurm_cluster: None) -> SlurmRestClient:
    if not Path(REST_SOCK).is_socket():
        message = f"slurmrestd socket {REST_SOCK} missing (tests/slurm/start-slurm.sh starts it)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return SlurmRestClient(f"unix:{REST_SOCK}", timeout_s=30)


@pytest.mark.slurm
def test_rest_and_commands_agree_on_running_jobs(rest):
    jobs = Jobs()
    try:
        gpu_job = jobs.submit("rest-gpu2", "--gres=gpu:2")
        cpu_job = jobs.submit("rest-cpu")
        jobs.running(gpu_job, cpu_job)
        by_rest = {j.job_id: j for j in rest.jobs()}
        by_cmd = {j.job_id: j for j in SlurmClient(timeout_s=30).jobs()}
        for job_id in (gpu_job, cpu_job):
            a, b = by_rest[job_id], by_cmd[job_id]
            assert (a.user, a.account, a.state, a.nodes, a.gpu_indices) == (
                b.user,
                b.account,
                b.state,
                b.nodes,
                b.gpu_indices,
            )
        assert sum(len(v) for v in by_rest[gpu_job].gpu_indices.values()) == 2
        assert by_rest[cpu_job].gpu_indices == {}
    finally:
        jobs.cancel()
    since = datetime.now(timezone.utc) - timedelta(minutes=10)
    deadline = time.monotonic() + 30  # slurmctld reports to slurmdbd asynchronously
    while gpu_job not in (finished := {j.job_id: j for j in rest.finished_jobs(since)}):
        assert time.monotonic() < deadline, f"job {gpu_job} never reached slurmdbd"
        time.sleep(1)
    assert finished[gpu_job].user == jobs.user


@pytest.mark.slurm
def test_rest_errors_are_command_errors(rest, tmp_path):
    with pytest.raises(SlurmCommandError, match="unreachable"):
        SlurmRestClient(f"unix:{tmp_path / 'nope.sock'}", timeout_s=2).jobs()
    with pytest.raises(SlurmCommandError, match=r"HTTP 404|slurmrestd errors"):
        SlurmRestClient(f"unix:{REST_SOCK}", api_version="v9.9.9", timeout_s=10).jobs()
