"""What to request next time, and what a fix would give back: advice with the numbers it rests on.

Two questions a researcher asks after "what went wrong?":

* **What should I ask Slurm for?** (:func:`right_sizing`) — fewer GPUs when some stayed idle, a
  MIG slice or a smaller card of the same architecture when the GPU memory peak and the work
  would fit, more CPU cores per GPU when the GPUs starved for input on busy CPUs (fewer when the
  cores sat idle), less host memory when the peak stayed far under the request, a shorter time
  limit when a completed job used little of it (Job Defense Shield's "excessive time limit").
* **What would the fix return?** (:func:`estimated_saving`) — the GPU-hours the verdict's fix
  would free, for causes whose fix has a measurable effect, with the basis of the estimate.

Every advice needs :data:`MIN_MINUTES` of measurements and keeps a margin (:data:`HEADROOM`);
where the evidence does not say, nothing is advised. Pure functions of the job's
:class:`~gpuwatch.views.usage.JobUsage`: tested with cases where advice must and must not appear.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from gpuwatch.cards import GIB, Card, MigProfile, card_for
from gpuwatch.slurm.model import TERMINAL_STATES
from gpuwatch.views.usage import JobUsage

#: no advice from less than this many minutes of measurements
MIN_MINUTES = 10
#: memory advice leaves this much above the observed peak (allocator growth, a bigger batch)
HEADROOM = 1.25
#: a MIG slice is advised only when the job's GPU activity would fill at most this share of it
MIG_MAX_FILL = 0.8
#: the job's CPUs count as saturated at this share of the allocation
CPU_SATURATED = 0.85
#: cores count as over-requested below this share, from this many cores up
CPU_IDLE = 0.25
CPU_IDLE_MIN_CORES = 8
#: host memory counts as over-requested below this share of a request of at least this much
MEMORY_IDLE = 0.5
MEMORY_MIN_REQUEST = 8 * GIB
#: a completed job used too little of its limit below this share of a limit of at least this long
TIME_IDLE = 0.5
TIME_MIN_LIMIT_S = 2 * 3600
#: new time limits are rounded up to this step
TIME_STEP_S = 15 * 60
#: what mixed precision is assumed to save (typical for training; not measured)
MIXED_PRECISION_SPEEDUP_SHARE = 0.5


@dataclass(frozen=True)
class Advice:
    """One request to change, why, and the numbers that say so."""

    kind: str  # "gpus" | "gpu_size" | "cpus" | "memory" | "time"
    request: str  # what to ask Slurm for: "--gpus=2", "a 1g.10gb MIG slice", "--time=02:00:00"
    reason: str
    basis: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Saving:
    """GPU-hours a verdict's fix would give back, as an estimate with its basis."""

    cause: str
    gpu_hours: float
    basis: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def _hours(seconds: float) -> str:
    h, m = divmod(round(seconds / 60), 60)
    return f"{h} h {m:02d} min" if h else f"{m} min"


def right_sizing(
    usage: JobUsage, cause: str | None, state: str | None, site_cards: Sequence[Card] = ()
) -> tuple[Advice, ...]:
    """What to request next time; ``site_cards``: the cards the cluster has (for a smaller card)."""
    if usage.measured_minutes < MIN_MINUTES:
        return ()
    found: list[Advice | None] = [
        _gpus(usage, cause),
        _gpu_size(usage, site_cards),
        _cpus(usage, cause),
        _memory(usage, cause),
        _time(usage, state),
    ]
    if state in TERMINAL_STATES:
        return tuple(a for a in found if a is not None)
    # a running job's peaks may still come: say the advice rests on the run so far
    return tuple(replace(a, reason=f"{a.reason} (so far: still running)") for a in found if a is not None)


def _gpus(usage: JobUsage, cause: str | None) -> Advice | None:
    idle, held = len(usage.idle_gpus), usage.gpus
    if not idle or not held:
        return None
    used = held - idle
    basis = {"gpus": held, "idle_gpus": list(usage.idle_gpus), "minutes": usage.measured_minutes}
    if used == 0:
        where = "run it in a CPU partition" if cause == "cpu_only" else "end the job when its work is done"
        minutes = usage.measured_minutes
        return Advice(
            "gpus", "no GPUs", f"none of its {held} GPU(s) did any work in {minutes} minutes: {where}", basis
        )
    return Advice(
        "gpus",
        f"--gpus={used}",
        f"{idle} of {held} GPUs stayed idle the whole run ({', '.join(usage.idle_gpus[:4])}"
        f"{' ...' if idle > 4 else ''}): {used} would have done the same work",
        basis,
    )


def _gpu_size(usage: JobUsage, site_cards: Sequence[Card]) -> Advice | None:
    peak, total = usage.gpu_memory_used_max_bytes, usage.gpu_memory_total_bytes
    used_gpus = usage.gpus - len(usage.idle_gpus)
    if not peak or used_gpus < 1:
        return None
    card = card_for(usage.gpu_model, total)
    if card is None:
        return None
    need = peak * HEADROOM
    activity = usage.sm_active if usage.sm_active is not None else usage.gpu_efficiency
    basis: dict[str, Any] = {"card": card.name, "gpu_memory_peak_bytes": peak, "headroom": HEADROOM}
    if used_gpus == 1 and activity is not None:
        slice_ = _smallest_slice(card, need, activity)
        if slice_ is not None:
            signal = "SM active" if usage.sm_active is not None else "utilization"
            basis.update(
                profile=slice_.profile,
                compute_sevenths=slice_.compute_sevenths,
                activity=round(activity, 4),
                activity_signal=signal,
            )
            return Advice(
                "gpu_size",
                f"a {slice_.profile} MIG slice",
                f"its GPU held at most {_gib(peak)} of {card.name} and its kernels kept it "
                f"{100 * activity:.0f}% busy ({signal}): a {slice_.profile} slice "
                f"({slice_.compute_sevenths}/7 of the SMs, {slice_.memory_gb} GB) holds that with room",
                basis,
            )
    smaller = [
        c
        for c in site_cards
        if c.architecture == card.architecture and c.memory_gb < card.memory_gb and c.usable_bytes >= need
    ]
    if not smaller:
        return None
    best = min(smaller, key=lambda c: (c.memory_gb, c.name))
    basis["smaller_card"] = best.name
    return Advice(
        "gpu_size",
        f"{best.name} GPUs",
        f"no GPU held more than {_gib(peak)} of its {card.name}: an {best.name} "
        f"({best.architecture}, the same speed) holds that, and leaves the larger cards to jobs that "
        "need their memory",
        basis,
    )


def _smallest_slice(card: Card, need: float, activity: float) -> MigProfile | None:
    fits = [p for p in card.mig if p.usable_bytes >= need and activity <= p.compute_share * MIG_MAX_FILL]
    return min(fits, key=lambda p: (p.compute_sevenths, p.memory_gb), default=None)


def _cpus(usage: JobUsage, cause: str | None) -> Advice | None:
    used, alloc, ratio = usage.cpu_cores_used, usage.cpu_cores_allocated, usage.cpu_efficiency
    if used is None or not alloc or ratio is None:
        return None
    gpus = max(1, usage.gpus - len(usage.idle_gpus))
    basis = {
        "cpu_cores_used": round(used, 2),
        "cpu_cores_allocated": alloc,
        "cpu_efficiency": round(ratio, 4),
    }
    if cause == "input_bound":
        if ratio < CPU_SATURATED:
            return None  # the loader waits on something other than cores: the verdict's fix says what
        per_gpu = math.ceil(2 * alloc / gpus)
        return Advice(
            "cpus",
            f"--cpus-per-gpu={per_gpu}",
            f"the GPUs waited for input while the job's CPUs were {100 * ratio:.0f}% busy ({used:.1f} of "
            f"{alloc:g} cores): twice the cores lets the data loader keep up",
            basis,
        )
    if ratio < CPU_IDLE and alloc >= CPU_IDLE_MIN_CORES:
        want = max(gpus, math.ceil(used * HEADROOM))
        per_gpu = max(1, math.ceil(want / gpus))
        return Advice(
            "cpus",
            f"--cpus-per-gpu={per_gpu}",
            f"it used {used:.1f} of its {alloc:g} cores on average ({100 * ratio:.0f}%)",
            basis,
        )
    return None


def _memory(usage: JobUsage, cause: str | None) -> Advice | None:
    peak, requested = usage.memory_used_max_bytes, usage.memory_requested_bytes
    if peak is None or not requested:
        return None
    basis = {"memory_peak_bytes": peak, "memory_requested_bytes": requested}
    if cause == "host_memory_pressure":
        want = math.ceil(requested * 1.5 / GIB)
        return Advice(
            "memory",
            f"--mem={want}G",
            f"it ran short of host memory at {_gib(peak)} of {_gib(requested)} per node",
            basis,
        )
    if requested >= MEMORY_MIN_REQUEST and peak < MEMORY_IDLE * requested:
        want = max(1, math.ceil(peak * HEADROOM / GIB))
        return Advice(
            "memory",
            f"--mem={want}G",
            f"its memory peaked at {_gib(peak)} of the {_gib(requested)} it asked for per node "
            "(page cache included)",
            basis,
        )
    return None


def _time(usage: JobUsage, state: str | None) -> Advice | None:
    elapsed, limit = usage.elapsed_s, usage.time_limit_s
    if state != "COMPLETED" or elapsed is None or not limit or limit < TIME_MIN_LIMIT_S:
        return None
    if elapsed >= TIME_IDLE * limit:
        return None
    want = max(TIME_STEP_S, math.ceil(elapsed * 1.5 / TIME_STEP_S) * TIME_STEP_S)
    h, rest = divmod(want, 3600)
    return Advice(
        "time",
        f"--time={h:02d}:{rest // 60:02d}:00",
        f"it completed in {_hours(elapsed)} of its {_hours(limit)} limit ({100 * elapsed / limit:.0f}%): "
        "a shorter limit starts sooner (backfill)",
        {"elapsed_s": elapsed, "time_limit_s": limit},
    )


def estimated_saving(
    usage: JobUsage,
    cause: str | None,
    window_kind: str | None,
    gpu_hours: float,
    gpu_hours_wasted: float,
    advice: Sequence[Advice] = (),
) -> Saving | None:
    """GPU-hours the fix of the job's verdict (``cause`` over its window's ``gpu_hours``) would
    return; None for causes whose fix has no measured effect (a fault, throttling, communication,
    memory pressure, an unknown cause) and for healthy jobs."""
    if cause == "idle_allocation" and gpu_hours_wasted > 0:
        return Saving(
            cause,
            gpu_hours_wasted,
            f"the idle GPUs' {gpu_hours_wasted:.2f} of the {gpu_hours:.2f} GPU-hours of the "
            f"{window_kind or 'job'} window: releasing them",
        )
    if cause == "cpu_only" and gpu_hours > 0:
        return Saving(cause, gpu_hours, "every GPU-hour: the job ran on its CPUs only")
    gap = usage.input_gap_share
    if cause == "input_bound" and window_kind == "job" and gap:
        return Saving(
            cause,
            round(gpu_hours * gap, 4),
            f"the GPUs sat idle {100 * gap:.0f}% of the time between steps, waiting for input",
        )
    if cause == "no_mixed_precision" and gpu_hours > 0:
        return Saving(
            cause,
            round(gpu_hours * MIXED_PRECISION_SPEEDUP_SHARE, 4),
            "mixed precision typically halves a training step on tensor cores (assumed, not measured)",
        )
    mig = next((a for a in advice if a.kind == "gpu_size" and "profile" in a.basis), None)
    if cause == "small_work" and mig is not None and gpu_hours > 0:
        sevenths = mig.basis["compute_sevenths"]
        return Saving(
            cause,
            round(gpu_hours * (1 - sevenths / 7), 4),
            f"a {mig.basis['profile']} slice is {sevenths}/7 of the card: the rest serves others",
        )
    return None


def site_cards(models: Sequence[tuple[str | None, int | None]]) -> tuple[Card, ...]:
    """The table's cards among the cluster's GPUs (NVML name, memory total)."""
    found = {card_for(model, total) for model, total in models}
    return tuple(sorted((c for c in found if c is not None), key=lambda c: (c.memory_gb, c.name)))
