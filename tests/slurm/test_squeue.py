"""``squeue --json``: the recorded 22.05 output and the 24.05 data_parser shape."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from gpuwatch.slurm.errors import SlurmParseError
from gpuwatch.slurm.squeue import exit_status, parse_squeue_json

from .conftest import V2205, V2405

G = 1 << 30
M = 1 << 20


@pytest.fixture(scope="module")
def jobs22() -> dict[str, object]:
    return {j.job_id: j for j in parse_squeue_json((V2205 / "squeue.json").read_bytes())}


@pytest.fixture(scope="module")
def jobs24() -> dict[str, object]:
    return {j.job_id: j for j in parse_squeue_json((V2405 / "squeue.json").read_text())}


def test_22_gpu2_job(jobs22, ids) -> None:
    job = jobs22[ids["gpu2"]]
    assert job.source == "squeue-json"
    assert (job.name, job.user, job.uid, job.account, job.partition, job.qos) == (
        "train-gpu2", "alice", 2001, "physics", "debug", "normal",
    )  # fmt: skip
    assert job.state == "RUNNING"
    assert job.nodes == ("vm",)
    assert job.gpu_indices == {"vm": (0, 1)}
    assert job.gpus == 2
    assert job.cpus == 2
    assert job.memory_bytes == G
    assert job.time_limit_s == 30 * 60
    assert job.start == datetime(2026, 12, 2, 13, 33, 16, tzinfo=timezone.utc)
    assert job.end == datetime(2026, 12, 2, 14, 3, 16, tzinfo=timezone.utc)  # expected end
    assert job.tres == {"cpu": 2, "mem": G, "node": 1, "billing": 2, "gres/gpu": 2}
    assert job.exit_code is None and job.elapsed_s is None


def test_22_gpu1_cpu_pending_array(jobs22, ids) -> None:
    assert jobs22[ids["gpu1"]].gpu_indices == {"vm": (2,)}
    assert jobs22[ids["gpu1"]].gpus == 1
    cpu = jobs22[ids["cpu"]]
    assert (cpu.gpus, cpu.gpu_indices, cpu.memory_bytes) == (0, {}, 512 * M)
    pending = jobs22[ids["pending"]]
    assert (pending.state, pending.state_reason) == ("PENDING", "Resources")
    assert (pending.nodes, pending.start, pending.gpu_indices) == ((), None, {})
    assert pending.gpus == 4  # requested, from tres_req_str
    array_task_1 = jobs22["29"]
    assert (array_task_1.array_job_id, array_task_1.array_task_id, array_task_1.display_id) == (
        "28",
        "1",
        "28_1",
    )
    assert jobs22[ids["array"]].display_id == "28_2"


def test_22_finished_jobs_exit_codes(jobs22, ids) -> None:
    exit3 = jobs22[ids["exit3"]]
    assert (exit3.state, exit3.exit_code, exit3.exit_signal) == ("FAILED", 3, None)  # raw 768
    killed = jobs22[ids["killed"]]
    assert (killed.state, killed.exit_code, killed.exit_signal) == ("FAILED", None, 9)
    assert exit3.elapsed_s == 0
    assert jobs22["1"].state == "COMPLETED"


def test_22_all_jobs_parsed(jobs22) -> None:
    assert len(jobs22) == len(json.loads((V2205 / "squeue.json").read_text())["jobs"])


def test_24_multinode_job(jobs24) -> None:
    job = jobs24["4101"]
    assert job.state == "RUNNING"
    assert job.nodes == ("gpu01", "gpu02")
    assert job.gpu_indices == {"gpu01": (0, 1, 2, 3), "gpu02": (0, 1, 2, 3)}
    assert (job.gpus, job.cpus, job.memory_bytes, job.time_limit_s) == (8, 16, 128 * G, 7200)
    assert job.start == datetime.fromtimestamp(1733140005, tz=timezone.utc)


def test_24_other_jobs(jobs24) -> None:
    assert jobs24["4102"].gpu_indices == {"gpu03": (1, 3)}
    assert (jobs24["4102"].user, jobs24["4102"].uid, jobs24["4102"].account) == ("bob", 2002, "chem")
    assert (jobs24["4103"].gpus, jobs24["4103"].gpu_indices) == (0, {})
    sweep = jobs24["4105"]
    assert (sweep.display_id, sweep.gpus, sweep.gpu_indices) == ("4104_3", 1, {"gpu04": (7,)})
    assert (sweep.time_limit_s, sweep.end) == (None, None)  # infinite
    assert jobs24["4104"].array_task_id is None  # pending array: task_id not set
    assert (jobs24["4106"].state, jobs24["4106"].state_reason, jobs24["4106"].gpus) == (
        "PENDING",
        "Resources",
        16,
    )
    assert (jobs24["4090"].state, jobs24["4090"].exit_code) == ("FAILED", 2)
    oom = jobs24["4091"]
    assert (oom.state, oom.exit_code, oom.exit_signal) == ("OUT_OF_MEMORY", None, 9)


def test_exit_status_encodings() -> None:
    assert exit_status(768) == (3, None)
    assert exit_status(9) == (None, 9)
    assert exit_status(0) == (0, None)
    assert exit_status(None) == (None, None)
    assert exit_status({"return_code": {"set": True, "infinite": False, "number": 1}}) == (1, None)
    assert exit_status({"return_code": None, "signal": {"signal_id": 15, "name": "Terminated"}}) == (None, 15)


@pytest.mark.parametrize("bad", ["", "not json", "[1, 2]", '{"meta": {}}', '{"jobs": 3}', b"\xff\xfe"])
def test_bad_documents_raise(bad: str | bytes) -> None:
    with pytest.raises(SlurmParseError):
        parse_squeue_json(bad)


def test_odd_jobs_do_not_crash() -> None:
    doc = {
        "jobs": [
            "not an object",
            {"name": "no id"},
            {"job_id": 5},
            {"job_id": 6, "job_state": 42, "nodes": "n[1-", "gres_detail": "gpu(IDX:0)", "cpus": "x",
             "tres_alloc_str": 7, "time_limit": {"weird": 1}, "job_resources": []},
        ],
        "errors": [{"error": "partial"}],
    }  # fmt: skip
    jobs = parse_squeue_json(doc)
    assert [j.job_id for j in jobs] == ["5", "6"]
    assert jobs[0].state is None and jobs[0].nodes == () and jobs[0].gpus is None
    assert jobs[1].nodes == () and jobs[1].cpus is None
