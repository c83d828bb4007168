"""Input-bound: the GPU duty-cycles (bursts of work between idle polls) while the job's CPUs
are saturated against its allocation or the host waits on I/O — or, the most common case,
while the job's CPUs are busy but not saturated: too few data-loader workers (one starved worker uses
about one core of N, so "CPUs saturated" alone misses it; seen with the reference workload,
``gpuwatch validate``). That last form needs the GPU's idle gaps to be unexplained by
communication (NVLink/NIC/IB traffic low) and gets a lower confidence."""

from __future__ import annotations

from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.verdict import Cause, Evidence, Skipped, Verdict, efficiency, make_verdict, pct
from gpuwatch.config.thresholds import Thresholds


def duty_cycling(f: WindowFeatures, t: Thresholds, ev: Evidence) -> bool | None:
    idle = ev.check(
        "idle_fraction_mean",
        f.idle_fraction_mean,
        ">=",
        "duty_idle_fraction_ratio",
        t.duty_idle_fraction_ratio,
    )
    burst = ev.check("burst_util", f.burst_util, ">=", "duty_burst_util_ratio", t.duty_burst_util_ratio)
    if idle is None or burst is None:
        return None
    return idle and burst


def rule(f: WindowFeatures, t: Thresholds) -> Verdict | Skipped | None:
    ev = Evidence()
    duty = duty_cycling(f, t, ev)
    if duty is None:
        return Skipped(Cause.INPUT_BOUND, "per-poll idle fraction not measured")
    if not duty or len(f.idle_gpus) == f.gpu_count:
        return None
    ratio = max((r for r in (f.cpu_ratio, f.cpu_ratio_max_node) if r is not None), default=None)
    cpu = ev.check("cpu_ratio", ratio, ">=", "cpu_saturated_ratio", t.cpu_saturated_ratio)
    io = ev.check("iowait", f.iowait, ">=", "iowait_high_ratio", t.iowait_high_ratio)
    few_workers = False
    if not (cpu or io):
        if cpu is None:
            return Skipped(
                Cause.INPUT_BOUND, "GPU duty-cycles and iowait is low, but job CPU use was not measured"
            )
        # CPUs busy but not saturated while the GPU waits between bursts: the loader works and
        # cannot keep up: too few workers. Calm CPUs (below cpu_busy_ratio) stay unexplained
        # (host-side syncs look the same); gaps with heavy traffic are communication's.
        busy = ev.check("cpu_ratio", ratio, ">=", "cpu_busy_ratio", t.cpu_busy_ratio)
        if not busy or not _network_quiet(f, t, ev):
            return None
        few_workers = True
    ev.signal("cpu_used_cores", f.cpu_used_cores)
    ev.signal("cpu_allocated_cores", f.cpu_allocated_cores)
    ev.signal("util_std", f.util_std)
    reasons = []
    if few_workers:
        reasons.append(
            f"CPUs busy at {pct(ratio)} of {f.cpu_allocated_cores:g} allocated cores but not saturated: "
            "too few data-loader workers"
        )
    if cpu:
        reasons.append(f"CPUs at {pct(ratio)} of {f.cpu_allocated_cores:g} allocated cores")
    if io:
        reasons.append(f"host I/O wait {pct(f.iowait)}")
    ev.values.update(
        input_reason=", ".join(reasons), idle_pct=pct(f.idle_fraction_mean), util_pct=pct(f.util_mean)
    )
    confidence = 0.9 if cpu and io else 0.85 if cpu else 0.75 if io else 0.6
    return make_verdict(Cause.INPUT_BOUND, confidence, f, ev, 1 - efficiency(f))


def _network_quiet(f: WindowFeatures, t: Thresholds, ev: Evidence) -> bool:
    """No sign that the idle gaps are collectives: NVLink and the node's NIC/IB are quiet."""
    checks = [
        ev.check(
            "nvlink_bytes_per_s",
            f.nvlink_bytes_per_s,
            "<",
            "nvlink_high_bytes_per_s",
            t.nvlink_high_bytes_per_s,
        ),
        ev.check(
            "network_bytes_per_s",
            f.network_bytes_per_s,
            "<",
            "network_high_bytes_per_s",
            t.network_high_bytes_per_s,
        ),
    ]
    return all(c is not False for c in checks)  # absent (None) counts as quiet
