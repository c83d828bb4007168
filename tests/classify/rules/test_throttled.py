"""The throttled rule: clocks held down by heat, a hardware slowdown, a clock setting or a power cap
set below the card's default — not by the power limiter of a GPU at full load at its default
limit (an H200 at its default 700 W reads sw_power_cap)."""

from __future__ import annotations

import pytest

from gpuwatch.classify.rules import throttled
from gpuwatch.classify.verdict import Cause, Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS as T

from .window import gpu, window


def test_power_limiter_alone_is_not_throttling() -> None:
    at_limit = gpu(throttled_samples=360, throttled_share=1.0, clock_limited_share=0.0)  # run3's healthy
    assert throttled.rule(window(gpus=(at_limit,)), T) is None


def test_thermal_slowdown() -> None:
    hot = gpu(throttled_share=0.9, clock_limited_share=0.9, temperature_max_celsius=92.0)
    v = throttled.rule(window(gpus=(hot,)), T)
    assert isinstance(v, Verdict) and v.cause is Cause.THROTTLED and v.evidence["confidence"]["base"] == 0.8
    assert "thermal, up to 92 °C" in v.summary


def test_hardware_slowdown_at_a_cool_temperature() -> None:
    slowed = gpu(throttled_share=0.8, clock_limited_share=0.8, power_ratio=0.5)
    v = throttled.rule(window(gpus=(slowed,)), T)
    assert (
        isinstance(v, Verdict)
        and v.evidence["confidence"]["base"] == 0.7
        and "hardware slowdown" in v.summary
    )
    assert v.gpu_hours_wasted == 0.0  # the node's problem, not the job's waste


@pytest.mark.parametrize(
    ("share", "fires"), [(T.throttled_share_ratio - 0.01, False), (T.throttled_share_ratio, True)]
)
def test_the_share_threshold(share: float, fires: bool) -> None:
    v = throttled.rule(window(gpus=(gpu(throttled_share=share, clock_limited_share=share),)), T)
    assert isinstance(v, Verdict) is fires


def test_an_idle_gpu_is_never_throttled() -> None:
    idle = gpu(throttled_share=1.0, clock_limited_share=1.0, idle=True, util_mean=0.0)
    assert throttled.rule(window(gpus=(idle,)), T) is None


def test_one_slowed_gpu_of_two() -> None:
    slowed = gpu(gpu="n1/gpu1", throttled_share=0.7, clock_limited_share=0.7)
    v = throttled.rule(window(gpu_count=2, gpus=(gpu(), slowed)), T)
    assert isinstance(v, Verdict) and v.evidence["signals"]["throttled_share"] == {"n1/gpu1": 0.7}


def test_the_speed_lost_is_told_from_the_sm_clock() -> None:
    slowed = gpu(
        throttled_share=0.8, clock_limited_share=0.8, temperature_max_celsius=90.0, sm_clock_ratio=0.62
    )
    v = throttled.rule(window(gpus=(slowed,)), T)
    assert isinstance(v, Verdict) and v.summary.endswith("SM clock at 62% of its max")
    assert v.evidence["signals"]["sm_clock_ratio"] == {"n1/gpu0": 0.62}
    assert "sm_clock" not in v.evidence["missing"]


def test_an_unreported_sm_clock_is_listed_missing() -> None:
    slowed = gpu(throttled_share=0.8, clock_limited_share=0.8, sm_clock_ratio=None)
    v = throttled.rule(window(gpus=(slowed,)), T)
    assert isinstance(v, Verdict) and "sm_clock" in v.evidence["missing"]
    assert "SM clock" not in v.summary


def _at_limit(limit: float | None, default: float | None, share: float = 0.95) -> object:
    """A GPU held by the power limiter alone in ``share`` of its samples, under ``limit``."""
    ratio = None if limit is None or default is None else limit / default
    return gpu(
        throttled_share=share, clock_limited_share=0.0, power_capped_share=share, power_limit_watts=limit,
        power_default_limit_watts=default, power_cap_ratio=ratio, sm_clock_ratio=0.55,
    )  # fmt: skip


def test_a_site_power_cap_below_the_default_is_throttling() -> None:
    v = throttled.rule(window(gpus=(_at_limit(450.0, 700.0),)), T)
    assert isinstance(v, Verdict) and v.cause is Cause.THROTTLED and v.evidence["confidence"]["base"] == 0.7
    assert "power capped at 450 W, 64% of the card's 700 W default" in v.summary
    assert "nvidia-smi -i <gpu> -pl" in v.fix and "cooling" not in v.fix
    assert v.evidence["signals"]["power_cap_ratio"] == {"n1/gpu0": pytest.approx(450 / 700)}
    assert v.gpu_hours_wasted == 0.0


@pytest.mark.parametrize(
    ("limit", "fires"), [(0.9 * 700.0, False), (0.89 * 700.0, True)], ids=["at-threshold", "below"]
)
def test_the_cap_threshold(limit: float, fires: bool) -> None:
    assert isinstance(throttled.rule(window(gpus=(_at_limit(limit, 700.0),)), T), Verdict) is fires


def test_a_cap_the_limiter_rarely_reaches_is_not_throttling() -> None:
    """Capped at 450 W but drawing less: the limiter holds the clocks in 20 % of the samples."""
    gentle = _at_limit(450.0, 700.0, share=T.throttled_share_ratio - 0.3)
    assert throttled.rule(window(gpus=(gentle,)), T) is None


def test_without_the_default_limit_a_cap_is_not_judged() -> None:
    assert throttled.rule(window(gpus=(_at_limit(450.0, None),)), T) is None


def test_a_slowdown_and_a_cap_name_the_slowdown() -> None:
    slowed = gpu(gpu="n1/gpu1", throttled_share=0.8, clock_limited_share=0.8)
    v = throttled.rule(window(gpu_count=2, gpus=(_at_limit(450.0, 700.0), slowed)), T)
    assert isinstance(v, Verdict) and "hardware slowdown" in v.summary and "all 2 GPUs" in v.summary
    assert "cooling" in v.fix
    assert v.evidence["signals"]["throttled_share"] == {"n1/gpu0": 0.95, "n1/gpu1": 0.8}
