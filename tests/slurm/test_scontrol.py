"""``scontrol show job -d -o`` (recorded on 22.05), the fallback parser."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from gpuwatch.slurm.errors import SlurmParseError
from gpuwatch.slurm.scontrol import parse_scontrol_jobs, tokenize

from .conftest import V2205

G = 1 << 30


@pytest.fixture(scope="module")
def jobs() -> dict[str, object]:
    return {
        j.job_id: j
        for j in parse_scontrol_jobs((V2205 / "scontrol_show_job.txt").read_text(), tz=timezone.utc)
    }


def test_gpu2_job(jobs, ids) -> None:
    job = jobs[ids["gpu2"]]
    assert job.source == "scontrol"
    assert (job.name, job.user, job.uid, job.account, job.qos, job.state) == (
        "train-gpu2", "alice", 2001, "physics", "normal", "RUNNING",
    )  # fmt: skip
    assert job.gpu_indices == {"vm": (0, 1)}
    assert (job.gpus, job.cpus, job.memory_bytes, job.time_limit_s) == (2, 2, G, 1800)
    assert job.start == datetime(2026, 12, 2, 13, 33, 16, tzinfo=timezone.utc)
    assert job.nodes == ("vm",)


def test_same_jobs_as_squeue(jobs, ids) -> None:
    from gpuwatch.slurm.squeue import parse_squeue_json

    squeue = {j.job_id: j for j in parse_squeue_json((V2205 / "squeue.json").read_text())}
    for role in ("gpu2", "gpu1", "cpu", "pending", "array"):
        a, b = jobs[ids[role]], squeue[ids[role]]
        assert (a.user, a.uid, a.state, a.gpu_indices, a.gpus, a.memory_bytes, a.display_id) == (
            b.user, b.uid, b.state, b.gpu_indices, b.gpus, b.memory_bytes, b.display_id,
        ), role  # fmt: skip


def test_other_recorded_jobs(jobs, ids) -> None:
    assert jobs[ids["gpu1"]].gpu_indices == {"vm": (2,)}
    pending = jobs[ids["pending"]]
    assert (pending.state, pending.state_reason, pending.nodes, pending.start) == (
        "PENDING",
        "Resources",
        (),
        None,
    )
    assert (jobs[ids["exit3"]].exit_code, jobs[ids["killed"]].exit_signal) == (3, 9)
    assert (jobs["29"].array_job_id, jobs["29"].array_task_id) == ("28", "1")


def test_single_job_file(ids) -> None:
    (job,) = parse_scontrol_jobs((V2205 / "scontrol_show_job_gpu2.txt").read_bytes())
    assert job.job_id == ids["gpu2"] and job.gpu_indices == {"vm": (0, 1)}


def test_multi_node_detail_groups_and_spaces() -> None:
    line = (
        "JobId=77 JobName=my job UserId=bob(1002) Account=a JobState=PENDING Reason=(ReqNodeNotAvail, "
        "UnavailableNodes:n3) NodeList=n[1-3] NumCPUs=12 TRES=cpu=12,mem=3G,node=3,gres/gpu=5 "
        "Nodes=n[1-2] CPU_IDs=0-3 Mem=1024 GRES=gpu:a100:2(IDX:0-1) "
        "Nodes=n3 CPU_IDs=0-3 Mem=1024 GRES=gpu:a100:1(IDX:3) MinCPUsNode=4 TimeLimit=1-00:00:00"
    )
    (job,) = parse_scontrol_jobs(line)
    assert job.name == "my job"
    assert job.state_reason == "(ReqNodeNotAvail, UnavailableNodes:n3)"
    assert job.nodes == ("n1", "n2", "n3")
    assert job.gpu_indices == {"n1": (0, 1), "n2": (0, 1), "n3": (3,)}
    assert (job.gpus, job.time_limit_s, job.uid) == (5, 86400, 1002)


def test_tokenize_keeps_order_and_duplicates() -> None:
    assert tokenize("JobId=1 Nodes=a GRES= Nodes=b") == [
        ("JobId", "1"),
        ("Nodes", "a"),
        ("GRES", ""),
        ("Nodes", "b"),
    ]


def test_empty_and_bad_output() -> None:
    assert parse_scontrol_jobs("") == []
    assert parse_scontrol_jobs("No jobs in the system\n") == []
    with pytest.raises(SlurmParseError):
        parse_scontrol_jobs('{"jobs": []}')
    assert parse_scontrol_jobs("JobId=abc JobName=x\nJobId=5 UserId=4242 JobState=R")[0].uid == 4242
