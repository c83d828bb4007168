"""CPU-only job: GPUs allocated, never any utilization or GPU memory, while the job's CPUs work.

"Never" is the whole job (the context carried into the recent window), so a job that used
its GPUs and then went idle is ``idle_allocation``, not this. "No GPU memory" is at most
``gpu_memory_no_context_bytes``: a real GPU with no process still reports the driver's few MB
as used, and any CUDA context costs far more.
"""

from __future__ import annotations

from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.verdict import Cause, Evidence, Skipped, Verdict, make_verdict, pct
from gpuwatch.config.thresholds import Thresholds


def rule(f: WindowFeatures, t: Thresholds) -> Verdict | Skipped | None:
    if not f.gpus_with_data or len(f.idle_gpus) < f.gpu_count:
        return None
    ev = Evidence()
    ev.signal("idle_gpus", list(f.idle_gpus))
    if ev.check("job_util_max", f.job_util_max, "<=", "util_never_used", 0.0) is not True:
        return None
    if (
        ev.check(
            "job_gpu_memory_max_bytes",
            f.job_gpu_memory_max_bytes,
            "<=",
            "gpu_memory_no_context_bytes",
            t.gpu_memory_no_context_bytes,
        )
        is False
    ):
        return None
    busy = ev.check("cpu_ratio", f.cpu_ratio, ">=", "cpu_busy_ratio", t.cpu_busy_ratio)
    if busy is None:
        return Skipped(Cause.CPU_ONLY, "job CPU use not measured (no job cgroup samples)")
    if not busy:
        return None
    ev.signal("cpu_used_cores", f.cpu_used_cores)
    ev.signal("cpu_allocated_cores", f.cpu_allocated_cores)
    ev.notes.append("process lists are not rolled up; 'no process' is inferred from 0 bytes of GPU memory")
    if (f.threads_per_core or 1) > 1:
        ev.signal("threads_per_core", f.threads_per_core)
        ev.notes.append(
            f"CPU use is judged against physical cores: {f.threads_per_core} logical CPUs share each core"
        )
    ev.values.update(cpu_pct=pct(f.cpu_ratio), cpu_alloc=f"{f.cpu_allocated_cores:g}")
    return make_verdict(Cause.CPU_ONLY, 0.92, f, ev, 1.0)
