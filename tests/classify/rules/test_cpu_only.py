"""The cpu_only rule: GPUs never used (no util, no more GPU memory than the driver's own) while CPUs work."""

from __future__ import annotations

import pytest

from gpuwatch.classify.rules import cpu_only
from gpuwatch.classify.verdict import Cause, Skipped, Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS as T

from .window import window

NEVER_USED = {
    "util_mean": 0.0, "idle_fraction_mean": 1.0, "burst_util": None, "sm_active": 0.0,
    "idle_gpus": ("n1/gpu0",), "job_util_max": 0.0,
}  # fmt: skip


@pytest.mark.parametrize("driver_bytes", [0, 3_407_872])  # what an H200 with no process reported
def test_an_h200_with_only_the_drivers_memory_is_never_used(driver_bytes: int) -> None:
    v = cpu_only.rule(window(**NEVER_USED, job_gpu_memory_max_bytes=driver_bytes, cpu_ratio=0.86), T)
    assert isinstance(v, Verdict) and v.cause is Cause.CPU_ONLY


@pytest.mark.parametrize(
    ("memory", "fires"), [(T.gpu_memory_no_context_bytes, True), (T.gpu_memory_no_context_bytes + 1, False)]
)
def test_the_no_context_threshold(memory: int, fires: bool) -> None:
    v = cpu_only.rule(window(**NEVER_USED, job_gpu_memory_max_bytes=memory, cpu_ratio=0.86), T)
    assert isinstance(v, Verdict) is fires


def test_a_cuda_context_held_idle_is_not_cpu_only() -> None:
    held = window(**NEVER_USED, job_gpu_memory_max_bytes=791_478_272, cpu_ratio=0.86)  # the probe's context
    assert cpu_only.rule(held, T) is None


def test_calm_cpus_are_not_cpu_only() -> None:
    assert cpu_only.rule(window(**NEVER_USED, job_gpu_memory_max_bytes=0, cpu_ratio=0.2), T) is None


def test_without_job_cpu_it_says_so() -> None:
    skipped = cpu_only.rule(window(**NEVER_USED, job_gpu_memory_max_bytes=0, cpu_ratio=None), T)
    assert isinstance(skipped, Skipped)
