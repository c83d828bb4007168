"""Which verdict a listing shows, and a job known only from its verdicts."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gpuwatch.sql.schema import verdicts
from gpuwatch.views import job_view, low_util_jobs
from gpuwatch.views.evaluations import VerdictRow, group_evaluations

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)
_ids = iter(range(1, 1000))


def row(window: str, cause: str, confidence: float = 0.9, wasted: float = 1.0, job: str = "1") -> VerdictRow:
    minutes = 60 if window == "job" else 10
    return VerdictRow(
        verdict_id=next(_ids),
        job_id=job,
        evaluated_at=T0,
        window_kind=window,
        window_start=T0 - timedelta(minutes=minutes),
        window_end=T0,
        cause=cause,
        confidence=confidence,
        gpus=4,
        gpu_hours=4 * minutes / 60,
        gpu_hours_wasted=wasted,
        mean_util_ratio=0.1,
        summary=f"job {job}: {cause}",
        fix=None,
        stored_evidence={},
    )


def evaluation(*rows: VerdictRow):  # type: ignore[no-untyped-def]
    return group_evaluations(list(rows))["1"]


def test_the_whole_job_window_leads() -> None:
    e = evaluation(row("recent", "idle_allocation", 0.99), row("job", "input_bound", 0.7, wasted=3))
    assert e.shown is not None and (e.shown.window_kind, e.shown.cause) == ("job", "input_bound")
    assert [v.cause for v in e.waste] == ["input_bound", "idle_allocation"]


def test_highest_confidence_leads_a_window_then_the_stored_order() -> None:
    e = evaluation(
        row("job", "input_bound", 0.6), row("job", "small_work", 0.8), row("job", "throttled", 0.8)
    )
    assert [v.cause for v in e.waste] == ["small_work", "throttled", "input_bound"]


def test_a_healthy_whole_job_falls_back_to_the_recent_window() -> None:
    e = evaluation(row("job", "healthy", 0.9, wasted=0), row("recent", "idle_allocation", 0.8, wasted=0.5))
    assert e.shown is not None and (e.shown.window_kind, e.shown.cause) == ("recent", "idle_allocation")
    assert evaluation(row("job", "healthy"), row("recent", "healthy")).shown is None
    assert evaluation(row("job", "healthy"), row("recent", "healthy")).waste == ()


def test_of_cause_prefers_the_whole_job_window() -> None:
    e = evaluation(row("recent", "input_bound"), row("job", "input_bound"), row("job", "idle_allocation"))
    found = e.of_cause("input_bound")
    assert found is not None and found.window_kind == "job"
    assert e.of_cause("throttled") is None


def test_a_job_known_only_from_its_verdicts(engine) -> None:
    with engine.begin() as conn:
        conn.execute(
            verdicts.insert(),
            [
                {
                    **{k: v for k, v in vars(r).items() if k not in ("verdict_id", "stored_evidence")},
                    "evidence": r.evidence,
                    "rules_version": "t",
                }
                for r in (row("job", "idle_allocation", job="77"), row("recent", "idle_allocation", job="77"))
            ],
        )
    view = job_view(engine, "77", T0)
    assert view is not None and view.gpus == () and view.job.user is None
    assert view.evaluation is not None
    assert [v.window_kind for v in view.evaluation.verdicts] == ["job", "recent"]
    [listed] = low_util_jobs(engine, now=T0)
    assert (listed.job_id, listed.window_kind, listed.user) == ("77", "job", None)
    assert job_view(engine, "78", T0) is None
