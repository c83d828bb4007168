"""Verdicts: a cause, a confidence, evidence as data, a fix and a one-line summary.

Rules never build sentences: each cause has one summary template and one fix text here
(:data:`TEXTS`), rendered with values the rule puts in :class:`Evidence`. The evidence is
plain JSON-able data: the signal values, the thresholds they were compared with, each
comparison, and the signals that were missing (so "no GPM on this card" is visible).
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the verdict types load without the feature queries
    from gpuwatch.classify.features import WindowFeatures


class Cause(str, Enum):
    GPU_FAULT = "gpu_fault"
    CPU_ONLY = "cpu_only"
    IDLE_ALLOCATION = "idle_allocation"
    GPU_MEMORY_PRESSURE = "gpu_memory_pressure"
    HOST_MEMORY_PRESSURE = "host_memory_pressure"
    INPUT_BOUND = "input_bound"
    COMMUNICATION_BOUND = "communication_bound"
    SMALL_WORK = "small_work"
    NO_MIXED_PRECISION = "no_mixed_precision"
    THROTTLED = "throttled"
    UNKNOWN_LOW = "unknown_low"
    HEALTHY = "healthy"


#: last tie-break (same confidence, same GPU-hours wasted): the more specific cause first
PRIORITY = {cause: i for i, cause in enumerate(Cause)}

#: causes that explain another's evidence more specifically: cpu_only's GPUs are exactly
#: idle_allocation's, with the reason they are idle. When both fire on a window, the general
#: verdict's confidence is capped at the specific one's, so the specific one leads (the tie goes
#: to it by :data:`PRIORITY`) however close its own signals came to their thresholds
REFINES: dict[Cause, Cause] = {Cause.CPU_ONLY: Cause.IDLE_ALLOCATION}

#: a rule's confidence is its base level for the kind of evidence it has, less up to this much
#: when the weakest signal that made it fire is barely past its threshold
MARGIN_PENALTY = 0.1
#: a signal this far past its threshold (relative to the threshold) counts as a full margin
FULL_MARGIN = 0.25


@dataclass(frozen=True)
class CauseText:
    summary: str  # string.Template over the evidence's `values`
    fix: str


TEXTS: dict[Cause, CauseText] = {
    Cause.GPU_FAULT: CauseText(
        "job $job: $faulty of $gpus GPU(s) faulted ($fault_reason)",
        "The GPU or its node failed (driver, memory, bus): drain the node and have an admin check it "
        "(nvidia-smi -q, dmesg for NVRM Xid; reset or RMA as NVIDIA's Xid catalog says); resubmit the "
        "job excluding the node (--exclude).",
    ),
    Cause.CPU_ONLY: CauseText(
        "job $job: $gpus GPU(s) allocated, never used (no util, no GPU memory) while its CPUs run at "
        "$cpu_pct of $cpu_alloc cores",
        "The program never touches the GPU: check that it is built/installed with CUDA support "
        "(torch.cuda.is_available()) and moves work to the device; or resubmit without --gres=gpu.",
    ),
    Cause.IDLE_ALLOCATION: CauseText(
        "job $job: $idle of $gpus GPU(s) idle (0 % in every sample) — $idle_list",
        "Release GPUs the job does not use: request only as many as the code uses (--gpus=N), make "
        "sure every rank selects its own device (LOCAL_RANK), and end interactive sessions when done.",
    ),
    Cause.GPU_MEMORY_PRESSURE: CauseText(
        "job $job: GPU memory $mem_pct full while $busy_part",
        "GPU memory is near full and the GPU waits (allocator thrash, unified-memory paging or CPU "
        "offload): lower the batch size or use gradient checkpointing / activation offload sparingly, "
        "or use a GPU with more memory.",
    ),
    Cause.HOST_MEMORY_PRESSURE: CauseText(
        "job $job: short of host memory — $host_reason; GPU busy only $util_pct",
        "The job is at its memory limit or the node swaps: request more memory (--mem), stream the "
        "dataset instead of loading it whole, and lower DataLoader prefetch_factor / workers' copies.",
    ),
    Cause.INPUT_BOUND: CauseText(
        "job $job: $gpus GPU(s) starved by input — $input_reason; GPU busy $util_pct in bursts "
        "(idle $idle_pct of the time)",
        "The GPU waits for data: raise DataLoader num_workers (and request more CPUs with "
        "--cpus-per-task), use pin_memory and persistent_workers, pre-process the data once, and stage "
        "it to node-local storage if I/O wait is high.",
    ),
    Cause.COMMUNICATION_BOUND: CauseText(
        "job $job: $gpus GPU(s) on $nodes node(s) bound by communication — $comm_reason, SM activity $sm_pct",
        "The GPUs mostly wait on collectives: use fewer, fuller GPUs or nodes, raise the per-GPU batch "
        "or gradient accumulation, overlap communication with compute (DDP bucket size, FSDP "
        "prefetch), and check NCCL uses NVLink/InfiniBand (NCCL_DEBUG=INFO).",
    ),
    Cause.SMALL_WORK: CauseText(
        "job $job: too little work per GPU — util $util_pct, $work_reason, power $power_pct of limit, "
        "memory $mem_pct",
        "Kernels are too small to fill the GPU: raise the batch size, fuse small ops (torch.compile, "
        "CUDA graphs), run several tasks per GPU (MPS) or use a smaller GPU / MIG slice.",
    ),
    Cause.NO_MIXED_PRECISION: CauseText(
        "job $job: SMs busy ($sm_pct) but tensor cores idle ($tensor_pct) — no mixed "
        "precision$framework_part",
        "Use mixed precision: torch.autocast(device_type='cuda', dtype=torch.bfloat16) (or AMP with "
        "GradScaler for fp16), or allow TF32 (torch.backends.cuda.matmul.allow_tf32 = True).",
    ),
    Cause.THROTTLED: CauseText(
        "job $job: $throttled of $gpus GPU(s) throttled ($reason) $share_pct of the time$clock_part",
        "Clocks are held down by power or heat: report the node to the admins (cooling, power cap, "
        "fan); the job itself is not at fault.",
    ),
    Cause.UNKNOWN_LOW: CauseText(
        "job $job: GPU use low (util $util_pct$sm_part), cause unknown$missing_part",
        "Profile the job (torch.profiler or Nsight Systems) to see what the GPU waits for; signals "
        "that would have named a cause are listed as missing.",
    ),
    Cause.HEALTHY: CauseText(
        "job $job: $gpus GPU(s) used well (util $util_pct$sm_part)",
        "",
    ),
}

#: ``gpu_fault`` when every XID is the program's own (gpuwatch/classify/xid.py): same cause,
#: another owner and fix
APPLICATION_FAULT_TEXT = CauseText(
    "job $job: the program faulted on $faulty of $gpus GPU(s) ($fault_reason); the GPUs are fine",
    "The job's own error, not the node's: read its log for 'illegal memory access' or another CUDA "
    "error, rerun with CUDA_LAUNCH_BLOCKING=1 (or compute-sanitizer) to find the kernel, fix and "
    "resubmit; no admin action is needed.",
)


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def rate(value: float | None) -> str:
    if value is None:
        return "n/a"
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B/s"


_OPS = {
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def margin(value: float, op: str, threshold: float) -> float:
    """How far past its threshold a passing value is, relative to the threshold, 0..1: 0 at the
    threshold, 1 at ``FULL_MARGIN`` beyond it or more. A zero threshold (a presence test) is a
    full margin."""
    if threshold == 0:
        return 1.0
    beyond = (value - threshold) if op in (">", ">=") else (threshold - value)
    return round(max(0.0, min(1.0, beyond / abs(threshold) / FULL_MARGIN)), 3)


def scaled_confidence(base: float, evidence: Evidence) -> float:
    """``base`` less up to :data:`MARGIN_PENALTY` by the weakest passed check's margin."""
    weakest = evidence.weakest_margin()
    if weakest is None:
        return base
    return base - MARGIN_PENALTY * (1.0 - weakest["margin"])


@dataclass
class Evidence:
    """What a rule looked at: the numbers, the thresholds, each comparison, what was missing."""

    signals: dict[str, Any] = field(default_factory=dict)
    thresholds: dict[str, Any] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    values: dict[str, Any] = field(default_factory=dict)  # for the summary template

    def signal(self, name: str, value: Any) -> Any:
        self.signals[name] = value
        return value

    def check(
        self, name: str, value: float | None, op: str, threshold_name: str, threshold: float
    ) -> bool | None:
        """Compare and record; None (and ``name`` listed as missing) when the signal is absent."""
        self.signals[name] = value
        self.thresholds[threshold_name] = threshold
        if value is None:
            if name not in self.missing:
                self.missing.append(name)
            self.checks.append({"signal": name, "op": op, "threshold": threshold_name, "passed": None})
            return None
        passed = bool(_OPS[op](value, threshold))
        entry: dict[str, Any] = {"signal": name, "op": op, "threshold": threshold_name, "passed": passed}
        if passed:
            entry["margin"] = margin(value, op, threshold)
        self.checks.append(entry)
        return passed

    def weakest_margin(self) -> dict[str, Any] | None:
        """The passed check closest to its threshold: the evidence the verdict rests on least."""
        passed = [c for c in self.checks if c.get("passed") and "margin" in c]
        return min(passed, key=lambda c: c["margin"]) if passed else None

    def lacks(self, name: str, note: str | None = None) -> None:
        if name not in self.missing:
            self.missing.append(name)
        if note:
            self.notes.append(note)

    def as_dict(self) -> dict[str, Any]:
        """What a verdict stores as its evidence: every field but ``values``, which only fills the
        summary's template."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "values"}


@dataclass(frozen=True)
class Skipped:
    """A rule that could not decide because a signal it needs is missing."""

    cause: Cause
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"cause": self.cause.value, "reason": self.reason}


@dataclass(frozen=True)
class Verdict:
    job_id: str
    cause: Cause
    confidence: float
    window_kind: str
    window_start: Any
    window_end: Any
    summary: str
    fix: str
    evidence: dict[str, Any]
    gpus: int
    gpu_hours: float
    gpu_hours_wasted: float
    mean_util_ratio: float | None

    @property
    def sort_key(self) -> tuple[float, float, int]:
        """Best first: the higher confidence; at equal confidence the verdict wasting more
        GPU-hours (the fix that returns more); then the more specific cause."""
        return (-self.confidence, -self.gpu_hours_wasted, PRIORITY[self.cause])


def make_verdict(
    cause: Cause,
    confidence: float,
    f: WindowFeatures,
    evidence: Evidence,
    waste_share: float,
    text: CauseText | None = None,
) -> Verdict:
    """Render ``cause``'s template (or ``text``, a variant of it) with the evidence's values and
    wrap it with the window. ``confidence`` is the rule's base level for the evidence it has;
    the verdict's is that less the weakest check's shortfall (:func:`scaled_confidence`)."""
    text = text or TEXTS[cause]
    base_confidence = confidence
    confidence = scaled_confidence(confidence, evidence)
    values = {
        "job": f.job_id,
        "gpus": f.gpu_count,
        "nodes": f.node_count,
        "util_pct": pct(f.util_mean),
        "sm_part": "" if f.sm_active is None else f", SM active {pct(f.sm_active)}",
        **evidence.values,
    }
    summary = counted(string.Template(text.summary).safe_substitute(values))
    if f.kind == "segment":
        summary += f", {phase_since(f.start, f.end)}"
    data = evidence.as_dict()
    weakest = evidence.weakest_margin()
    data["confidence"] = {
        "base": base_confidence,
        "weakest": None if weakest is None else {"signal": weakest["signal"], "margin": weakest["margin"]},
    }
    data["window"] = {"kind": f.kind, "start": f.start.isoformat(), "end": f.end.isoformat()}
    if f.hourly:  # older than the minutes kept: read from the hourly rollups
        data["window"]["rollups"] = "hourly"
    if f.cgroup_start is not None:
        data["window"]["cgroup_start"] = f.cgroup_start.isoformat()
    data["models"] = list(f.models)
    data["gpm"] = f.has_gpm
    data["window_missing"] = list(f.missing)
    if f.mig is not None:  # MIG instances: which signal stood in for utilization, and the fractions
        data["mig"] = f.mig
    waste = max(0.0, min(1.0, waste_share))
    return Verdict(
        job_id=f.job_id,
        cause=cause,
        confidence=round(max(0.0, min(1.0, confidence)), 3),
        window_kind=f.kind,
        window_start=f.start,
        window_end=f.end,
        summary=summary,
        fix=text.fix,
        evidence=data,
        gpus=f.gpu_count,
        gpu_hours=round(f.gpu_hours, 4),
        gpu_hours_wasted=round(f.gpu_hours * waste, 4),
        mean_util_ratio=f.util_mean,
    )


_OF_GPUS = re.compile(r"\b(\d+) of (\d+) GPU\(s\)")
_COUNTED = re.compile(r"\b(\d+) (GPU|node)\(s\)")


def counted(text: str) -> str:
    """Templates say ``GPU(s)``; a sentence says ``its GPU``, ``all 4 GPUs``, ``1 of 8 GPUs``,
    ``1 node``."""

    def of(m: re.Match[str]) -> str:
        part, whole = int(m[1]), int(m[2])
        if part == whole:
            return "its GPU" if whole == 1 else f"all {whole} GPUs"
        return f"{part} of {whole} GPU" + ("" if whole == 1 else "s")

    text = _OF_GPUS.sub(of, text)
    return _COUNTED.sub(lambda m: f"{m[1]} {m[2]}" + ("" if m[1] == "1" else "s"), text)


def span_text(seconds: float) -> str:
    """``45 min``, ``3 h 05 min``: how long a phase has lasted, to the minute."""
    minutes = int(seconds // 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def phase_since(start: datetime, end: datetime) -> str:
    """``since 14:05 UTC (45 min)`` — the date too when the phase began on another day."""
    at = f"{start:%H:%M}" if start.date() == end.date() else f"{start:%Y-%m-%d %H:%M}"
    return f"since {at} UTC ({span_text((end - start).total_seconds())})"


def efficiency(f: WindowFeatures) -> float:
    """Share of the GPUs' capacity used: SM activity where measured, else NVML utilization."""
    value = f.sm_active if f.sm_active is not None else f.util_mean
    return 0.0 if value is None else value
