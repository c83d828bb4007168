"""Confidence from evidence margins, the tie rule, and a specific cause leading the general one
it explains."""

from __future__ import annotations

import pytest

from gpuwatch.classify.engine import classify_window
from gpuwatch.classify.rules import cpu_only, small_work
from gpuwatch.classify.verdict import (
    FULL_MARGIN,
    MARGIN_PENALTY,
    Cause,
    Evidence,
    Verdict,
    make_verdict,
    margin,
)
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS as T

from .rules.window import gpu, window


@pytest.mark.parametrize(
    ("value", "op", "threshold", "expected"),
    [
        (0.5, ">=", 0.5, 0.0),  # at the threshold
        (0.5 * (1 + FULL_MARGIN / 2), ">=", 0.5, 0.5),  # half-way to a full margin
        (0.9, ">=", 0.5, 1.0),  # far past: capped at 1
        (0.2, "<", 0.4, 1.0),
        (0.35, "<", 0.4, 0.5),  # 12.5 % under a "below" threshold
        (0.0, "<=", 0.0, 1.0),  # a presence test
    ],
)
def test_margin_is_the_relative_distance_past_the_threshold(
    value: float, op: str, threshold: float, expected: float
) -> None:
    assert margin(value, op, threshold) == pytest.approx(expected, abs=1e-3)


def _verdict(cpu_ratio: float, base: float = 0.85) -> Verdict:
    ev = Evidence()
    assert ev.check("cpu_ratio", cpu_ratio, ">=", "cpu_saturated_ratio", 0.8)
    ev.signal("util_mean", 0.3)  # a signal without a check takes no part
    return make_verdict(Cause.INPUT_BOUND, base, window(), ev, 0.5)


def test_a_verdict_at_its_threshold_loses_the_penalty_and_one_far_past_keeps_its_base() -> None:
    at, far = _verdict(0.8), _verdict(1.0)
    assert at.confidence == pytest.approx(0.85 - MARGIN_PENALTY)
    assert far.confidence == 0.85
    assert at.evidence["confidence"] == {"base": 0.85, "weakest": {"signal": "cpu_ratio", "margin": 0.0}}


def test_confidence_grows_with_the_margin() -> None:
    values = [0.8, 0.82, 0.85, 0.9, 0.95]
    confidences = [_verdict(v).confidence for v in values]
    assert confidences == sorted(confidences) and len(set(confidences)) == len(values)


def test_the_weakest_passed_check_decides_and_failed_checks_do_not_count() -> None:
    ev = Evidence()
    ev.check("cpu_ratio", 0.99, ">=", "cpu_saturated_ratio", 0.8)  # full margin
    ev.check("iowait", 0.21, ">=", "iowait_high_ratio", 0.2)  # 5 % past: margin 0.2
    ev.check("swap", 0.0, ">", "host_swap_bytes_per_s", 1.0)  # failed
    v = make_verdict(Cause.INPUT_BOUND, 0.9, window(), ev, 0.5)
    assert v.evidence["confidence"]["weakest"] == {"signal": "iowait", "margin": 0.2}
    assert v.confidence == pytest.approx(0.9 - MARGIN_PENALTY * 0.8)


def test_a_rule_on_a_real_window_scales_with_how_small_the_work_is() -> None:
    """small_work on one H200: SM activity just under its threshold is a weaker claim than
    SM activity at a third of it."""

    def lead(sm_active: float) -> Verdict:
        g = gpu(util_mean=0.3, sm_active=sm_active, sm_occupancy=0.1, memory_used_ratio=0.1, power_ratio=0.2)
        f = window(util_mean=0.3, sm_active=sm_active, sm_occupancy=0.1, gpus=(g,), power_ratio=0.2)
        v = small_work.rule(f, T)
        assert isinstance(v, Verdict)
        return v

    near, far = lead(T.sm_active_low_ratio * 0.97), lead(T.sm_active_low_ratio / 3)
    assert near.evidence["confidence"]["base"] == far.evidence["confidence"]["base"]
    assert near.confidence < far.confidence


def test_ties_go_to_the_verdict_wasting_more_then_to_the_more_specific_cause() -> None:
    def at(cause: Cause, waste: float) -> Verdict:
        return make_verdict(cause, 0.8, window(), Evidence(), waste)

    small, no_amp = at(Cause.SMALL_WORK, 0.3), at(Cause.NO_MIXED_PRECISION, 0.6)
    assert sorted([small, no_amp], key=lambda v: v.sort_key)[0] is no_amp  # more GPU-hours back
    small_more = at(Cause.SMALL_WORK, 0.6)
    assert sorted([no_amp, small_more], key=lambda v: v.sort_key)[0] is small_more  # same waste: order


def test_cpu_only_leads_idle_allocation_even_at_its_threshold() -> None:
    """A CPU code that never touched its GPUs, its CPUs exactly at cpu_busy_ratio: cpu_only's own
    confidence falls below idle_allocation's, which is capped at it, so cpu_only leads."""
    idle = gpu(util_mean=0.0, util_p50=0.0, util_p95=0.0, util_max=0.0, zero_share=1.0, idle=True,
               sm_active=0.0, memory_used_max_bytes=0, memory_used_ratio=0.0)  # fmt: skip
    f = window(
        gpus=(idle,), idle_gpus=(idle.gpu,), util_mean=0.0, sm_active=0.0, job_util_max=0.0,
        job_gpu_memory_max_bytes=0, cpu_ratio=T.cpu_busy_ratio, zero_share=1.0,
    )  # fmt: skip
    alone = cpu_only.rule(f, T)
    assert isinstance(alone, Verdict) and alone.confidence < 0.88  # idle_allocation's base
    verdicts = classify_window(f, T)
    assert [v.cause for v in verdicts[:2]] == [Cause.CPU_ONLY, Cause.IDLE_ALLOCATION]
    assert verdicts[1].confidence == verdicts[0].confidence
    assert verdicts[1].evidence["confidence"]["capped_by"] == "cpu_only"
