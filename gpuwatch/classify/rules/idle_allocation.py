"""Idle allocation: all or some of a job's GPUs read 0 % in every sample of the window (JDS)."""

from __future__ import annotations

from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.verdict import Cause, Evidence, Verdict, make_verdict
from gpuwatch.config.thresholds import Thresholds


def rule(f: WindowFeatures, t: Thresholds) -> Verdict | None:
    if not f.idle_gpus:
        return None
    ev = Evidence()
    ev.thresholds["idle_zero_share"] = t.idle_zero_share
    ev.signal("idle_gpus", list(f.idle_gpus))
    ev.signal("zero_share", {g.gpu: g.zero_share for g in f.gpus if g.gpu in f.idle_gpus})
    ev.signal(
        "idle_gpu_memory_used_bytes", {g.gpu: g.memory_used_max_bytes for g in f.gpus if g.gpu in f.idle_gpus}
    )
    ev.signal("gpu_count", f.gpu_count)
    ev.signal("job_util_max", f.job_util_max)
    no_data = [g.gpu for g in f.gpus if not g.util_samples]
    if no_data:
        ev.lacks("util_gpu", f"no utilization samples for {', '.join(no_data)}")
    share = len(f.idle_gpus) / max(1, f.gpu_count)
    shown = ", ".join(f.idle_gpus[:4]) + (f" and {len(f.idle_gpus) - 4} more" if len(f.idle_gpus) > 4 else "")
    ev.values.update(idle=len(f.idle_gpus), idle_list=shown)
    return make_verdict(Cause.IDLE_ALLOCATION, 0.88 if share >= 1 else 0.85, f, ev, share)
