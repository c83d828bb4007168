"""The unknown_low fallback: when no cause rule fires, a window that is low — util at or below the
jobstats red line, SM activity below DCGM's 0.5, or duty-cycling — gets ``unknown_low``, listing
the signals that were missing and the rules that could not check; otherwise ``healthy``.

The engine calls it as ``unknown_low.rule(f, thresholds, skipped)`` with the Skipped outcomes of
every rule (:func:`gpuwatch.classify.engine.classify_window`); :func:`outcomes` does the same."""

from __future__ import annotations

import pytest

from gpuwatch.classify.features import GPM_SIGNALS, WindowFeatures
from gpuwatch.classify.rules import RULES, unknown_low
from gpuwatch.classify.verdict import Cause, Skipped, Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS as T

from .window import window

#: an A100 (no GPM) at 10 % utilization with nothing to show why: power and memory not small,
#: no gaps, CPUs calm, no traffic
A100_LOW = {
    "models": ("NVIDIA A100-SXM4-80GB",), "has_gpm": False, "util_mean": 0.1, "util_p50": 0.1,
    "util_p95": 0.2, "burst_util": 0.1, "sm_active": None, "sm_occupancy": None, "tensor_active": None,
    "dram_active": None, "fp32_active": None, "fp16_active": None, "missing": GPM_SIGNALS,
}  # fmt: skip


def outcomes(f: WindowFeatures) -> tuple[list[Verdict], list[Skipped]]:
    """Every rule's outcome on ``f``, as the engine gathers them."""
    found = [rule(f, T) for rule in RULES]
    return [o for o in found if isinstance(o, Verdict)], [o for o in found if isinstance(o, Skipped)]


def test_low_util_with_no_cause_found() -> None:
    f = window(util_mean=0.1, util_p50=0.1, burst_util=0.1, sm_active=0.05)
    v = unknown_low.rule(f, T)
    assert isinstance(v, Verdict) and v.cause is Cause.UNKNOWN_LOW and v.evidence["confidence"]["base"] == 0.5
    assert v.gpu_hours_wasted == pytest.approx(0.95)  # 1 - SM activity
    assert v.summary == "job j1: GPU use low (util 10%, SM active 5%), cause unknown"
    checks = {c["signal"]: c["passed"] for c in v.evidence["checks"]}
    assert checks["util_mean"] is True and checks["sm_active"] is True
    assert v.evidence["missing"] == [] and v.evidence["notes"] == []


def test_what_could_not_be_checked_is_listed() -> None:
    """The A100 window as the engine sees it: no rule fires, no_mixed_precision is Skipped; the
    fallback names the missing GPM signals and the skipped rule."""
    f = window(**A100_LOW)
    fired, skipped = outcomes(f)
    assert fired == [] and Cause.NO_MIXED_PRECISION in {s.cause for s in skipped}
    v = unknown_low.rule(f, T, skipped)
    assert isinstance(v, Verdict) and v.cause is Cause.UNKNOWN_LOW and v.evidence["confidence"]["base"] == 0.5
    assert v.gpu_hours_wasted == pytest.approx(0.9)  # 1 - NVML utilization, no SM activity
    assert v.evidence["missing"] == list(GPM_SIGNALS)  # sm_active first, from its own check
    assert v.summary == (
        "job j1: GPU use low (util 10%), cause unknown (missing: " + ", ".join(GPM_SIGNALS) + ")"
    )
    assert (
        "no_mixed_precision not checked: tensor activity not measured (no GPM on NVIDIA A100-SXM4-80GB)"
        in v.evidence["notes"]
    )
    assert len(v.evidence["notes"]) == len(skipped)


def test_duty_cycling_with_busy_sms_is_low() -> None:
    """Utilization above the red line and SMs busy while working, but idle in gaps between bursts."""
    v = unknown_low.rule(window(util_mean=0.5, idle_fraction_mean=0.45, burst_util=0.9, sm_active=0.6), T)
    assert isinstance(v, Verdict) and v.gpu_hours_wasted == pytest.approx(0.4)
    checks = {c["signal"]: c["passed"] for c in v.evidence["checks"]}
    assert checks == {"util_mean": False, "sm_active": False, "gap_fraction": True, "burst_util": True}


def test_a_healthy_window_is_not_low() -> None:
    assert unknown_low.rule(window(), T) is None
    assert unknown_low.rule(window(), T, [Skipped(Cause.INPUT_BOUND, "x")]) is None


def test_an_idle_phase_at_the_windows_edge_is_not_duty_cycling() -> None:
    """Half the polls idle, all in idle minutes at the window's edge: no gaps, not low."""
    phase = window(util_mean=0.47, idle_fraction_mean=0.5, idle_edge_share=0.5, burst_util=0.95)
    assert phase.gap_fraction == 0.0
    assert unknown_low.rule(phase, T) is None


@pytest.mark.parametrize(("util", "fires"), [(T.util_low_ratio, True), (T.util_low_ratio + 0.01, False)])
def test_the_util_low_threshold(util: float, fires: bool) -> None:
    """At the red line is low (<=); SMs busy, so utilization alone decides."""
    v = unknown_low.rule(window(util_mean=util, sm_active=0.8), T)
    assert isinstance(v, Verdict) is fires


@pytest.mark.parametrize(
    ("sm_active", "fires"), [(T.sm_active_low_ratio, False), (T.sm_active_low_ratio - 0.01, True)]
)
def test_the_sm_activity_threshold(sm_active: float, fires: bool) -> None:
    v = unknown_low.rule(window(sm_active=sm_active), T)
    assert isinstance(v, Verdict) is fires


def duty(**changes: object) -> WindowFeatures:
    """A window low only by its duty cycle (gaps and bursts exactly at their thresholds)."""
    values = {
        "util_mean": 0.5, "sm_active": 0.6, "idle_fraction_mean": T.duty_idle_fraction_ratio,
        "burst_util": T.duty_burst_util_ratio, **changes,
    }  # fmt: skip
    return window(**values)


@pytest.mark.parametrize(
    ("changes", "fires"),
    [
        ({}, True),
        ({"idle_fraction_mean": T.duty_idle_fraction_ratio - 0.01}, False),
        ({"burst_util": T.duty_burst_util_ratio - 0.01}, False),
        ({"active_span_minutes": T.min_window_minutes}, True),
        ({"active_span_minutes": T.min_window_minutes - 1}, False),
    ],
    ids=["at-both", "gaps-below", "bursts-below", "span-at-min", "span-below-min"],
)
def test_the_duty_cycle_thresholds(changes: dict, fires: bool) -> None:
    f = duty(**changes)
    v = unknown_low.rule(f, T)
    assert isinstance(v, Verdict) is fires
    if fires:
        assert v.evidence["checks"][-2:] == [
            {"signal": "gap_fraction", "op": ">=", "threshold": "duty_idle_fraction_ratio", "passed": True,
             "margin": 0.0},
            {"signal": "burst_util", "op": ">=", "threshold": "duty_burst_util_ratio", "passed": True,
             "margin": 0.0},
        ]  # fmt: skip


def test_without_gpm_busy_util_is_not_low() -> None:
    """An unknown SM activity does not make a window low: 95 % utilization stays healthy."""
    no_gpm = window(**{**A100_LOW, "util_mean": 0.95, "util_p50": 0.96, "burst_util": 0.95})
    assert unknown_low.rule(no_gpm, T) is None


def test_without_per_poll_signals_low_util_still_decides() -> None:
    v = unknown_low.rule(window(util_mean=0.1, sm_active=0.05, idle_fraction_mean=None, burst_util=None), T)
    assert isinstance(v, Verdict) and v.evidence["missing"] == ["gap_fraction", "burst_util"]
    assert v.summary.endswith("cause unknown (missing: gap_fraction, burst_util)")


def test_without_any_activity_signal_it_is_not_low() -> None:
    blind = window(util_mean=None, sm_active=None, idle_fraction_mean=None, burst_util=None)
    assert unknown_low.rule(blind, T) is None


def test_healthy_fallback() -> None:
    v = unknown_low.healthy(window(), T)
    assert v.cause is Cause.HEALTHY and v.evidence["confidence"]["base"] == 0.8 and v.gpu_hours_wasted == 0.0
    assert v.summary == "job j1: 1 GPU used well (util 95%, SM active 80%)"


def test_healthy_fallback_without_gpm_is_less_sure() -> None:
    f = window(**{**A100_LOW, "util_mean": 0.95, "burst_util": 0.95})
    _, skipped = outcomes(f)
    v = unknown_low.healthy(f, T, skipped)
    assert v.cause is Cause.HEALTHY and v.evidence["confidence"]["base"] == 0.6 and v.gpu_hours_wasted == 0.0
    assert v.evidence["missing"] == list(GPM_SIGNALS)
    assert any(note.startswith("no_mixed_precision not checked") for note in v.evidence["notes"])
