"""Segments: change points on per-GPU utilization, and the window of a job's latest phase."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest

from gpuwatch.classify.engine import classify_job
from gpuwatch.classify.features import load_scope
from gpuwatch.classify.runner import store_evaluations
from gpuwatch.classify.segments import change_points, latest_change
from gpuwatch.classify.verdict import phase_since, span_text
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS as T
from gpuwatch.sql.rollups import Rollup
from gpuwatch.views import latest_evaluations
from tests.classify import corpus


def _noisy(levels: list[tuple[float, int]], sd: float = 0.03, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [min(1.0, max(0.0, level + rng.gauss(0, sd))) for level, n in levels for _ in range(n)]


# ---------------------------------------------------------------------------- change_points


def test_a_step_is_found_where_it_is():
    assert change_points(_noisy([(0.9, 40), (0.0, 25)]), min_size=10, min_shift=0.3) == [40]


def test_two_steps_are_both_found():
    assert change_points(_noisy([(0.2, 30), (0.9, 30), (0.0, 20)]), min_size=10, min_shift=0.3) == [30, 60]


def test_a_steady_noisy_series_has_no_change():
    assert change_points(_noisy([(0.6, 200)], sd=0.1), min_size=10, min_shift=0.3) == []


def test_a_noiseless_series_with_a_step_still_splits():
    assert change_points([0.0] * 12 + [1.0] * 12, min_size=10, min_shift=0.3) == [12]


@pytest.mark.parametrize(("shift", "found"), [(0.29, []), (0.31, [30])])
def test_a_shift_below_min_shift_is_no_phase(shift, found):
    values = [0.5] * 30 + [0.5 - shift] * 30
    assert change_points(values, min_size=10, min_shift=0.3) == found


def test_every_segment_lasts_min_size():
    """A 9-minute phase cannot stand alone: the split leaves min_size points on each side."""
    values = _noisy([(0.9, 50), (0.0, 9)])
    assert all(10 <= p <= len(values) - 10 for p in change_points(values, min_size=10, min_shift=0.3))
    assert change_points(_noisy([(0.9, 50), (0.0, 10)]), min_size=10, min_shift=0.3) == [50]


def test_a_short_dip_inside_a_phase_is_no_phase():
    """A checkpoint save: three minutes at 0 % inside an hour of training."""
    assert change_points(_noisy([(0.9, 30), (0.0, 3), (0.9, 30)]), min_size=10, min_shift=0.3) == []


def test_too_short_or_empty_series():
    assert change_points([], min_size=10, min_shift=0.3) == []
    assert change_points([0.0] * 10 + [1.0] * 9, min_size=10, min_shift=0.3) == []


def test_phase_texts():
    assert span_text(45 * 60) == "45 min"
    assert span_text(3 * 3600 + 5 * 60 + 59) == "3 h 05 min"
    start = corpus.T0.replace(hour=14, minute=5, second=0)
    assert phase_since(start, start + timedelta(minutes=45)) == "since 14:05 UTC (45 min)"
    assert phase_since(start, start + timedelta(days=1)).startswith("since 2026-03-02 14:05 UTC (24 h")


# ---------------------------------------------------------------------------- the segment window

#: four GPUs train; GPU 3 stops at 08:30:07 and the job holds it idle for 45 more minutes
LATE_IDLE = corpus.Case(
    name="segment-one-gpu-idle-late",
    label="idle_allocation",
    why="test",
    scenario="training,gpu3=late_idle",
    gpus=4,
    seed=3,
    minutes=75,
    scenarios={"late_idle": {"kind": "switch", "before": "training", "after": "idle", "at_s": 1800}},
)
STEADY = corpus.Case(name="segment-steady", label="healthy", why="test", scenario="training", minutes=75)


def _load(engine, *cases):
    built = tuple(corpus.build(c, 90 + i) for i, c in enumerate(cases))
    corpus.load(engine, built)
    Rollup(engine, lag=timedelta(0)).run_once(now=max(c.now for c in cases) + timedelta(minutes=1))
    return built


def test_a_gpu_that_went_idle_is_dated_and_shown(engine):
    late, steady = _load(engine, LATE_IDLE, STEADY)
    with engine.connect() as conn:
        since = latest_change(conn, load_scope(conn, late.job_id), corpus.T0, LATE_IDLE.now, T)
        found = classify_job(conn, late.job_id, LATE_IDLE.now)
        steady_found = classify_job(conn, steady.job_id, STEADY.now)
    # the GPU stopped at 08:30:07; the minute it stopped in is mixed, so the phase begins after it
    assert since is not None and since.strftime("%H:%M") in ("08:31", "08:32")
    segment = [v for v in found if v.window_kind == "segment"]
    assert segment and segment[0].cause.value == "idle_allocation"
    lead = segment[0]
    assert lead.window_start == since and lead.evidence["signals"]["idle_gpus"] == ["c90n0/gpu3"]
    assert f"since {since:%H:%M} UTC (" in lead.summary
    # one GPU of four for the phase's length
    assert lead.gpu_hours_wasted == pytest.approx(lead.gpu_hours / 4, rel=0.02)
    whole = [v for v in found if v.window_kind == "job"]
    assert whole[0].cause.value != "idle_allocation"  # the whole-job mean hides it
    assert not [v for v in steady_found if v.window_kind == "segment"]  # no change: no segment

    store_evaluations(engine, {late.job_id: (LATE_IDLE.now, found)})
    with engine.connect() as conn:
        shown = latest_evaluations(conn, job_ids=[late.job_id])[late.job_id].shown
    assert shown is not None and shown.window_kind == "segment" and shown.cause == "idle_allocation"
    # the phase's waste, not only the last ten minutes'
    recent = next(v for v in found if v.window_kind == "recent")
    assert shown.gpu_hours_wasted > 3 * recent.gpu_hours_wasted
