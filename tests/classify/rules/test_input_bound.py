"""The input_bound rule: duty-cycling with busy CPUs or iowait, and gaps whose bursts NVML misses."""

from __future__ import annotations

import pytest

from gpuwatch.classify.rules import input_bound
from gpuwatch.classify.verdict import Cause, Skipped, Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS as T

from .window import assert_verdict, window

#: the H200 replay of the reference input-bound workload (tests/gpu/fixtures/h200/run2)
H200_STARVED = {"util_mean": 0.02, "idle_fraction_mean": 0.87, "burst_util": 0.15, "sm_active": 0.01}


def test_saturated_cpus_with_visible_bursts() -> None:
    v = input_bound.rule(window(util_mean=0.4, idle_fraction_mean=0.55, burst_util=0.9, cpu_ratio=0.95), T)
    assert_verdict(v, Cause.INPUT_BOUND, 0.85)


def test_short_bursts_with_busy_cpus_are_the_loaders() -> None:
    v = input_bound.rule(window(**H200_STARVED, cpu_ratio=0.84), T)
    assert isinstance(v, Verdict) and v.cause is Cause.INPUT_BOUND and v.evidence["confidence"]["base"] == 0.6
    assert "steps are too short to show" in v.summary
    assert any("0.2 s utilization sample" in note for note in v.evidence["notes"])


def test_short_bursts_with_calm_cpus_stay_unexplained() -> None:
    assert input_bound.rule(window(**H200_STARVED, cpu_ratio=0.44), T) is None


@pytest.mark.parametrize(("ratio", "fires"), [(T.cpu_busy_ratio - 0.01, False), (T.cpu_busy_ratio, True)])
def test_short_bursts_at_the_cpu_busy_threshold(ratio: float, fires: bool) -> None:
    v = input_bound.rule(window(**H200_STARVED, cpu_ratio=ratio), T)
    assert isinstance(v, Verdict) is fires


def test_short_bursts_with_heavy_traffic_are_not_the_loaders() -> None:
    busy_net = window(**H200_STARVED, cpu_ratio=0.84, network_bytes_per_s=T.network_high_bytes_per_s)
    assert input_bound.rule(busy_net, T) is None


def test_no_gaps_no_verdict() -> None:
    assert input_bound.rule(window(idle_fraction_mean=0.1, burst_util=0.2, cpu_ratio=1.0), T) is None


def test_every_gpu_idle_is_not_input_bound() -> None:
    idle = window(**H200_STARVED, cpu_ratio=0.9, idle_gpus=("n1/gpu0",))
    assert input_bound.rule(idle, T) is None


def test_without_per_poll_signals_it_says_so() -> None:
    skipped = input_bound.rule(window(idle_fraction_mean=None, burst_util=None), T)
    assert isinstance(skipped, Skipped) and "not measured" in skipped.reason


def test_a_window_across_a_change_to_idle_is_a_phase_not_gaps() -> None:
    """Five busy minutes then five idle ones: half the polls read 0 %, but in idle minutes at
    the window's edge (idle_edge_share), not between the steps: no duty cycle, so not the
    loader. Measured through the whole pipeline (bench/alert_latency.py), this window was
    called input_bound before."""
    busy_then_idle = window(
        util_mean=0.47, idle_edge_share=0.5, idle_fraction_mean=0.5, burst_util=0.95, cpu_ratio=0.5
    )
    assert busy_then_idle.gap_fraction == 0.0
    assert input_bound.rule(busy_then_idle, T) is None
    # the same idle share between minutes with work is a duty cycle, even in whole idle samples
    # (a loader stalling longer than a sample)
    stalling = window(util_mean=0.47, zero_share=0.4, idle_fraction_mean=0.5, burst_util=0.95, cpu_ratio=0.95)
    assert stalling.gap_fraction == 0.5
    assert isinstance(input_bound.rule(stalling, T), Verdict)
    # gaps between the minutes with work, beside an idle tail
    mixed = window(idle_edge_share=0.2, idle_fraction_mean=0.6)
    assert mixed.gap_fraction == 0.5
