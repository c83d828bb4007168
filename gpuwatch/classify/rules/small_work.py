"""Too little parallel work: the GPU is busy-ish but its SMs are mostly empty — low SM activity
and occupancy, low power, little memory (small batches, tiny kernels)."""

from __future__ import annotations

from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.verdict import Cause, Evidence, Verdict, efficiency, make_verdict, pct
from gpuwatch.config.thresholds import Thresholds


def rule(f: WindowFeatures, t: Thresholds) -> Verdict | None:
    if not f.util_mean or f.idle_gpus:
        return None
    ev = Evidence()
    if (
        ev.check(
            "idle_fraction_mean",
            f.idle_fraction_mean,
            "<",
            "duty_idle_fraction_ratio",
            t.duty_idle_fraction_ratio,
        )
        is False
    ):
        return None  # duty-cycling: waiting for something, not small work
    if not ev.check("power_ratio", f.power_ratio, "<", "power_low_ratio", t.power_low_ratio):
        return None
    if not ev.check(
        "memory_used_ratio_max", f.memory_used_ratio_max, "<", "memory_small_ratio", t.memory_small_ratio
    ):
        return None
    sm_low = ev.check("sm_active", f.sm_active, "<", "sm_active_low_ratio", t.sm_active_low_ratio)
    occupancy_low = ev.check(
        "sm_occupancy", f.sm_occupancy, "<", "sm_occupancy_low_ratio", t.sm_occupancy_low_ratio
    )
    if sm_low is None:
        ev.lacks("sm_active", "no GPM: judged on utilization, power and memory alone")
        ev.values.update(
            work_reason="SM activity not measured",
            power_pct=pct(f.power_ratio),
            mem_pct=pct(f.memory_used_ratio_max),
        )
        return make_verdict(Cause.SMALL_WORK, 0.6, f, ev, 1 - efficiency(f))
    if not sm_low:
        return None
    reason = f"SM active {pct(f.sm_active)}"
    if occupancy_low:
        reason += f", occupancy {pct(f.sm_occupancy)}"
    ev.values.update(work_reason=reason, power_pct=pct(f.power_ratio), mem_pct=pct(f.memory_used_ratio_max))
    return make_verdict(Cause.SMALL_WORK, 0.85 if occupancy_low else 0.75, f, ev, 1 - efficiency(f))
