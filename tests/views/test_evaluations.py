"""Evaluation.shown: which of an evaluation's verdicts every surface shows."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from gpuwatch.views.evaluations import Evaluation, VerdictRow

T = datetime(2026, 12, 5, 12, 0, tzinfo=timezone.utc)


def _row(n: int, window: str, cause: str, confidence: float = 0.8) -> VerdictRow:
    span = timedelta(hours=2) if window == "job" else timedelta(minutes=10)
    return VerdictRow(
        verdict_id=n,
        job_id="1",
        evaluated_at=T,
        window_kind=window,
        window_start=T - span,
        window_end=T,
        cause=cause,
        confidence=confidence,
        gpus=4,
        gpu_hours=1.0,
        gpu_hours_wasted=0.5,
        mean_util_ratio=0.1,
        summary="",
        fix=None,
        stored_evidence={},
    )


def _shown(*rows: VerdictRow) -> tuple[str, str] | None:
    v = Evaluation("1", T, rows).shown
    return None if v is None else (v.window_kind, v.cause)


def test_a_cause_of_the_whole_job_leads():
    assert _shown(_row(1, "job", "input_bound"), _row(2, "recent", "idle_allocation")) == (
        "job",
        "input_bound",
    )


def test_a_cause_in_the_recent_window_beats_unknown_over_the_whole_job():
    """Busy, then idle: the whole job reads 'low, cause unknown', the last minutes 'idle'."""
    assert _shown(_row(1, "job", "unknown_low"), _row(2, "recent", "idle_allocation")) == (
        "recent",
        "idle_allocation",
    )


def test_recent_window_when_the_whole_job_is_healthy():
    assert _shown(_row(1, "job", "healthy"), _row(2, "recent", "idle_allocation")) == (
        "recent",
        "idle_allocation",
    )


def test_unknown_only_when_no_window_names_a_cause():
    assert _shown(_row(1, "job", "unknown_low"), _row(2, "recent", "healthy")) == ("job", "unknown_low")
    assert _shown(_row(1, "job", "healthy"), _row(2, "recent", "unknown_low")) == ("recent", "unknown_low")
    assert _shown(_row(1, "job", "healthy"), _row(2, "recent", "healthy")) is None
