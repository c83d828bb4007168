"""Input-bound: the GPU duty-cycles (bursts of work between idle polls) while the job's CPUs
are saturated against its allocation or the host waits on I/O — or, the most common case,
while the job's CPUs are busy but not saturated: too few data-loader workers (one starved worker uses
about one core of N, so "CPUs saturated" alone misses it; seen with the reference workload,
``gpuwatch validate``). That last form needs the GPU's idle gaps to be unexplained by
communication (NVLink/NIC/IB traffic low) and gets a lower confidence.

A fast GPU finishes a starved loader's step in a few milliseconds, inside one 0.2 s NVML
utilization sample, so its bursts never read as busy polls — only the gaps show (an H200
running the reference input-bound workload: 87 % of polls idle, bursts at 15 % utilization).
Gaps without visible bursts count as the loader's when the job's CPUs are busy and the network
is quiet, at the "too few workers" confidence."""

from __future__ import annotations

from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.verdict import Cause, Evidence, Skipped, Verdict, efficiency, make_verdict, pct
from gpuwatch.config.thresholds import Thresholds


def gaps_and_bursts(f: WindowFeatures, t: Thresholds, ev: Evidence) -> tuple[bool, bool] | None:
    """(the GPU idles in gaps, its bursts read busy); None when the per-poll signals are absent.

    The gaps are the idle polls between a GPU's first and last minute with work
    (:attr:`WindowFeatures.gap_fraction`): a window across a change from busy to idle holds busy
    minutes and idle ones, not gaps; and fewer than ``min_window_minutes`` minutes of work (the
    minute a job went idle in) show no duty cycle at all."""
    span = f.active_span_minutes
    if span is not None and span < t.min_window_minutes:
        ev.signal("active_span_minutes", span)
        return False, False
    idle = ev.check(
        "gap_fraction",
        f.gap_fraction,
        ">=",
        "duty_idle_fraction_ratio",
        t.duty_idle_fraction_ratio,
    )
    burst = ev.check("burst_util", f.burst_util, ">=", "duty_burst_util_ratio", t.duty_burst_util_ratio)
    if idle is None or burst is None:
        return None
    return idle, burst


def duty_cycling(f: WindowFeatures, t: Thresholds, ev: Evidence) -> bool | None:
    """Gaps of 0 % polls between busy bursts; None when the per-poll signals are absent."""
    found = gaps_and_bursts(f, t, ev)
    return None if found is None else found[0] and found[1]


def rule(f: WindowFeatures, t: Thresholds) -> Verdict | Skipped | None:
    ev = Evidence()
    found = gaps_and_bursts(f, t, ev)
    if found is None:
        return Skipped(Cause.INPUT_BOUND, "per-poll idle fraction not measured")
    gaps, bursts = found
    if not gaps or len(f.idle_gpus) == f.gpu_count:
        return None
    ratio = max((r for r in (f.cpu_ratio, f.cpu_ratio_max_node) if r is not None), default=None)
    if not bursts:
        return _short_bursts(f, t, ev, ratio)
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


def _short_bursts(f: WindowFeatures, t: Thresholds, ev: Evidence, ratio: float | None) -> Verdict | None:
    """Gaps whose bursts are too short for NVML to see: the loader's when CPUs are busy, net quiet."""
    if not ev.check("cpu_ratio", ratio, ">=", "cpu_busy_ratio", t.cpu_busy_ratio):
        return None
    if not _network_quiet(f, t, ev):
        return None
    ev.signal("cpu_used_cores", f.cpu_used_cores)
    ev.signal("cpu_allocated_cores", f.cpu_allocated_cores)
    ev.notes.append("steps shorter than NVML's 0.2 s utilization sample: bursts read low, gaps show")
    ev.values.update(
        input_reason=(
            f"CPUs busy at {pct(ratio)} of {f.cpu_allocated_cores:g} allocated cores while the GPU's "
            "steps are too short to show: the data loader cannot keep up"
        ),
        idle_pct=pct(f.idle_fraction_mean),
        util_pct=pct(f.util_mean),
    )
    return make_verdict(Cause.INPUT_BOUND, 0.6, f, ev, 1 - efficiency(f))
