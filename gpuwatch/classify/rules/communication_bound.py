"""Communication-bound: a multi-GPU job whose GPU-to-GPU traffic is heavy while its SMs are
mostly inactive: NVLink, or across nodes the NIC/IB, or — on a node without NVLink — PCIe.
NVML utilization reads high during NCCL collectives, so without GPM SM activity this can only
be claimed weakly, when utilization is low too (NVLink and network), or not at all (PCIe,
which also carries input, offload and spills)."""

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
        return _over_pcie(f, t, ev)
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


def _over_pcie(f: WindowFeatures, t: Thresholds, ev: Evidence) -> Verdict | None:
    """NVLink and the network quiet, PCIe heavy: collectives crossing PCIe or host memory.

    PCIe also carries a loader's batches, an offloaded optimizer and a full GPU's spills, so it
    is claimed only where those are ruled out — no idle gaps between bursts (a starved loader),
    GPU memory measured and not full (spilling is GPU memory pressure) — and where GPM shows
    the SMs mostly inactive (NCCL kernels keep NVML utilization high whatever the wait)."""
    if f.idle_gpus or f.sm_active is None:
        return None
    if not ev.check(
        "pcie_bytes_per_s", f.pcie_bytes_per_s, ">=", "pcie_comm_bytes_per_s", t.pcie_comm_bytes_per_s
    ):
        return None
    steady = ev.check(
        "idle_fraction_mean",
        f.idle_fraction_mean,
        "<",
        "duty_idle_fraction_ratio",
        t.duty_idle_fraction_ratio,
    )
    room = ev.check(
        "memory_used_ratio_max",
        f.memory_used_ratio_max,
        "<",
        "gpu_memory_full_ratio",
        t.gpu_memory_full_ratio,
    )
    if not (steady and room):
        return None
    if not ev.check("sm_active", f.sm_active, "<", "sm_active_low_ratio", t.sm_active_low_ratio):
        return None
    ev.signal("util_mean", f.util_mean)
    nvlink = "no NVLink traffic" if not f.nvlink_bytes_per_s else f"NVLink only {rate(f.nvlink_bytes_per_s)}"
    ev.values.update(
        comm_reason=f"PCIe {rate(f.pcie_bytes_per_s)} per GPU, {nvlink}", sm_pct=pct(f.sm_active)
    )
    ev.notes.append(
        "the GPUs exchange over PCIe (or through host memory), several times slower than NVLink; "
        "GPUs on one NVLink node, or fewer GPUs, exchange faster"
    )
    return make_verdict(Cause.COMMUNICATION_BOUND, 0.8, f, ev, 1 - efficiency(f))
