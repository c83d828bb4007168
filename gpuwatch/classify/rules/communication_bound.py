"""Communication-bound: a multi-GPU job whose NVLink (or, across nodes, NIC/IB) traffic is heavy
while its SMs are mostly inactive. NVML utilization reads high during NCCL collectives, so
without GPM SM activity this can only be claimed weakly, when utilization is low too."""

from __future__ import annotations

from gpuwatch.classify.features import WindowFeatures
from gpuwatch.classify.verdict import Cause, Evidence, Skipped, Verdict, efficiency, make_verdict, pct, rate
from gpuwatch.config.thresholds import Thresholds


def rule(f: WindowFeatures, t: Thresholds) -> Verdict | Skipped | None:
    if f.gpu_count < 2:
        return None
    ev = Evidence()
    ev.signal("gpu_count", f.gpu_count)
    ev.signal("node_count", f.node_count)
    nvlink = ev.check(
        "nvlink_bytes_per_s", f.nvlink_bytes_per_s, ">=", "nvlink_high_bytes_per_s", t.nvlink_high_bytes_per_s
    )
    network = None
    if f.node_count >= 2:
        network = ev.check(
            "network_bytes_per_s",
            f.network_bytes_per_s,
            ">=",
            "network_high_bytes_per_s",
            t.network_high_bytes_per_s,
        )
        ev.signal("ib_bytes_per_s", f.ib_bytes_per_s)
        ev.signal("nic_bytes_per_s", f.nic_bytes_per_s)
    if not (nvlink or network):
        return None
    reasons = []
    if nvlink:
        reasons.append(f"NVLink {rate(f.nvlink_bytes_per_s)} per GPU")
    if network:
        reasons.append(f"network {rate(f.network_bytes_per_s)} per node")
    ev.values.update(comm_reason=", ".join(reasons), sm_pct=pct(f.sm_active))
    sm_low = ev.check("sm_active", f.sm_active, "<", "sm_active_low_ratio", t.sm_active_low_ratio)
    if sm_low is None:
        ev.lacks("sm_active", "no GPM on this card: SM activity unknown")
        if not ev.check("util_mean", f.util_mean, "<", "util_busy_ratio", t.util_busy_ratio):
            return Skipped(
                Cause.COMMUNICATION_BOUND,
                "heavy GPU-to-GPU traffic, but without GPM SM activity it cannot be told from healthy",
            )
        return make_verdict(Cause.COMMUNICATION_BOUND, 0.55, f, ev, 1 - efficiency(f))
    if not sm_low or f.idle_gpus:
        return None
    ev.signal("util_mean", f.util_mean)
    return make_verdict(Cause.COMMUNICATION_BOUND, 0.85, f, ev, 1 - efficiency(f))
