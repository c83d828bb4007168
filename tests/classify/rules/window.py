"""A job window's features for rule tests: one busy, well-fed H200 unless told otherwise."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

from gpuwatch.classify.features import GpuFeatures, WindowFeatures
from gpuwatch.classify.verdict import Cause, Verdict

START = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)

_HEALTHY = WindowFeatures(
    job_id="j1", kind="job", start=START, end=START + timedelta(hours=1), gpu_source="rollup",
    node_count=1, gpu_count=1, gpus_with_data=1, gpus=(), models=("NVIDIA H200",), has_gpm=True,
    tensor_cores=True, gpu_hours=1.0, samples=360, lost_samples=0, util_mean=0.95, util_p50=0.96,
    util_p95=0.99, util_max=1.0, util_std=0.03, zero_share=0.0, idle_fraction_mean=0.0, burst_util=0.95,
    sm_active=0.8, sm_occupancy=0.4, tensor_active=0.5, dram_active=0.3, fp32_active=0.1,
    fp16_active=0.0, fp64_active=0.0, memory_used_ratio_max=0.6, power_ratio=0.8, throttled_share=0.0,
    xid_samples=0,
    xid_codes=(), frameworks=None, pcie_bytes_per_s=1e9, nvlink_bytes_per_s=0.0, idle_gpus=(), faulty_gpus=(),
    cpu_used_cores=4.0,
    cpu_allocated_cores=8.0, cpu_ratio=0.5, cpu_ratio_max_node=0.5, threads_per_core=1,
    job_memory_used_max_bytes=None,
    job_memory_limit_bytes=None, job_memory_ratio=None, job_swap_max_bytes=None, memory_pressure=None,
    host_busy=0.3, iowait=0.0, swap_bytes_per_s=0.0, nic_bytes_per_s=1e6, ib_bytes_per_s=None,
    network_bytes_per_s=1e6, job_util_max=1.0, job_gpu_memory_max_bytes=80 * 2**30,
)  # fmt: skip


def window(**changes: Any) -> WindowFeatures:
    """The healthy window with ``changes``; ``cpu_ratio`` also sets the worst node's ratio."""
    if "cpu_ratio" in changes and "cpu_ratio_max_node" not in changes:
        changes["cpu_ratio_max_node"] = changes["cpu_ratio"]
    return replace(_HEALTHY, **changes)


_BUSY_GPU = GpuFeatures(
    gpu="n1/gpu0", model="NVIDIA H200", minutes=60, samples=360, lost_samples=0, util_samples=360,
    util_mean=0.95, util_p50=0.96, util_p95=0.99, util_max=1.0, util_std=0.03, zero_share=0.0,
    idle_fraction_mean=0.0, burst_util=0.95, sm_active=0.85, sm_occupancy=0.4, tensor_active=0.3,
    dram_active=0.3, fp32_active=0.1, fp16_active=0.0, fp64_active=0.0, memory_used_max_bytes=80 * 2**30,
    memory_total_bytes=141 * 2**30, memory_used_ratio=0.57, power_mean_watts=620.0,
    power_limit_watts=700.0, power_default_limit_watts=700.0, power_cap_ratio=1.0, power_ratio=0.89,
    temperature_max_celsius=62.0, throttled_samples=0, throttled_share=0.0, clock_limited_share=0.0,
    power_capped_share=0.0, xid_samples=0, xid_codes=(), frameworks=None, pcie_bytes_per_s=1e9,
    nvlink_bytes_per_s=0.0, sm_clock_ratio=0.95, idle=False,
)  # fmt: skip


def gpu(**changes: Any) -> GpuFeatures:
    """One busy H200 over the window, with ``changes``."""
    return replace(_BUSY_GPU, **changes)


def assert_verdict(v: object, cause: Cause, base: float) -> None:
    """``v`` is a verdict of ``cause`` whose confidence starts from ``base``."""
    assert isinstance(v, Verdict) and v.cause is cause and v.evidence["confidence"]["base"] == base, v
