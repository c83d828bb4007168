"""Too little parallel work: the GPU is busy-ish but its SMs are mostly empty — low SM activity
and occupancy, low power (small batches, tiny kernels, a Python loop launching them).

Little GPU memory used supports the claim but is not required where SM activity is measured:
JAX pre-allocates 75 % of the card, TensorFlow and vLLM nearly all of it, whatever the work.
Then a kernel must be resident much of the time (utilization at or above ``util_low_ratio``:
a GPU mostly without kernels waits on something else, not on small kernels) and the memory
must not be full (that is GPU memory pressure). Without GPM, utilization, power and memory
are all there is, so small memory stays a condition. Memory that is not small lowers the
confidence, unless the job's processes run a framework known to pre-allocate."""

from __future__ import annotations

from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.verdict import Cause, Evidence, Verdict, efficiency, make_verdict, pct
from gpuwatch.config.thresholds import Thresholds

#: frameworks (as the agent names them) that take most of the GPU's memory up front, by default
_PREALLOCATING = {
    "jax": "JAX pre-allocates 75 % of the GPU's memory",
    "tensorflow": "TensorFlow takes nearly all of it unless memory growth is on",
}


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
    memory_small = ev.check(
        "memory_used_ratio_max", f.memory_used_ratio_max, "<", "memory_small_ratio", t.memory_small_ratio
    )
    sm_low = ev.check("sm_active", f.sm_active, "<", "sm_active_low_ratio", t.sm_active_low_ratio)
    occupancy_low = ev.check(
        "sm_occupancy", f.sm_occupancy, "<", "sm_occupancy_low_ratio", t.sm_occupancy_low_ratio
    )
    if not memory_small and (sm_low is None or not _preallocated(f, t, ev)):
        return None
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
    confidence = 0.85 if occupancy_low else 0.75
    preallocating = sorted(_PREALLOCATING.keys() & set(f.frameworks or ()))
    if not memory_small and preallocating:
        ev.signal("frameworks", list(f.frameworks or ()))
        ev.notes.append(
            f"{' and '.join(_PREALLOCATING[name] for name in preallocating)}: GPU memory used says nothing "
            "of the work, so it is judged on SM activity, utilization and power"
        )
    elif not memory_small:
        confidence -= 0.1
        ev.notes.append(
            "GPU memory is not small, but frameworks that pre-allocate (JAX 75 %, TensorFlow, vLLM) fill it "
            "whatever the work: judged on SM activity, utilization and power"
        )
    return make_verdict(Cause.SMALL_WORK, confidence, f, ev, 1 - efficiency(f))


def _preallocated(f: WindowFeatures, t: Thresholds, ev: Evidence) -> bool:
    """Memory not small, yet small work may still hold: kernels resident much of the time and
    the memory below full (full is GPU memory pressure's)."""
    resident = ev.check("util_mean", f.util_mean, ">=", "util_low_ratio", t.util_low_ratio)
    full = t.gpu_memory_full_ratio
    not_full = ev.check("memory_used_ratio_max", f.memory_used_ratio_max, "<", "gpu_memory_full_ratio", full)
    return bool(resident and not_full)
