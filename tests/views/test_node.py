"""The node view on both databases, from corpus jobs: a faulted GPU marked with its XID and
owner, the jobs that held the node with the cause every surface names, the per-minute series."""

from __future__ import annotations

from datetime import timedelta

from gpuwatch.classify.runner import evaluate_running
from gpuwatch.sql.rollups import Rollup
from gpuwatch.views import latest_evaluations, node_view
from tests.classify import corpus


def _load(engine, *names: str) -> list[corpus.Built]:  # type: ignore[no-untyped-def]
    by_name = {c.name: (i, c) for i, c in enumerate(corpus.cases())}
    built = [corpus.build(by_name[n][1], by_name[n][0]) for n in names]
    corpus.load(engine, built)
    last = max(b.case.now for b in built)
    Rollup(engine, lag=timedelta(0)).run_once(now=last + timedelta(minutes=1))
    evaluate_running(engine, last)
    return built


def test_a_faulted_gpu_and_the_job_that_held_it(engine) -> None:
    (fault,) = _load(engine, "fault-xid79-one-of-four")
    name = next(iter(fault.batches))
    view = node_view(engine, name, fault.case.now, hours=1)
    assert view is not None and view.name == name and view.last_seen_at is not None
    assert [g.index for g in view.gpus] == [0, 1, 2, 3]
    faulted = [g for g in view.gpus if g.fault]
    assert [g.index for g in faulted] == [2]
    assert faulted[0].xid_codes == (79,) and "XID 79" in faulted[0].fault and "admin" in faulted[0].fault
    assert faulted[0].lost_samples > 0 and "lost" in faulted[0].fault
    assert all(g.model == "NVIDIA H200" for g in view.gpus)
    (job,) = view.jobs
    with engine.connect() as conn:
        shown = latest_evaluations(conn, job_ids=[fault.job_id])[fault.job_id].shown
    assert (job.job_id, job.gpu_indices, job.cause) == (fault.job_id, (0, 1, 2, 3), shown.cause)
    assert job.cause == "gpu_fault" and job.user == "alice"
    healthy_gpu = view.util[0]
    assert len(healthy_gpu) == fault.case.minutes and all(v is not None and v > 0.5 for _, v in healthy_gpu)
    assert healthy_gpu[0][0].tzinfo is not None


def test_a_node_holds_only_its_own_jobs_and_an_unknown_node_is_none(engine) -> None:
    idle, busy = _load(engine, "idle-all-4-h200", "healthy-training-h200")
    view = node_view(engine, next(iter(idle.batches)), idle.case.now, hours=1)
    assert view is not None and [j.job_id for j in view.jobs] == [idle.job_id]
    assert view.jobs[0].cause == "idle_allocation" and view.jobs[0].gpu_hours_wasted > 0
    assert all(g.util_mean == 0.0 and g.fault is None for g in view.gpus)
    assert node_view(engine, "no-such-node", idle.case.now) is None
    # a span before anything ran: the node is known, with nothing to show
    early = node_view(engine, next(iter(busy.batches)), busy.case.start - timedelta(hours=2), hours=1)
    assert early is not None and early.gpus == () and early.jobs == () and early.util == {}
