"""What a job used of what it asked for: the ``seff``-style summary, with GPUs.

``seff`` answers "how efficient was my job?" with elapsed time against the limit and CPU and
memory use against the allocation; users know that form. :class:`JobUsage` gives the same
answers and adds the GPUs: their mean utilization, SM activity where GPM measures it, the GPUs
that stayed idle and the most memory one of them held. It is read from the classifier's own
window features (:func:`gpuwatch.classify.features.window_features`) over the job's run, so the
summary and the verdicts rest on the same numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpuwatch.classify.features import JobScope, WindowFeatures, window_features
from gpuwatch.config.thresholds import Thresholds
from gpuwatch.sql.resolution import HOURS, MINUTES
from gpuwatch.sql.schema import gpus


@dataclass(frozen=True)
class JobUsage:
    """One job over its run window; None wherever nothing was measured or Slurm said nothing."""

    elapsed_s: int | None
    time_limit_s: int | None
    gpus: int
    #: GPUs x elapsed: what the job held, as Slurm bills it
    gpu_hours_allocated: float | None
    #: mean NVML utilization of its GPUs (the share of time a kernel ran), 0..1
    gpu_efficiency: float | None
    #: mean GPM SM activity (how much of each GPU the kernels filled); None without GPM
    sm_active: float | None
    idle_gpus: tuple[str, ...]
    #: the most memory any one of its GPUs held, and that GPU's size
    gpu_memory_used_max_bytes: int | None
    gpu_memory_total_bytes: int | None
    gpu_model: str | None
    cpu_cores_allocated: float | None
    cpu_cores_used: float | None  # mean over the run, summed over its nodes
    #: the job's memory limit per node (its cgroup's, else Slurm's request / nodes)
    memory_requested_bytes: int | None
    #: the most its cgroup held on one node, page cache included (what the limit counts)
    memory_used_max_bytes: int | None
    #: the most minutes with samples of any of its GPUs: how much the figures rest on
    measured_minutes: int = 0
    #: share of 0 % polls between a GPU's busy minutes (a loader that stalls every step;
    #: :attr:`~gpuwatch.classify.features.WindowFeatures.gap_fraction`)
    input_gap_share: float | None = None

    @property
    def time_used_share(self) -> float | None:
        return _ratio(self.elapsed_s, self.time_limit_s)

    @property
    def cpu_efficiency(self) -> float | None:
        return _ratio(self.cpu_cores_used, self.cpu_cores_allocated)

    @property
    def memory_efficiency(self) -> float | None:
        return _ratio(self.memory_used_max_bytes, self.memory_requested_bytes)

    def as_dict(self) -> dict[str, Any]:
        """The summary's figures with the derived ratios, for JSON."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["idle_gpus"] = list(self.idle_gpus)
        out["time_used_share"] = _round(self.time_used_share)
        out["cpu_efficiency"] = _round(self.cpu_efficiency)
        out["memory_efficiency"] = _round(self.memory_efficiency)
        return out


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or not den:
        return None
    return float(num) / float(den)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def job_usage(
    conn: sa.Connection,
    scope: JobScope,
    slurm: sa.RowMapping | None,
    elapsed_s: int | None,
    start: datetime,
    end: datetime,
    thresholds: Thresholds,
) -> JobUsage:
    """``scope``'s job over the whole minutes ``[start, end)`` (the job view's run window)."""
    f = window_features(conn, scope, "job", start, end, thresholds) if scope.gpus else None
    gpus = len(scope.gpus) or int((slurm or {}).get("gpus") or 0)
    peak = None
    if f is not None:
        held = [g for g in f.gpus if g.memory_used_max_bytes is not None]
        peak = max(held, key=lambda g: g.memory_used_max_bytes or 0, default=None)
    requested = f.job_memory_limit_bytes if f is not None else None
    if requested is None and slurm is not None and slurm["memory_bytes"]:
        nodes = max(1, f.node_count if f is not None and f.node_count else 1)
        requested = int(slurm["memory_bytes"]) // nodes
    cpus = f.cpu_allocated_cores if f is not None else None
    if cpus is None and slurm is not None and slurm["cpus"]:
        cpus = float(slurm["cpus"])
    return JobUsage(
        elapsed_s=elapsed_s,
        time_limit_s=int(slurm["time_limit_s"]) if slurm is not None and slurm["time_limit_s"] else None,
        gpus=gpus,
        gpu_hours_allocated=None if elapsed_s is None else round(_cards(f, gpus) * elapsed_s / 3600, 4),
        gpu_efficiency=None if f is None else f.util_mean,
        sm_active=None if f is None else f.sm_active,
        idle_gpus=() if f is None else f.idle_gpus,
        gpu_memory_used_max_bytes=None if peak is None else peak.memory_used_max_bytes,
        gpu_memory_total_bytes=None if peak is None else peak.memory_total_bytes,
        gpu_model=None if peak is None else peak.model,
        cpu_cores_allocated=cpus,
        cpu_cores_used=None if f is None else f.cpu_used_cores,
        memory_requested_bytes=requested,
        memory_used_max_bytes=None if f is None else f.job_memory_used_max_bytes,
        measured_minutes=0 if f is None else max((g.minutes for g in f.gpus), default=0),
        input_gap_share=None if f is None else f.gap_fraction,
    )


def _cards(f: WindowFeatures | None, gpus: int) -> float:
    """Whole cards' worth of the ``gpus`` held: a MIG instance counts its share of the card (a 1g
    slice of seven, 1/7), a whole GPU 1, as the verdicts' GPU-hours count them."""
    if f is None or not f.gpus:
        return float(gpus)
    shares = [1.0 if g.card_fraction is None else g.card_fraction for g in f.gpus]
    return math.fsum(shares) + max(0, gpus - len(shares))


def site_gpu_models(conn: sa.Connection) -> list[tuple[str, int | None]]:
    """Each GPU model the cluster has (NVML name) with the memory one of its GPUs reported last:
    the cards a job could be sent to instead. One indexed lookup per model, not a scan; in the
    hourly rollups when its minutes are gone (a GPU not seen for ``retention.minute_days``)."""
    g = gpus.c
    out = []
    for name in conn.execute(sa.select(g.name).where(g.name.is_not(None)).distinct()).scalars():
        one = conn.execute(sa.select(g.node_id, g.gpu_index).where(g.name == name).limit(1)).first()
        total = None
        for tier in (MINUTES, HOURS):
            m = tier.gpu.c
            total = conn.execute(
                sa.select(m.memory_total_bytes)
                .where(
                    m.node_id == one.node_id, m.gpu_index == one.gpu_index, m.memory_total_bytes.is_not(None)
                )
                .order_by(tier.time(tier.gpu).desc())
                .limit(1)
            ).scalar()
            if total is not None:
                break
        out.append((name, None if total is None else int(total)))
    return out
