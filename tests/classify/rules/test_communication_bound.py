"""The communication_bound rule: a multi-GPU job with heavy NVLink traffic per GPU (or, across
nodes, heavy NIC/IB traffic per node; or, with NVLink quiet, heavy PCIe traffic) while its SMs
are mostly inactive. Without GPM it is claimed weakly, only when NVML utilization is low too
(collectives read as busy), else Skipped; over PCIe, not at all."""

from __future__ import annotations

import pytest

from gpuwatch.classify.rules import communication_bound
from gpuwatch.classify.verdict import Cause, Skipped, Verdict
from gpuwatch.config.thresholds import DEFAULT_THRESHOLDS as T

from .window import assert_verdict, window

#: two H200s on one node waiting on all-reduce: NVLink busy, SMs 20 % active, NVML reads busy
NVLINK_BOUND = {
    "gpu_count": 2, "gpus_with_data": 2, "gpu_hours": 2.0, "nvlink_bytes_per_s": 150e9,
    "sm_active": 0.2, "util_mean": 0.9,
}  # fmt: skip

#: two nodes of four GPUs each, waiting on InfiniBand
NETWORK_BOUND = {
    "gpu_count": 8, "gpus_with_data": 8, "node_count": 2, "gpu_hours": 8.0, "nvlink_bytes_per_s": 1e9,
    "network_bytes_per_s": 5e9, "ib_bytes_per_s": 4.5e9, "nic_bytes_per_s": 0.5e9, "sm_active": 0.3,
    "util_mean": 0.85,
}  # fmt: skip


#: four H100 PCIe cards, no NVLink: the all-reduce crosses PCIe, SMs 25 % active, no idle gaps
PCIE_BOUND = {
    "gpu_count": 4, "gpus_with_data": 4, "gpu_hours": 4.0, "nvlink_bytes_per_s": None,
    "pcie_bytes_per_s": 25e9, "sm_active": 0.25, "util_mean": 0.92, "idle_fraction_mean": 0.0,
    "memory_used_ratio_max": 0.6,
}  # fmt: skip


def pcie_bound(**changes: object):
    return window(**{**PCIE_BOUND, **changes})


def nvlink_bound(**changes: object):
    return window(**{**NVLINK_BOUND, **changes})


def network_bound(**changes: object):
    return window(**{**NETWORK_BOUND, **changes})


def test_heavy_nvlink_with_idle_sms() -> None:
    v = communication_bound.rule(nvlink_bound(), T)
    assert_verdict(v, Cause.COMMUNICATION_BOUND, 0.85)
    assert v.gpu_hours_wasted == pytest.approx(1.6)  # 1 - SM activity of two GPU-hours
    assert v.summary == (
        "job j1: 2 GPUs on 1 node bound by communication — NVLink 150.0 GB/s per GPU, SM activity 20%"
    )
    signals = v.evidence["signals"]
    assert signals["gpu_count"] == 2 and signals["node_count"] == 1
    assert signals["nvlink_bytes_per_s"] == 150e9
    assert signals["sm_active"] == 0.2 and signals["util_mean"] == 0.9
    assert "network_bytes_per_s" not in signals  # one node: the network is not looked at
    assert v.evidence["missing"] == []


def test_heavy_network_across_nodes() -> None:
    v = communication_bound.rule(network_bound(), T)
    assert isinstance(v, Verdict) and v.evidence["confidence"]["base"] == 0.85
    assert v.gpu_hours_wasted == pytest.approx(5.6)
    assert "8 GPUs on 2 nodes" in v.summary and "network 5.0 GB/s per node" in v.summary
    assert "NVLink" not in v.summary
    signals = v.evidence["signals"]
    assert signals["network_bytes_per_s"] == 5e9
    assert signals["ib_bytes_per_s"] == 4.5e9 and signals["nic_bytes_per_s"] == 0.5e9


def test_both_nvlink_and_network() -> None:
    v = communication_bound.rule(network_bound(nvlink_bytes_per_s=120e9), T)
    assert isinstance(v, Verdict)
    assert "NVLink 120.0 GB/s per GPU, network 5.0 GB/s per node, SM activity 30%" in v.summary


def test_a_healthy_window_is_not_communication_bound() -> None:
    assert communication_bound.rule(window(), T) is None
    assert communication_bound.rule(window(gpu_count=2, gpus_with_data=2, nvlink_bytes_per_s=5e9), T) is None


def test_one_gpu_is_never_communication_bound() -> None:
    assert communication_bound.rule(nvlink_bound(gpu_count=1, gpus_with_data=1), T) is None


def test_busy_sms_with_heavy_traffic_are_healthy() -> None:
    assert communication_bound.rule(nvlink_bound(sm_active=0.8), T) is None


def test_an_idle_gpu_is_not_communication_bound() -> None:
    assert communication_bound.rule(nvlink_bound(idle_gpus=("n1/gpu1",)), T) is None


def test_heavy_network_on_one_node_is_not_looked_at() -> None:
    """Per-node NIC traffic of a one-node job is not GPU-to-GPU traffic (storage, say)."""
    one_node = nvlink_bound(nvlink_bytes_per_s=1e9, network_bytes_per_s=10 * T.network_high_bytes_per_s)
    assert communication_bound.rule(one_node, T) is None


@pytest.mark.parametrize(("gpus", "fires"), [(1, False), (2, True)])
def test_the_gpu_count(gpus: int, fires: bool) -> None:
    v = communication_bound.rule(nvlink_bound(gpu_count=gpus, gpus_with_data=gpus), T)
    assert isinstance(v, Verdict) is fires


@pytest.mark.parametrize(
    ("nvlink", "fires"), [(T.nvlink_high_bytes_per_s, True), (T.nvlink_high_bytes_per_s * 0.99, False)]
)
def test_the_nvlink_threshold(nvlink: float, fires: bool) -> None:
    v = communication_bound.rule(nvlink_bound(nvlink_bytes_per_s=nvlink), T)
    assert isinstance(v, Verdict) is fires


@pytest.mark.parametrize(
    ("network", "fires"), [(T.network_high_bytes_per_s, True), (T.network_high_bytes_per_s * 0.99, False)]
)
def test_the_network_threshold(network: float, fires: bool) -> None:
    v = communication_bound.rule(network_bound(network_bytes_per_s=network), T)
    assert isinstance(v, Verdict) is fires


@pytest.mark.parametrize(
    ("sm_active", "fires"), [(T.sm_active_low_ratio, False), (T.sm_active_low_ratio - 0.01, True)]
)
def test_the_sm_activity_threshold(sm_active: float, fires: bool) -> None:
    v = communication_bound.rule(nvlink_bound(sm_active=sm_active), T)
    assert isinstance(v, Verdict) is fires


def test_without_gpm_and_low_util_a_weak_claim() -> None:
    no_gpm = nvlink_bound(has_gpm=False, sm_active=None, util_mean=0.3)
    v = communication_bound.rule(no_gpm, T)
    assert_verdict(v, Cause.COMMUNICATION_BOUND, 0.55)
    assert v.gpu_hours_wasted == pytest.approx(1.4)  # 1 - NVML utilization
    assert v.summary.endswith("NVLink 150.0 GB/s per GPU, SM activity n/a")
    assert v.evidence["missing"] == ["sm_active"]
    assert v.evidence["notes"] == ["no GPM on this card: SM activity unknown"]


def test_without_gpm_and_busy_util_it_cannot_tell() -> None:
    skipped = communication_bound.rule(nvlink_bound(has_gpm=False, sm_active=None), T)
    assert isinstance(skipped, Skipped) and skipped.cause is Cause.COMMUNICATION_BOUND
    assert "without GPM SM activity" in skipped.reason


@pytest.mark.parametrize(("util", "fires"), [(T.util_busy_ratio, False), (T.util_busy_ratio - 0.01, True)])
def test_without_gpm_the_util_busy_threshold(util: float, fires: bool) -> None:
    outcome = communication_bound.rule(nvlink_bound(has_gpm=False, sm_active=None, util_mean=util), T)
    assert isinstance(outcome, Verdict if fires else Skipped)


def test_without_gpm_or_util_it_cannot_tell() -> None:
    outcome = communication_bound.rule(nvlink_bound(has_gpm=False, sm_active=None, util_mean=None), T)
    assert isinstance(outcome, Skipped)


def test_without_traffic_counters_no_verdict() -> None:
    """No NVLink counter on one node: nothing to claim, and nothing Skipped either."""
    assert communication_bound.rule(nvlink_bound(nvlink_bytes_per_s=None), T) is None
    multi = network_bound(nvlink_bytes_per_s=None, network_bytes_per_s=None)
    assert communication_bound.rule(multi, T) is None


# -- over PCIe (no NVLink) ----------------------------------------------------------------------


def test_heavy_pcie_with_nvlink_quiet_and_idle_sms() -> None:
    v = communication_bound.rule(pcie_bound(), T)
    assert_verdict(v, Cause.COMMUNICATION_BOUND, 0.8)
    assert v.gpu_hours_wasted == pytest.approx(3.0)  # 1 - SM activity of four GPU-hours
    assert v.summary == (
        "job j1: 4 GPUs on 1 node bound by communication — PCIe 25.0 GB/s per GPU, no NVLink traffic, "
        "SM activity 25%"
    )
    signals = v.evidence["signals"]
    assert signals["pcie_bytes_per_s"] == 25e9 and signals["idle_fraction_mean"] == 0.0
    assert signals["memory_used_ratio_max"] == 0.6 and signals["sm_active"] == 0.25
    assert any("PCIe" in note for note in v.evidence["notes"])


def test_pcie_with_nvlink_counters_reading_zero_is_the_same() -> None:
    """A Hopper card without NVLink reports its GPM NVLink rate as 0 (the H200 recordings)."""
    v = communication_bound.rule(pcie_bound(nvlink_bytes_per_s=0.0), T)
    assert isinstance(v, Verdict) and "PCIe 25.0 GB/s per GPU, no NVLink traffic" in v.summary


def test_pcie_beside_light_nvlink_says_how_light() -> None:
    v = communication_bound.rule(pcie_bound(nvlink_bytes_per_s=4e9), T)
    assert isinstance(v, Verdict) and "PCIe 25.0 GB/s per GPU, NVLink only 4.0 GB/s" in v.summary


@pytest.mark.parametrize(
    ("pcie", "fires"), [(T.pcie_comm_bytes_per_s, True), (T.pcie_comm_bytes_per_s * 0.99, False)]
)
def test_the_pcie_threshold(pcie: float, fires: bool) -> None:
    v = communication_bound.rule(pcie_bound(pcie_bytes_per_s=pcie), T)
    assert isinstance(v, Verdict) is fires


def test_pcie_traffic_of_a_starved_loader_is_not_communication() -> None:
    """Idle gaps between bursts: the bus carries batches to a waiting GPU (input-bound's)."""
    gaps = pcie_bound(idle_fraction_mean=T.duty_idle_fraction_ratio)
    assert communication_bound.rule(gaps, T) is None
    assert isinstance(communication_bound.rule(pcie_bound(idle_fraction_mean=0.29), T), Verdict)


def test_pcie_traffic_of_a_full_gpu_is_not_communication() -> None:
    """Memory full: the bus carries spills and pages (GPU memory pressure's)."""
    assert communication_bound.rule(pcie_bound(memory_used_ratio_max=T.gpu_memory_full_ratio), T) is None
    assert communication_bound.rule(pcie_bound(memory_used_ratio_max=None), T) is None


def test_pcie_with_busy_sms_is_healthy() -> None:
    """DDP over PCIe overlapping its gradients with compute: heavy bus, busy SMs."""
    assert communication_bound.rule(pcie_bound(sm_active=0.8, pcie_bytes_per_s=40e9), T) is None


def test_pcie_without_gpm_is_not_claimed() -> None:
    """Without SM activity, collectives, a loader and an offloaded optimizer all read busy."""
    no_gpm = pcie_bound(has_gpm=False, sm_active=None, util_mean=0.3)
    assert communication_bound.rule(no_gpm, T) is None


def test_pcie_on_one_gpu_or_with_an_idle_gpu_is_not_communication() -> None:
    assert communication_bound.rule(pcie_bound(gpu_count=1, gpus_with_data=1), T) is None
    assert communication_bound.rule(pcie_bound(idle_gpus=("n1/gpu3",)), T) is None


def test_heavy_nvlink_is_named_before_pcie() -> None:
    v = communication_bound.rule(pcie_bound(nvlink_bytes_per_s=150e9), T)
    assert isinstance(v, Verdict) and "NVLink 150.0 GB/s" in v.summary and "PCIe" not in v.summary
    assert v.evidence["confidence"]["base"] == 0.85
