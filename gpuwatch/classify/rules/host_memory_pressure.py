"""Host memory pressure: the job's cgroup at its memory limit, memory PSI, or the node swapping,
while the GPUs are not busy. "At its limit" leaves the page cache out (``job_memory_ratio``):
the kernel reclaims cache first, so a job that streams its dataset through the cache sits at
its limit without running short."""

from __future__ import annotations

from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.verdict import Cause, Evidence, Skipped, Verdict, efficiency, make_verdict, pct, rate
from gpuwatch.config.thresholds import Thresholds


def rule(f: WindowFeatures, t: Thresholds) -> Verdict | Skipped | None:
    ev = Evidence()
    at_limit = ev.check(
        "job_memory_ratio", f.job_memory_ratio, ">=", "host_memory_limit_ratio", t.host_memory_limit_ratio
    )
    swapping = ev.check(
        "swap_bytes_per_s", f.swap_bytes_per_s, ">=", "host_swap_bytes_per_s", t.host_swap_bytes_per_s
    )
    psi = ev.check(
        "memory_pressure", f.memory_pressure, ">=", "memory_pressure_high_ratio", t.memory_pressure_high_ratio
    )
    if at_limit is None and swapping is None and psi is None:
        return Skipped(Cause.HOST_MEMORY_PRESSURE, "neither job cgroup memory nor host swap measured")
    found = [name for name, hit in (("at_limit", at_limit), ("swapping", swapping), ("psi", psi)) if hit]
    if not found:
        return None
    if not ev.check("util_mean", f.util_mean, "<", "util_busy_ratio", t.util_busy_ratio) or f.idle_gpus:
        return None
    ev.signal("job_memory_used_max_bytes", f.job_memory_used_max_bytes)
    ev.signal("job_memory_limit_bytes", f.job_memory_limit_bytes)
    ev.signal("job_swap_max_bytes", f.job_swap_max_bytes)
    ev.notes.append("swap and iowait are per node: other jobs on the node share them")
    reasons = []
    if at_limit:
        reasons.append(f"its memory (page cache aside) at {pct(f.job_memory_ratio)} of its limit")
    if swapping:
        reasons.append(f"node swapping {rate(f.swap_bytes_per_s)}")
    if psi:
        reasons.append(f"memory pressure {pct(f.memory_pressure)}")
    ev.values.update(host_reason=", ".join(reasons))
    return make_verdict(
        Cause.HOST_MEMORY_PRESSURE, 0.8 if len(found) == 1 else 0.88, f, ev, 1 - efficiency(f)
    )
