"""The small_work rule: a GPU in use, not duty-cycling, with its SMs mostly inactive and little
power drawn (small batches, tiny kernels); low occupancy and little memory make it surer, but
memory filled by a pre-allocating framework does not rule it out. Without GPM it is claimed on
utilization, power and small memory alone, at a lower confidence."""

from __future__ import annotations

import pytest

from gpuwatch.classify.rules import small_work
from gpuwatch.classify.verdict import Cause, Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS as T

from .window import window

#: a small model on an H200: steady 30 % utilization, SMs 20 % active, 10 % occupancy
SMALL = {
    "util_mean": 0.3, "util_p50": 0.3, "util_p95": 0.4, "burst_util": 0.3, "sm_active": 0.2,
    "sm_occupancy": 0.1, "tensor_active": 0.05, "power_ratio": 0.2, "memory_used_ratio_max": 0.1,
}  # fmt: skip


def small(**changes: object):
    return window(**{**SMALL, **changes})


def test_small_kernels_on_a_big_gpu() -> None:
    v = small_work.rule(small(), T)
    assert isinstance(v, Verdict) and v.cause is Cause.SMALL_WORK and v.evidence["confidence"]["base"] == 0.85
    assert v.gpu_hours_wasted == pytest.approx(0.8)  # 1 - SM activity of one GPU-hour
    assert v.summary == (
        "job j1: too little work per GPU — util 30%, SM active 20%, occupancy 10%, power 20% of limit, "
        "memory 10%"
    )
    signals = v.evidence["signals"]
    assert signals["sm_active"] == 0.2 and signals["sm_occupancy"] == 0.1
    assert signals["power_ratio"] == 0.2 and signals["memory_used_ratio_max"] == 0.1
    assert [c["signal"] for c in v.evidence["checks"]] == [
        "idle_fraction_mean", "power_ratio", "memory_used_ratio_max", "sm_active", "sm_occupancy",
    ]  # fmt: skip
    assert all(c["passed"] for c in v.evidence["checks"])
    assert v.evidence["missing"] == []


def test_enough_occupancy_is_a_weaker_claim() -> None:
    v = small_work.rule(small(sm_occupancy=0.35), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == 0.75
    assert "SM active 20%, power" in v.summary and "occupancy" not in v.summary


def test_waste_follows_sm_activity_on_several_gpus() -> None:
    v = small_work.rule(small(gpu_count=4, gpu_hours=4.0, sm_active=0.1), T)
    assert isinstance(v, Verdict) and v.gpu_hours_wasted == pytest.approx(3.6)


def test_a_healthy_window_is_not_small_work() -> None:
    assert small_work.rule(window(), T) is None


@pytest.mark.parametrize(
    "changes",
    [
        {"util_mean": 0.0},  # nothing runs at all
        {"idle_gpus": ("n1/gpu0",)},  # an idle GPU is idle_allocation's
        {"idle_fraction_mean": 0.6, "burst_util": 0.75},  # duty-cycling: waiting, not small
        {"power_ratio": 0.8},  # the card works hard
        {"memory_used_ratio_max": T.gpu_memory_full_ratio},  # memory full: GPU memory pressure's
        {"memory_used_ratio_max": 0.6, "util_mean": 0.1},  # memory held, kernels rarely resident
        {"sm_active": 0.8},  # SMs busy
    ],
)
def test_other_windows_are_not_small_work(changes: dict) -> None:
    assert small_work.rule(small(**changes), T) is None


@pytest.mark.parametrize(
    ("signal", "value", "fires"),
    [
        ("idle_fraction_mean", T.duty_idle_fraction_ratio, False),
        ("idle_fraction_mean", T.duty_idle_fraction_ratio - 0.01, True),
        ("power_ratio", T.power_low_ratio, False),
        ("power_ratio", T.power_low_ratio - 0.01, True),
        ("sm_active", T.sm_active_low_ratio, False),
        ("sm_active", T.sm_active_low_ratio - 0.01, True),
    ],
)
def test_the_thresholds(signal: str, value: float, fires: bool) -> None:
    """Every comparison is strict: a signal exactly at its threshold rules small work out."""
    v = small_work.rule(small(**{signal: value}), T)
    assert isinstance(v, Verdict) is fires


@pytest.mark.parametrize(
    ("occupancy", "confidence"),
    [(T.sm_occupancy_low_ratio, 0.75), (T.sm_occupancy_low_ratio - 0.01, 0.85)],
)
def test_the_occupancy_threshold(occupancy: float, confidence: float) -> None:
    v = small_work.rule(small(sm_occupancy=occupancy), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == confidence


def test_without_gpm_it_is_judged_on_util_power_and_memory() -> None:
    no_gpm = small(has_gpm=False, sm_active=None, sm_occupancy=None, tensor_active=None)
    v = small_work.rule(no_gpm, T)
    assert isinstance(v, Verdict) and v.cause is Cause.SMALL_WORK and v.evidence["confidence"]["base"] == 0.6
    assert v.gpu_hours_wasted == pytest.approx(0.7)  # 1 - NVML utilization
    assert "SM activity not measured" in v.summary and "power 20% of limit, memory 10%" in v.summary
    assert v.evidence["missing"] == ["sm_active", "sm_occupancy"]
    assert v.evidence["notes"] == ["no GPM: judged on utilization, power and memory alone"]


def test_without_gpm_a_big_model_is_still_not_small_work() -> None:
    no_gpm = small(has_gpm=False, sm_active=None, sm_occupancy=None, memory_used_ratio_max=0.6)
    assert small_work.rule(no_gpm, T) is None


def test_without_occupancy_low_sm_activity_is_the_weaker_claim() -> None:
    v = small_work.rule(small(sm_occupancy=None), T)
    assert (
        isinstance(v, Verdict)
        and v.evidence["confidence"]["base"] == 0.75
        and v.evidence["missing"] == ["sm_occupancy"]
    )


def test_without_the_per_poll_idle_fraction_it_still_fires() -> None:
    """No idle fraction: duty-cycling cannot be ruled in, the rest decides, and the gap is listed."""
    v = small_work.rule(small(idle_fraction_mean=None, burst_util=None), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == 0.85
    assert v.evidence["missing"] == ["idle_fraction_mean"]


@pytest.mark.parametrize("signal", ["power_ratio", "memory_used_ratio_max", "util_mean"])
def test_without_power_memory_or_util_no_verdict(signal: str) -> None:
    """These are required: missing, the rule returns None (not a Skipped)."""
    assert small_work.rule(small(**{signal: None}), T) is None


@pytest.mark.parametrize(
    ("memory", "confidence"), [(T.memory_small_ratio - 0.01, 0.85), (T.memory_small_ratio, 0.75)]
)
def test_small_memory_makes_the_claim_surer(memory: float, confidence: float) -> None:
    v = small_work.rule(small(memory_used_ratio_max=memory), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == pytest.approx(confidence)


def test_a_preallocating_framework_does_not_hide_small_work() -> None:
    """JAX takes 75 % of the card at start: the SMs, utilization and power still tell."""
    v = small_work.rule(small(memory_used_ratio_max=0.75), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == pytest.approx(0.75)
    assert any("pre-allocate" in note for note in v.evidence["notes"])
    assert "memory 75%" in v.summary


@pytest.mark.parametrize("framework", ["jax", "tensorflow"])
def test_a_known_preallocating_framework_costs_no_confidence(framework: str) -> None:
    """The agent saw JAX (or TensorFlow) in the processes: full-looking memory is the framework's
    reservation, so the claim keeps the confidence small memory would give."""
    v = small_work.rule(small(memory_used_ratio_max=0.75, frameworks=(framework, "pytorch")), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == pytest.approx(0.85)
    assert v.evidence["signals"]["frameworks"] == [framework, "pytorch"]
    assert any("says nothing of the work" in note for note in v.evidence["notes"])


def test_pytorch_alone_does_not_explain_memory_away() -> None:
    v = small_work.rule(small(memory_used_ratio_max=0.75, frameworks=("pytorch",)), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == pytest.approx(0.75)


@pytest.mark.parametrize(("util", "fires"), [(T.util_low_ratio - 0.01, False), (T.util_low_ratio, True)])
def test_with_memory_held_a_kernel_must_be_resident_much_of_the_time(util: float, fires: bool) -> None:
    v = small_work.rule(small(memory_used_ratio_max=0.75, util_mean=util), T)
    assert isinstance(v, Verdict) is fires


def test_without_gpm_small_memory_is_still_required() -> None:
    no_gpm = {"sm_active": None, "sm_occupancy": None, "tensor_active": None}
    assert small_work.rule(small(memory_used_ratio_max=0.75, **no_gpm), T) is None
    v = small_work.rule(small(**no_gpm), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == 0.6
