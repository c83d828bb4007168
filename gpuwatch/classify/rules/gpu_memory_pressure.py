"""GPU memory pressure: GPU memory near full while the GPU does little."""

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
    if not full:
        return None
    low = ev.check(
        "util_mean", f.util_mean, "<", "gpu_memory_pressure_util_ratio", t.gpu_memory_pressure_util_ratio
    )
    if not low or f.idle_gpus:
        return None
    ev.signal("sm_active", f.sm_active)
    if f.sm_active is None:
        ev.lacks("sm_active", "no GPM: judged on NVML utilization alone")
    ev.values.update(mem_pct=pct(f.memory_used_ratio_max))
    return make_verdict(Cause.GPU_MEMORY_PRESSURE, 0.85, f, ev, 1 - efficiency(f))
