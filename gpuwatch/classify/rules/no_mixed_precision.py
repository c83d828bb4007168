"""No mixed precision: SMs busy, tensor pipes ≈ 0 on a GPU that has tensor cores.

Claimed only where tensor activity is measured (GPM, Hopper and newer); elsewhere the rule
says it could not check, and the final verdict lists that. A code whose FP64 pipes carry the
work (CFD, molecular dynamics, dense linear algebra in double precision) is not told to use
BF16: its precision is a requirement, not an oversight."""

from __future__ import annotations

from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.verdict import Cause, Evidence, Skipped, Verdict, make_verdict, pct
from gpuwatch.config.thresholds import Thresholds


def rule(f: WindowFeatures, t: Thresholds) -> Verdict | Skipped | None:
    ev = Evidence()
    if f.tensor_active is None:
        models = ", ".join(f.models) or "unknown model"
        return Skipped(Cause.NO_MIXED_PRECISION, f"tensor activity not measured (no GPM on {models})")
    if f.tensor_cores is False:
        return None
    busy = ev.check("sm_active", f.sm_active, ">=", "sm_active_low_ratio", t.sm_active_low_ratio)
    if not busy:
        return None
    if not ev.check(
        "tensor_active", f.tensor_active, "<", "tensor_active_min_ratio", t.tensor_active_min_ratio
    ):
        return None
    if _double_precision(f, t):
        return None
    ev.signal("fp32_active", f.fp32_active)
    ev.signal("fp16_active", f.fp16_active)
    ev.signal("fp64_active", f.fp64_active)
    ev.signal("tensor_cores", f.tensor_cores)
    ev.notes.append("gpu_hours_wasted assumes mixed precision would halve the time (typical, not measured)")
    confidence = 0.85 if (f.fp32_active or 0) >= 0.3 else 0.75
    ev.values.update(sm_pct=pct(f.sm_active), tensor_pct=pct(f.tensor_active))
    return make_verdict(Cause.NO_MIXED_PRECISION, confidence, f, ev, 0.5)


def _double_precision(f: WindowFeatures, t: Thresholds) -> bool:
    """FP64 pipes busy and busier than the FP32 ones: double precision is the job's arithmetic."""
    if f.fp64_active is None or f.fp64_active < t.fp64_active_min_ratio:
        return False
    return f.fp64_active >= (f.fp32_active or 0.0)
