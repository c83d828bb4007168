"""The host_memory_pressure rule: the job's cgroup at its memory limit, memory PSI high, or the
node swapping, while the GPUs are not busy; two or more of those make it surer. Skipped when
none of the three is measured."""

from __future__ import annotations

import pytest

from gpuwatch.classify.rules import host_memory_pressure
from gpuwatch.classify.verdict import Cause, Skipped, Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS as T

from .window import assert_verdict, window

GIB = 2**30

#: a job filling its 64 GiB cgroup while its GPU waits at 30 %, SMs 20 % active
AT_LIMIT = {
    "util_mean": 0.3, "sm_active": 0.2, "job_memory_ratio": 0.99, "job_memory_used_max_bytes": 63 * GIB,
    "job_memory_limit_bytes": 64 * GIB, "job_swap_max_bytes": 2 * GIB, "memory_pressure": 0.0,
}  # fmt: skip


def at_limit(**changes: object):
    return window(**{**AT_LIMIT, **changes})


def test_a_job_at_its_memory_limit() -> None:
    v = host_memory_pressure.rule(at_limit(), T)
    assert_verdict(v, Cause.HOST_MEMORY_PRESSURE, 0.8)
    assert v.gpu_hours_wasted == pytest.approx(0.8)  # 1 - SM activity
    assert v.summary == (
        "job j1: short of host memory — its memory (page cache aside) at 99% of its limit; GPU busy only 30%"
    )
    signals = v.evidence["signals"]
    assert signals["job_memory_ratio"] == 0.99 and signals["util_mean"] == 0.3
    assert signals["job_memory_used_max_bytes"] == 63 * GIB and signals["job_memory_limit_bytes"] == 64 * GIB
    assert signals["job_swap_max_bytes"] == 2 * GIB
    assert v.evidence["notes"] == ["swap and iowait are per node: other jobs on the node share them"]
    assert v.evidence["missing"] == []


def test_swapping_under_pressure_is_surer() -> None:
    v = host_memory_pressure.rule(
        at_limit(job_memory_ratio=0.7, swap_bytes_per_s=50 * 2**20, memory_pressure=0.3), T
    )
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == 0.88
    assert "short of host memory — node swapping 52.4 MB/s, memory pressure 30%;" in v.summary


def test_all_three_at_once() -> None:
    v = host_memory_pressure.rule(at_limit(swap_bytes_per_s=50 * 2**20, memory_pressure=0.3), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == 0.88
    assert (
        "its memory (page cache aside) at 99% of its limit, node swapping 52.4 MB/s, memory pressure 30%"
    ) in v.summary


def test_a_healthy_window_is_not_host_memory_pressure() -> None:
    assert host_memory_pressure.rule(window(), T) is None
    assert host_memory_pressure.rule(window(job_memory_ratio=0.5, memory_pressure=0.0), T) is None


def test_a_busy_gpu_at_its_memory_limit_is_fine() -> None:
    assert host_memory_pressure.rule(at_limit(util_mean=0.9, sm_active=0.7), T) is None


def test_an_idle_gpu_is_idle_allocation_not_memory_pressure() -> None:
    assert host_memory_pressure.rule(at_limit(idle_gpus=("n1/gpu0",)), T) is None


@pytest.mark.parametrize(
    ("ratio", "fires"), [(T.host_memory_limit_ratio, True), (T.host_memory_limit_ratio - 0.01, False)]
)
def test_the_memory_limit_threshold(ratio: float, fires: bool) -> None:
    v = host_memory_pressure.rule(at_limit(job_memory_ratio=ratio), T)
    assert isinstance(v, Verdict) is fires


@pytest.mark.parametrize(
    ("swap", "fires"), [(T.host_swap_bytes_per_s, True), (T.host_swap_bytes_per_s - 1, False)]
)
def test_the_swap_threshold(swap: float, fires: bool) -> None:
    v = host_memory_pressure.rule(at_limit(job_memory_ratio=0.5, swap_bytes_per_s=swap), T)
    assert isinstance(v, Verdict) is fires


@pytest.mark.parametrize(
    ("psi", "fires"), [(T.memory_pressure_high_ratio, True), (T.memory_pressure_high_ratio - 0.01, False)]
)
def test_the_pressure_threshold(psi: float, fires: bool) -> None:
    v = host_memory_pressure.rule(at_limit(job_memory_ratio=0.5, memory_pressure=psi), T)
    assert isinstance(v, Verdict) is fires


@pytest.mark.parametrize(("util", "fires"), [(T.util_busy_ratio, False), (T.util_busy_ratio - 0.01, True)])
def test_the_util_busy_threshold(util: float, fires: bool) -> None:
    v = host_memory_pressure.rule(at_limit(util_mean=util), T)
    assert isinstance(v, Verdict) is fires


def test_nothing_measured_it_says_so() -> None:
    blind = window(job_memory_ratio=None, swap_bytes_per_s=None, memory_pressure=None)
    skipped = host_memory_pressure.rule(blind, T)
    assert isinstance(skipped, Skipped) and skipped.cause is Cause.HOST_MEMORY_PRESSURE
    assert skipped.reason == "neither job cgroup memory nor host swap measured"


def test_swap_alone_is_enough_to_judge() -> None:
    """No cgroup memory (no job_minutes), but the node swaps: claimed, the cgroup signals missing."""
    v = host_memory_pressure.rule(
        at_limit(job_memory_ratio=None, memory_pressure=None, swap_bytes_per_s=8 * 2**20), T
    )
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == 0.8
    assert v.evidence["missing"] == ["job_memory_ratio", "memory_pressure"]


def test_one_quiet_signal_is_enough_to_rule_it_out() -> None:
    assert host_memory_pressure.rule(window(job_memory_ratio=None, memory_pressure=None), T) is None


def test_without_gpm_the_waste_is_from_utilization() -> None:
    v = host_memory_pressure.rule(at_limit(has_gpm=False, sm_active=None), T)
    assert isinstance(v, Verdict) and v.gpu_hours_wasted == pytest.approx(0.7)


def test_without_utilization_no_verdict() -> None:
    assert host_memory_pressure.rule(at_limit(util_mean=None), T) is None
