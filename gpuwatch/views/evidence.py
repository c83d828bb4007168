"""A verdict's evidence as sentences people read: what was measured, against which limit.

The cause rules record their evidence as data (``classify/verdict.Evidence``: signals, the
checks made against thresholds, what was missing, notes). Every surface that shows evidence —
the job page, ``gpuwatch job ID``, the alert messages — renders it with
:func:`evidence_sentences`, so none shows raw keys and all say the same thing. Each signal a
rule writes has a label here (a test holds the table to the rules).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

#: signal -> (label, unit); units: pct (a 0..1 ratio), bytes, rate (bytes/s), count, cores,
#: celsius, gpus (a list of GPU labels), bool, text. A per-GPU map is shown "gpu value, ...".
LABELS: dict[str, tuple[str, str]] = {
    "util_mean": ("mean GPU utilization", "pct"),
    "util_std": ("spread of GPU utilization (std dev)", "pct"),
    "sm_active": ("SM activity", "pct"),
    "sm_occupancy": ("SM occupancy", "pct"),
    "tensor_active": ("tensor-core activity", "pct"),
    "fp16_active": ("FP16 pipe activity", "pct"),
    "fp64_active": ("FP64 pipe activity", "pct"),
    "fp32_active": ("FP32 pipe activity", "pct"),
    "tensor_cores": ("the GPUs have tensor cores", "bool"),
    "frameworks": ("deep-learning frameworks in the job's GPU processes", "text"),
    "burst_util": ("utilization while not idle", "pct"),
    "gap_fraction": ("share of idle polls between bursts", "pct"),
    "active_span_minutes": ("minutes from the first to the last minute with GPU work", "count"),
    "idle_fraction_mean": ("share of 1 s polls at 0 %", "pct"),
    "zero_share": ("share of samples at 0 %", "pct"),
    "power_ratio": ("mean power against the power limit", "pct"),
    "power_cap_ratio": ("enforced power limit against the card's default", "pct"),
    "memory_used_ratio_max": ("GPU memory used at most", "pct"),
    "job_gpu_memory_max_bytes": ("GPU memory the job ever used", "bytes"),
    "idle_gpu_memory_used_bytes": ("GPU memory held by the idle GPUs", "bytes"),
    "job_util_max": ("highest GPU utilization over the whole job", "pct"),
    "idle_gpus": ("idle GPUs (0 % in every sample)", "gpus"),
    "faulty_gpus": ("GPUs with errors", "gpus"),
    "gpu_count": ("GPUs allocated", "count"),
    "node_count": ("nodes", "count"),
    "cpu_ratio": ("CPU use against the physical cores allocated", "pct"),
    "threads_per_core": ("logical CPUs per core (SMT)", "count"),
    "cpu_used_cores": ("CPU cores used", "cores"),
    "cpu_allocated_cores": ("CPU cores allocated", "cores"),
    "iowait": ("host I/O wait", "pct"),
    "job_memory_ratio": ("host memory used, page cache aside, against the job's limit", "pct"),
    "job_memory_used_max_bytes": ("host memory used at most", "bytes"),
    "job_memory_limit_bytes": ("the job's host memory limit", "bytes"),
    "job_swap_max_bytes": ("swap used at most", "bytes"),
    "swap_bytes_per_s": ("host swapping", "rate"),
    "memory_pressure": ("memory pressure (PSI, share of time stalled)", "pct"),
    "nvlink_bytes_per_s": ("NVLink traffic per GPU", "rate"),
    "pcie_bytes_per_s": ("PCIe traffic per GPU", "rate"),
    "network_bytes_per_s": ("network traffic per node (NIC + InfiniBand)", "rate"),
    "nic_bytes_per_s": ("Ethernet traffic per node", "rate"),
    "ib_bytes_per_s": ("InfiniBand traffic per node", "rate"),
    "throttled_share": ("share of samples throttled", "pct"),
    "sm_clock_ratio": ("SM clock against its max", "pct"),
    "temperature_max_celsius": ("highest GPU temperature", "celsius"),
    "lost_samples": ("samples of a GPU that stopped answering", "count"),
    "xid_samples": ("samples with an XID error", "count"),
    "xid_codes": ("XID codes", "text"),
    "owner": ("whose fault (XID catalog)", "text"),
    "per_gpu": ("per GPU", "text"),
    # names the rules list as missing rather than measure
    "util_gpu": ("GPU utilization", "pct"),
    "sm_clock": ("SM clock", "text"),
    "power_default_limit": ("the card's default power limit", "text"),
    "ecc_errors": ("ECC errors", "count"),
}

_OPS = {"<=": "at or below", "<": "below", ">=": "at or above", ">": "above", "==": "equal to"}
#: sentences shown at most (the job page's raw evidence has everything)
MAX_SENTENCES = 14


def label(name: str) -> str:
    return LABELS.get(name, (name.replace("_", " "), "text"))[0]


def unit(name: str) -> str:
    if name in LABELS:
        return LABELS[name][1]
    if name.endswith("_bytes_per_s"):
        return "rate"
    if name.endswith("_bytes"):
        return "bytes"
    if name.endswith(("_ratio", "_share", "_fraction")):
        return "pct"
    return "text"


def value_text(name: str, value: Any) -> str:
    """``value`` of signal ``name`` in its unit: 47%, 1.2 GiB, 3.40 GB/s, 8 cores."""
    if value is None:
        return "not measured"
    kind = unit(name)
    if isinstance(value, dict):
        shown = [f"{k} {value_text(name, v)}" for k, v in list(value.items())[:8]]
        return ", ".join(shown) + (f" and {len(value) - 8} more" if len(value) > 8 else "")
    if isinstance(value, (list, tuple)):
        items = [str(v) for v in value[:8]]
        return ", ".join(items) + (f" and {len(value) - 8} more" if len(value) > 8 else "") or "none"
    if isinstance(value, bool) or kind == "bool":
        return "yes" if value else "no"
    if not isinstance(value, (int, float)):
        return str(value)
    if kind == "pct":
        return _pct(float(value))
    if kind == "bytes":
        return _bytes(float(value))
    if kind == "rate":
        return f"{value / 1e9:,.2f} GB/s" if value >= 1e8 else f"{value / 1e6:,.1f} MB/s"
    if kind == "cores":  # 7.9 cores, 8 cores: a tenth of a core is what a reader can use
        return f"{value:,.0f} cores" if float(value).is_integer() else f"{value:,.1f} cores"
    if kind == "celsius":
        return f"{value:.0f} °C"
    return f"{value:,}" if isinstance(value, int) else f"{value:.3g}"


def _pct(ratio: float) -> str:
    value = ratio * 100
    return f"{value:.0f}%" if value >= 10 or value == 0 else f"{value:.1f}%"


def _bytes(value: float) -> str:
    for size, name in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB")):
        if value >= size:
            return f"{value / size:,.1f} {name}"
    return f"{value:,.0f} B"


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def evidence_sentences(evidence: Any) -> list[str]:
    """The evidence of one verdict as sentences, most telling first: each check against its
    limit, then the other measurements, then what was not measured, then the rule's notes."""
    if not isinstance(evidence, dict):
        return []
    signals: dict[str, Any] = evidence.get("signals") or {}
    thresholds: dict[str, Any] = evidence.get("thresholds") or {}
    out: list[str] = []
    checked: set[str] = set()
    for check in evidence.get("checks") or []:
        name = check.get("signal")
        if not name or name in checked:
            continue
        checked.add(name)
        if check.get("passed") is None:
            continue  # said once below, with the other gaps
        limit = thresholds.get(check.get("threshold"))
        op = _OPS.get(check.get("op", ""), check.get("op", ""))
        verb = "is" if check["passed"] else "is not"
        limit_text = f" {value_text(name, limit)}" if isinstance(limit, (int, float)) else ""
        out.append(f"{_capital(label(name))} {value_text(name, signals.get(name))} {verb} {op}{limit_text}.")
    for name, value in signals.items():
        if name in checked or value is None or value in ({}, []):
            continue
        out.append(f"{_capital(label(name))}: {value_text(name, value)}.")
    missing = [label(m) for m in _unique(evidence.get("missing") or [])]
    if missing:
        out.append(f"Not measured: {', '.join(missing)}.")
    out += [_capital(str(note).rstrip(".")) + "." for note in evidence.get("notes") or []]
    # what the window was read from qualifies every figure above: it is never the one cut
    window = _window_sentences(evidence.get("window"))
    room = MAX_SENTENCES - len(window)
    if len(out) > room:
        out = [*out[: room - 1], f"... and {len(out) - room + 1} more on the job page."]
    return out + window


def _window_sentences(window: Any) -> list[str]:
    """What a window older than the minutes kept was read from (``classify/features.py``)."""
    if not isinstance(window, dict) or window.get("rollups") != "hourly":
        return []
    text = "Read in whole hours from the hourly rollups: the window began before the minutes kept"
    since = window.get("cgroup_start")
    if isinstance(since, str):
        try:
            at = datetime.fromisoformat(since).strftime("%Y-%m-%d %H:%M UTC")
        except ValueError:
            at = since
        text += f"; the job's CPU and memory from {at} on"
    return [text + "."]


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))
