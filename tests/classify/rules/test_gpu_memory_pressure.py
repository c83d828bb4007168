"""The gpu_memory_pressure rule: memory full while the GPU waits, or while SMs idle and PCIe spills."""

from __future__ import annotations

import pytest

from gpuwatch.classify.rules import gpu_memory_pressure as rule_module
from gpuwatch.classify.verdict import Cause, Skipped, Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS as T

from .window import window

#: the H200 replay of the reference memory-pressure workload (tests/gpu/fixtures/h200/run1)
H200_SPILLING = {
    "memory_used_ratio_max": 0.97, "util_mean": 0.64, "sm_active": 0.013, "pcie_bytes_per_s": 38e9,
}  # fmt: skip


def test_full_memory_and_low_util() -> None:
    v = rule_module.rule(window(memory_used_ratio_max=0.97, util_mean=0.2, sm_active=0.1), T)
    assert isinstance(v, Verdict) and v.cause is Cause.GPU_MEMORY_PRESSURE
    assert "GPU busy only 20%" in v.summary


def test_spilling_over_pcie_while_util_counts_the_copies() -> None:
    v = rule_module.rule(window(**H200_SPILLING), T)
    assert isinstance(v, Verdict) and v.cause is Cause.GPU_MEMORY_PRESSURE
    assert "PCIe moves 38.0 GB/s" in v.summary and "counts the copies" in v.summary


@pytest.mark.parametrize(
    ("pcie", "fires"), [(T.pcie_spill_bytes_per_s * 0.99, False), (T.pcie_spill_bytes_per_s, True)]
)
def test_the_spill_threshold(pcie: float, fires: bool) -> None:
    v = rule_module.rule(window(**{**H200_SPILLING, "pcie_bytes_per_s": pcie}), T)
    assert isinstance(v, Verdict) is fires


def test_full_memory_with_busy_sms_is_not_pressure() -> None:
    """A large model that fills the card and computes (busy SMs) is healthy, whatever PCIe does."""
    assert rule_module.rule(window(**{**H200_SPILLING, "sm_active": 0.7}), T) is None


def test_without_gpm_heavy_pcie_alone_is_not_enough() -> None:
    assert rule_module.rule(window(**{**H200_SPILLING, "sm_active": None, "has_gpm": False}), T) is None


def test_memory_not_measured() -> None:
    assert isinstance(rule_module.rule(window(memory_used_ratio_max=None), T), Skipped)
