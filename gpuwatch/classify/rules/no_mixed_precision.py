"""No mixed precision: SMs busy, tensor pipes ≈ 0 on a GPU that has tensor cores.

Claimed only where tensor activity is measured (GPM, Hopper and newer); elsewhere the rule
says it could not check, and the final verdict lists that. A code whose FP64 pipes carry the
work (CFD, molecular dynamics, dense linear algebra in double precision) is not told to use
BF16: its precision is a requirement, not an oversight. Nor is a code whose processes the agent
inspected and found running no deep-learning framework (a CUDA simulation in FP32 has no
tensor-core path to switch on); where the framework is known, the fix names its API."""

from __future__ import annotations

from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.verdict import TEXTS, Cause, CauseText, Evidence, Skipped, Verdict, make_verdict, pct
from gpuwatch.config.thresholds import Thresholds

#: the fix in each framework's own API (PyTorch's is the default text)
_FIXES: dict[str, str] = {
    "jax": "Use mixed precision: compute in bfloat16 (params in float32, activations and matmuls in "
    "jnp.bfloat16, e.g. a jmp policy), or let float32 matmuls use TF32 "
    "(jax.config.update('jax_default_matmul_precision', 'tensorfloat32')).",
    "tensorflow": "Use mixed precision: tf.keras.mixed_precision.set_global_policy('mixed_bfloat16'), "
    "and keep TF32 on (tf.config.experimental.enable_tensor_float_32_execution(True), the default).",
}
_NAMES = {"pytorch": "PyTorch", "jax": "JAX", "tensorflow": "TensorFlow", "paddle": "PaddlePaddle",
          "mxnet": "MXNet"}  # fmt: skip


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
    ev.signal("frameworks", None if f.frameworks is None else list(f.frameworks))
    if f.frameworks is not None and not f.frameworks:
        return None  # inspected: no deep-learning framework, so no tensor-core path to switch on
    ev.signal("fp32_active", f.fp32_active)
    ev.signal("fp16_active", f.fp16_active)
    ev.signal("fp64_active", f.fp64_active)
    ev.signal("tensor_cores", f.tensor_cores)
    ev.notes.append("gpu_hours_wasted assumes mixed precision would halve the time (typical, not measured)")
    confidence = 0.85 if (f.fp32_active or 0) >= 0.3 else 0.75
    if f.frameworks is None:
        ev.lacks("frameworks", "the job's frameworks were not inspected: the fix assumes PyTorch")
    names = [_NAMES.get(name, name) for name in f.frameworks or ()]
    ev.values.update(
        sm_pct=pct(f.sm_active),
        tensor_pct=pct(f.tensor_active),
        framework_part=f" ({', '.join(names)})" if names else "",
    )
    return make_verdict(Cause.NO_MIXED_PRECISION, confidence, f, ev, 0.5, _text(f.frameworks or ()))


def _text(frameworks: tuple[str, ...]) -> CauseText | None:
    """The fix in the job's framework's API where it runs exactly one that has its own."""
    if len(frameworks) != 1 or frameworks[0] not in _FIXES:
        return None
    return CauseText(TEXTS[Cause.NO_MIXED_PRECISION].summary, _FIXES[frameworks[0]])


def _double_precision(f: WindowFeatures, t: Thresholds) -> bool:
    """FP64 pipes busy and busier than the FP32 ones: double precision is the job's arithmetic."""
    if f.fp64_active is None or f.fp64_active < t.fp64_active_min_ratio:
        return False
    return f.fp64_active >= (f.fp32_active or 0.0)
