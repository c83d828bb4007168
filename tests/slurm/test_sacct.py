"""``sacct --json`` (22.05 recorded, 24.05 documented shape) and ``sacct -P`` (recorded)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from gpuwatch.slurm.errors import SlurmParseError
from gpuwatch.slurm.sacct import DEFAULT_FIELDS, parse_sacct_json, parse_sacct_parsable

from .conftest import V2205, V2405

G = 1 << 30
M = 1 << 20


@pytest.fixture(scope="module")
def json22() -> dict[str, object]:
    return {j.job_id: j for j in parse_sacct_json((V2205 / "sacct.json").read_text())}


@pytest.fixture(scope="module")
def text22() -> dict[str, object]:
    return {
        j.job_id: j for j in parse_sacct_parsable((V2205 / "sacct_parsable.txt").read_text(), tz=timezone.utc)
    }


def test_json22_states_and_resources(json22, ids) -> None:
    gpu2 = json22[ids["gpu2"]]
    assert gpu2.source == "sacct-json"
    assert (gpu2.state, gpu2.user, gpu2.account, gpu2.partition) == ("CANCELLED", "alice", "physics", "debug")
    assert (gpu2.gpus, gpu2.cpus, gpu2.memory_bytes, gpu2.elapsed_s, gpu2.time_limit_s) == (2, 2, G, 46, 1800)
    assert gpu2.gpu_indices == {}  # sacct has no IDX
    assert gpu2.nodes == ("vm",)
    assert gpu2.end == datetime(2026, 12, 2, 13, 34, 2, tzinfo=timezone.utc)
    assert json22[ids["gpu1"]].state == "FAILED"
    assert json22[ids["cpu"]].state == "COMPLETED"
    assert json22[ids["cpu"]].gpus is None
    assert json22[ids["killed"]].exit_signal == 9
    # 22.05 quirk (recorded): the JSON says 0 for a job that exited 3
    assert json22[ids["exit3"]].exit_code == 0
    pending = json22[ids["pending"]]
    # never started: no allocation, so the requested TRES stand in
    assert (pending.state, pending.start, pending.nodes, pending.gpus) == ("CANCELLED", None, (), 4)
    assert (json22["29"].array_job_id, json22["29"].array_task_id) == ("28", "1")


def test_parsable22(text22, ids) -> None:
    gpu2 = text22[ids["gpu2"]]
    assert gpu2.source == "sacct-parsable"
    assert (gpu2.state, gpu2.user, gpu2.gpus, gpu2.memory_bytes, gpu2.elapsed_s) == (
        "CANCELLED",
        "alice",
        2,
        G,
        46,
    )
    assert gpu2.start == datetime(2026, 12, 2, 13, 33, 16, tzinfo=timezone.utc)
    assert (text22[ids["exit3"]].exit_code, text22[ids["exit3"]].state) == (3, "FAILED")
    assert (text22[ids["killed"]].exit_code, text22[ids["killed"]].exit_signal) == (None, 9)
    assert text22[ids["gpu1"]].exit_code == 3
    assert text22["28_1"].array_job_id == "28"  # no JobIDRaw in this field list
    pending = text22[ids["pending"]]
    assert (pending.start, pending.nodes, pending.tres) == (None, (), {})
    assert text22[ids["cpu"]].memory_bytes == 512 * M


def test_json_and_text_agree(json22, text22, ids) -> None:
    for role in ("gpu2", "gpu1", "cpu", "killed"):
        a, b = json22[ids[role]], text22[ids[role]]
        assert (a.state, a.user, a.account, a.gpus, a.elapsed_s, a.nodes, a.start, a.end) == (
            b.state, b.user, b.account, b.gpus, b.elapsed_s, b.nodes, b.start, b.end,
        ), role  # fmt: skip


def test_json24() -> None:
    jobs = {j.job_id: j for j in parse_sacct_json((V2405 / "sacct.json").read_bytes())}
    ddp = jobs["4101"]
    assert (ddp.state, ddp.nodes, ddp.gpus, ddp.memory_bytes, ddp.elapsed_s) == (
        "COMPLETED", ("gpu01", "gpu02"), 8, 128 * G, 6000,
    )  # fmt: skip
    assert (ddp.exit_code, ddp.time_limit_s) == (0, 7200)
    assert (jobs["4102"].state, jobs["4102"].exit_signal, jobs["4102"].user) == ("TIMEOUT", 15, "bob")
    assert (jobs["4090"].state, jobs["4090"].exit_code) == ("FAILED", 2)
    assert (jobs["4105"].display_id, jobs["4105"].time_limit_s) == ("4104_3", None)
    assert (jobs["4106"].start, jobs["4106"].nodes, jobs["4106"].cpus) == (None, (), 4)
    assert jobs["4110"].state == "NODE_FAIL"


def test_parsable_default_fields_with_raw_ids() -> None:
    line = (
        "29|28_1|arr|alice|2001|physics|debug|normal|COMPLETED|0:0|2026-12-02T13:33:16|"
        "2026-12-02T13:33:16|2026-12-02T13:34:01|00:00:45|00:05:00|billing=1,cpu=1,mem=256M,node=1|vm\n"
        "29.batch|28_1.batch|batch||2001|physics|||COMPLETED|0:0|||||||vm\n"
    )
    (job,) = parse_sacct_parsable(line, DEFAULT_FIELDS, tz=timezone.utc)
    assert (job.job_id, job.display_id, job.uid, job.qos, job.time_limit_s) == (
        "29",
        "28_1",
        2001,
        "normal",
        300,
    )
    assert job.submit == datetime(2026, 12, 2, 13, 33, 16, tzinfo=timezone.utc)


def test_parsable_wrong_field_count() -> None:
    with pytest.raises(SlurmParseError):
        parse_sacct_parsable("1|2|3\n")
    assert parse_sacct_parsable("") == []


@pytest.mark.parametrize("bad", ["nope", "[]", '{"jobs": {}}'])
def test_json_bad_documents(bad: str) -> None:
    with pytest.raises(SlurmParseError):
        parse_sacct_json(bad)


def test_json_odd_job() -> None:
    (job,) = parse_sacct_json(
        {"jobs": [{"job_id": 9, "time": "x", "state": "weird", "tres": {"allocated": [1, {}]}}]}
    )
    assert (job.job_id, job.state, job.tres, job.start) == ("9", "WEIRD", {}, None)
