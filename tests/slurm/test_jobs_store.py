"""gpuwatch.sql.jobs on SQLite and PostgreSQL, fed the recorded 22.05 squeue/sacct answers."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch import views
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.slurm.model import SlurmJob
from gpuwatch.slurm.sacct import parse_sacct_json
from gpuwatch.slurm.squeue import parse_squeue_json
from gpuwatch.sql import jobs
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.rollups import Rollup, floor_minute
from gpuwatch.sql.schema import SAMPLE_KINDS, gpu_sample_packs, job_gpus, slurm_jobs
from gpuwatch.wire import AttributionSample, Batch, GpuSample

from .conftest import V2205

NOW = datetime(2026, 12, 2, 13, 34, 0, tzinfo=timezone.utc)
T0 = datetime(2026, 12, 2, 13, 33, 16, tzinfo=timezone.utc)  # the recorded jobs' start


def squeue() -> list[SlurmJob]:
    return parse_squeue_json((V2205 / "squeue.json").read_text())


def sacct() -> list[SlurmJob]:
    return parse_sacct_json((V2205 / "sacct.json").read_text())


def rows(engine: sa.Engine) -> dict[str, dict]:
    with engine.connect() as conn:
        return {r["job_id"]: dict(r) for r in conn.execute(sa.select(slurm_jobs)).mappings()}


def gpu_rows(engine: sa.Engine) -> set[tuple[str, str, int]]:
    with engine.connect() as conn:
        return {
            tuple(r)
            for r in conn.execute(sa.select(job_gpus.c.job_id, job_gpus.c.node, job_gpus.c.gpu_index))
        }


def store_squeue(engine: sa.Engine, found: list[SlurmJob], now: datetime = NOW) -> int:
    with engine.begin() as conn:
        jobs.upsert_jobs(conn, found, now)
        return jobs.replace_job_gpus(conn, {j.job_id: j.gpu_indices for j in found})


def test_squeue_rows_and_gpus(engine, ids) -> None:
    found = squeue()
    assert store_squeue(engine, found) == 2  # jobs 25 and 26 hold GPUs
    got = rows(engine)
    assert len(got) == len(found)
    j25 = got[ids["gpu2"]]
    assert (j25["user_name"], j25["uid"], j25["account"], j25["state"], j25["nodes"]) == (
        "alice", 2001, "physics", "RUNNING", ["vm"],
    )  # fmt: skip
    assert (j25["gpus"], j25["cpus"], j25["memory_bytes"], j25["source"]) == (2, 2, 1 << 30, "squeue-json")
    assert j25["start_at"] == T0 and j25["first_seen_at"] == NOW and j25["tres"]["gres/gpu"] == 2
    assert got[ids["pending"]]["nodes"] is None and got[ids["pending"]]["state_reason"] == "Resources"
    assert got["29"]["array_job_id"] == "28" and got["29"]["array_task_id"] == "1"
    assert gpu_rows(engine) == {("25", "vm", 0), ("25", "vm", 1), ("26", "vm", 2)}
    assert store_squeue(engine, found) == 0  # unchanged allocation: no rewrite


def test_sacct_finishes_jobs_without_erasing_what_squeue_knew(engine, ids) -> None:
    store_squeue(engine, squeue())
    later = NOW + timedelta(minutes=5)
    with engine.begin() as conn:
        jobs.upsert_jobs(conn, [j for j in sacct() if j.finished], later)
    got = rows(engine)
    j25 = got[ids["gpu2"]]
    assert (j25["state"], j25["source"], j25["elapsed_s"]) == ("CANCELLED", "sacct-json", 46)
    assert j25["end_at"] == datetime(2026, 12, 2, 13, 34, 2, tzinfo=timezone.utc)
    assert (j25["uid"], j25["first_seen_at"], j25["updated_at"]) == (2001, NOW, later)  # sacct has no uid
    assert got[ids["cpu"]]["gpus"] == 0  # sacct's None (gres/gpu not in AllocTRES) kept squeue's 0
    # 22.05 sacct --json says exit 0 for `exit 3`: the first terminal report (squeue's) stays
    assert (got[ids["exit3"]]["exit_code"], got[ids["exit3"]]["state"]) == (3, "FAILED")
    assert (got[ids["killed"]]["exit_code"], got[ids["killed"]]["exit_signal"]) == (None, 9)
    assert got[ids["gpu1"]]["exit_code"] == 0 and got[ids["gpu1"]]["state"] == "FAILED"  # as sacct says
    # the GPUs held stay: 22.05 squeue drops gres_detail of ended jobs, and sacct has none
    assert gpu_rows(engine) == {("25", "vm", 0), ("25", "vm", 1), ("26", "vm", 2)}


def test_requeue_takes_the_new_exit_and_allocation(engine) -> None:
    run1 = SlurmJob(
        "50", "squeue-json", state="FAILED", exit_code=1, start=T0, end=T0, gpu_indices={"n1": (0,)}
    )
    store_squeue(engine, [run1])
    pending = dataclasses.replace(run1, state="PENDING", exit_code=None, gpu_indices={})
    store_squeue(engine, [pending])
    assert rows(engine)["50"]["exit_code"] is None
    assert gpu_rows(engine) == {("50", "n1", 0)}  # empty allocation never deletes
    run2 = dataclasses.replace(run1, state="COMPLETED", exit_code=0, gpu_indices={"n2": (1, 3)})
    store_squeue(engine, [run2])
    assert (rows(engine)["50"]["state"], rows(engine)["50"]["exit_code"]) == ("COMPLETED", 0)
    assert gpu_rows(engine) == {("50", "n2", 1), ("50", "n2", 3)}


def test_duplicates_and_many_rows_in_chunks(engine) -> None:
    many = [SlurmJob(str(i), "squeue-json", state="RUNNING", start=T0, gpu_indices={f"n{i}": (i % 8,)})
            for i in range(1, 1201)]  # fmt: skip
    assert store_squeue(engine, [*many, dataclasses.replace(many[0], name="again")]) == 1200
    assert rows(engine)["1"]["name"] == "again"
    assert len(gpu_rows(engine)) == 1200
    with engine.connect() as conn:
        assert len(jobs.unfinished_jobs(conn)) == 1200


def test_job_for_gpu_by_node_index_and_time(engine, ids) -> None:
    store_squeue(engine, squeue())
    with engine.connect() as conn:
        assert jobs.job_for_gpu(conn, "vm", 0, T0) == ids["gpu2"]
        assert jobs.job_for_gpu(conn, "vm", 2, T0 + timedelta(minutes=1)) == ids["gpu1"]
        assert jobs.job_for_gpu(conn, "vm", 0, T0 - timedelta(seconds=1)) is None  # before start
        assert jobs.job_for_gpu(conn, "vm", 3, T0) is None  # nobody holds GPU 3
        assert jobs.job_for_gpu(conn, "other", 0, T0) is None
        # job 25's expected end (start + 30 min) bounds it while it runs
        assert jobs.job_for_gpu(conn, "vm", 0, T0 + timedelta(minutes=31)) is None
    with engine.begin() as conn:
        jobs.upsert_jobs(conn, [j for j in sacct() if j.finished], NOW)
        # ended 13:34:02: the real end replaced the expected one
        assert jobs.job_for_gpu(conn, "vm", 0, T0 + timedelta(seconds=45)) == ids["gpu2"]
        assert jobs.job_for_gpu(conn, "vm", 0, T0 + timedelta(seconds=46)) is None
        # a later job sharing GPU 0 (sharding): both, latest start first
        shared = SlurmJob("60", "squeue-json", state="RUNNING", start=T0 + timedelta(seconds=10),
                          gpu_indices={"vm": (0,)})  # fmt: skip
        jobs.upsert_jobs(conn, [shared], NOW)
        jobs.replace_job_gpus(conn, {"60": shared.gpu_indices})
        assert jobs.jobs_for_gpu(conn, "vm", 0, T0 + timedelta(seconds=20)) == ["60", ids["gpu2"]]


def _node_with_samples(engine: sa.Engine, node: str, util: dict[int, list[float]], start: datetime,
                       attribution: dict[int, str] | None = None) -> None:  # fmt: skip
    create_token(engine, node)
    with engine.connect() as conn:
        node_id = get_node(conn, node).id
    samples: list = []
    for idx, values in util.items():
        for k, value in enumerate(values):
            ts = start + timedelta(seconds=10 * k)
            samples.append(GpuSample(ts=ts, gpu_index=idx, util_gpu_ratio=value))
            if attribution and idx in attribution:
                samples.append(
                    AttributionSample(ts=ts, gpu_index=idx, job_id=attribution[idx], source="prolog")
                )
    BatchStore(engine).store(node_id, Batch(node=node, agent_version="t", samples=samples))
    # the listing's utilization is the rollups': the pass rolls the samples' minutes
    last = start + timedelta(seconds=10 * max(len(v) for v in util.values()))
    Rollup(engine).roll(floor_minute(start), floor_minute(last) + timedelta(minutes=1))


def test_jobs_query_filters_gpus_and_utilization(engine, ids) -> None:
    store_squeue(engine, squeue())
    with engine.begin() as conn:
        jobs.upsert_jobs(conn, [j for j in sacct() if j.finished], NOW)
    # GPU 0 busy, GPU 1 idle for job 25 (ran 13:33:16 .. 13:34:02); a sample after its end is ignored
    _node_with_samples(engine, "vm", {0: [1.0, 1.0, 1.0, 1.0, 0.5], 1: [0.0] * 5, 2: [0.25]}, T0)
    got = {j.job_id: j for j in views.jobs_query(engine, now=NOW)}
    j25 = got[ids["gpu2"]]
    assert (j25.gpu_list, j25.util_samples, j25.matched_by) == (["vm:0", "vm:1"], 10, "slurm")
    assert abs(j25.mean_util_ratio - 0.45) < 1e-9  # (4 * 1.0 + 0.5 + 5 * 0) / 10
    assert got[ids["gpu1"]].mean_util_ratio == 0.25 and got[ids["gpu1"]].gpu_list == ["vm:2"]
    assert got[ids["cpu"]].gpu_list == [] and got[ids["cpu"]].mean_util_ratio is None
    assert got["29"].display_id == "28_1"
    # the raw samples gone (retention keeps them 14 days): the figure stays, it is the rollups'
    with engine.begin() as conn:
        conn.execute(gpu_sample_packs.delete())
    again = {j.job_id: j for j in views.jobs_query(engine, now=NOW)}[ids["gpu2"]]
    assert (again.mean_util_ratio, again.util_samples) == (j25.mean_util_ratio, 10)
    # filters
    q = lambda **kw: [j.job_id for j in views.jobs_query(engine, views.JobFilters(**kw), now=NOW)]  # noqa: E731
    assert set(q(user="alice")) == {j.job_id for j in squeue() if j.user == "alice"}
    assert q(user="nobody") == []
    cancelled = {i for i, r in rows(engine).items() if (r["state"], r["account"]) == ("CANCELLED", "physics")}
    assert {ids["gpu2"], ids["pending"]} <= cancelled
    assert set(q(states=("CANCELLED",), account="physics")) == cancelled
    assert q(node="vm_") == [] and q(node="v") == []  # exact node names, LIKE wildcards escaped
    assert ids["gpu2"] in q(node="vm", partition="debug")
    assert q(since=NOW + timedelta(days=1)) == []  # all ended before
    assert len(q(limit=3)) == 3
    assert q(states=("CA",)) == q(states=("CANCELLED",))


def test_jobs_query_falls_back_to_agent_attribution(engine) -> None:
    # a job only sacct saw (no job_gpus rows), attributed by the agent's prolog files
    job = SlurmJob("70", "sacct-json", user="bob", state="COMPLETED", start=T0, end=T0 + timedelta(minutes=1))
    with engine.begin() as conn:
        jobs.upsert_jobs(conn, [job], NOW)
    _node_with_samples(engine, "gpu07", {3: [0.2, 0.4], 1: [1.0]}, T0, attribution={3: "70"})
    (got,) = views.jobs_query(engine, now=NOW)
    assert (got.gpu_list, got.util_samples, got.matched_by) == (["gpu07:3"], 2, "agent")
    assert abs(got.mean_util_ratio - 0.3) < 1e-9
    # the raw samples gone (retention): the map the rollup pass stored and the rollups remain
    with engine.begin() as conn:
        conn.execute(gpu_sample_packs.delete())
        conn.execute(SAMPLE_KINDS["attribution"].table.delete())
    (again,) = views.jobs_query(engine, now=NOW)
    assert (again.gpu_list, again.util_samples, again.matched_by, again.mean_util_ratio) == (
        got.gpu_list, 2, "agent", got.mean_util_ratio
    )  # fmt: skip


def test_two_upserts_in_one_transaction(engine) -> None:
    a = SlurmJob("80", "squeue-json", state="RUNNING", start=T0)
    b = SlurmJob("81", "squeue-json", state="RUNNING", start=T0)
    with engine.begin() as conn:
        jobs.upsert_jobs(conn, [a], NOW)
        jobs.upsert_jobs(conn, [dataclasses.replace(a, state="COMPLETED"), b], NOW)
        jobs.upsert_jobs(conn, [dataclasses.replace(b, name="b")], NOW)
    got = rows(engine)
    assert (got["80"]["state"], got["81"]["state"], got["81"]["name"]) == ("COMPLETED", "RUNNING", "b")


def test_agent_attribution_is_read_from_the_jobs_start_and_without_one(engine) -> None:
    """The look-up reads attribution from the earliest start (less ATTRIBUTION_LEAD) on; a job
    whose start Slurm never gave is still found, read without a bound."""
    started = SlurmJob("71", "sacct-json", user="bob", state="COMPLETED", start=T0, end=NOW)
    no_start = SlurmJob("72", "sacct-json", user="eve", state="COMPLETED", start=None, end=None)
    with engine.begin() as conn:
        jobs.upsert_jobs(conn, [started, no_start], NOW)
    early = T0 - views.jobs.ATTRIBUTION_LEAD + timedelta(minutes=5)  # an agent's clock ahead of Slurm's
    _node_with_samples(engine, "gpu08", {3: [0.2]}, early, attribution={3: "71"})
    _node_with_samples(engine, "gpu09", {5: [0.5]}, T0, attribution={5: "72"})
    got = {j.job_id: j.gpu_list for j in views.jobs_query(engine, now=NOW)}
    assert got == {"71": ["gpu08:3"], "72": ["gpu09:5"]}
