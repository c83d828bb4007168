"""GPU memory pressure: GPU memory near full while the GPU does little.

"Does little" is low NVML utilization, or — where GPM measures SM activity — SMs mostly idle
while the PCIe bus carries ``pcie_spill_bytes_per_s`` or more: a job that offloads or pages
because its memory is full keeps copy kernels resident, so NVML utilization reads busy from
the copies alone (seen on an H200: 64 % utilization at 1 % SM activity and 38 GB/s of PCIe).
"""

from __future__ import annotations

from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.verdict import Cause, Evidence, Skipped, Verdict, efficiency, make_verdict, pct
from gpuwatch.config.thresholds import Thresholds


def rule(f: WindowFeatures, t: Thresholds) -> Verdict | Skipped | None:
    ev = Evidence()
    full = ev.check(
        "memory_used_ratio_max",
        f.memory_used_ratio_max,
        ">=",
        "gpu_memory_full_ratio",
        t.gpu_memory_full_ratio,
    )
    if full is None:
        return Skipped(Cause.GPU_MEMORY_PRESSURE, "GPU memory not measured")
    if not full or f.idle_gpus:
        return None
    low = ev.check(
        "util_mean", f.util_mean, "<", "gpu_memory_pressure_util_ratio", t.gpu_memory_pressure_util_ratio
    )
    if low:
        busy_part = f"GPU busy only {pct(f.util_mean)}"
    elif _spilling(f, t, ev):
        busy_part = (
            f"SMs active only {pct(f.sm_active)} and PCIe moves {f.pcie_bytes_per_s / 1e9:.1f} GB/s "
            f"(utilization {pct(f.util_mean)} counts the copies)"
        )
    else:
        return None
    ev.signal("sm_active", f.sm_active)
    if f.sm_active is None:
        ev.lacks("sm_active", "no GPM: judged on NVML utilization alone")
    ev.values.update(mem_pct=pct(f.memory_used_ratio_max), busy_part=busy_part)
    return make_verdict(Cause.GPU_MEMORY_PRESSURE, 0.85, f, ev, 1 - efficiency(f))


def _spilling(f: WindowFeatures, t: Thresholds, ev: Evidence) -> bool:
    """SMs mostly idle while the bus is saturated with transfers (needs GPM's SM activity)."""
    sm_low = ev.check("sm_active", f.sm_active, "<", "sm_active_low_ratio", t.sm_active_low_ratio)
    bus = ev.check(
        "pcie_bytes_per_s", f.pcie_bytes_per_s, ">=", "pcie_spill_bytes_per_s", t.pcie_spill_bytes_per_s
    )
    return bool(sm_low and bus)
