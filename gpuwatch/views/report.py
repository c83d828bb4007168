"""Who wastes GPU-hours, by user, account or partition, over a period: ``gpuwatch report``.

A job counts in a period for the part of its run inside it: GPU-hours allocated are its GPUs
times that overlap (``slurm_jobs``: start, end or now, GPUs). GPU-hours wasted are what
:func:`gpuwatch.views.waste_in_period` counts from the verdicts evaluated in the period (the
same figures the digests send): a job's largest cause (two causes of one job describe the same
GPU-hours), capped at what it held in the period, and credited to that cause. The top cause
of a group is the one with the most wasted GPU-hours. Energy is the GPUs' own, from the driver's
energy counter while the jobs held them (:mod:`gpuwatch.views.energy`); CO2 is that energy
times ``report.grid_co2_kg_per_kwh`` when the site sets it.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from enum import Enum

import sqlalchemy as sa

from gpuwatch.classify.verdict import PRIORITY, Cause
from gpuwatch.sql.schema import slurm_jobs
from gpuwatch.views.energy import JOULES_PER_KWH, job_energy
from gpuwatch.views.waste import waste_in_period


class GroupBy(str, Enum):
    USER = "user"
    ACCOUNT = "account"
    PARTITION = "partition"


_COLUMN = {GroupBy.USER: "user_name", GroupBy.ACCOUNT: "account", GroupBy.PARTITION: "partition"}
#: the group of a job whose user, account or partition Slurm did not give
UNKNOWN = "(unknown)"


@dataclass(frozen=True)
class ReportRow:
    """One user, account or partition over the period."""

    group: str
    jobs: int
    jobs_flagged: int  # jobs with any wasted GPU-hours
    gpu_hours: float  # allocated inside the period
    gpu_hours_wasted: float
    wasted_share: float | None  # wasted / allocated
    top_cause: str | None
    top_cause_gpu_hours: float
    #: the GPUs' energy while the group's jobs held them, inside the period (views/energy.py)
    energy_kwh: float
    #: share of that energy's samples estimated from power x interval (no counter reading)
    energy_estimated_share: float | None
    #: energy x the configured grid intensity; None when none is configured
    co2_kg: float | None


def usage_report(
    engine: sa.Engine, by: GroupBy, start: datetime, end: datetime, co2_kg_per_kwh: float | None = None
) -> list[ReportRow]:
    """Every group with a GPU job running inside ``[start, end)``, most wasted GPU-hours first."""
    allocated = _allocated(engine, by, start, end)
    energy = job_energy(engine, start, end)
    wasted_by_job: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for w in waste_in_period(engine, start, end):
        wasted_by_job[w.job_id][w.cause] += w.gpu_hours_wasted
    rows: dict[str, dict] = {}
    for job_id, (group, hours) in allocated.items():
        row = rows.setdefault(
            group,
            {"jobs": 0, "flagged": 0, "hours": 0.0, "wasted": 0.0, "causes": {}, "joules": 0.0, "est": 0.0},
        )
        row["jobs"] += 1
        row["hours"] += hours
        if job_id in energy:
            row["joules"] += energy[job_id].joules
            row["est"] += energy[job_id].joules * energy[job_id].estimated_share
        causes = wasted_by_job.get(job_id, {})
        largest = max(causes.values(), default=0.0)
        if largest <= 0:
            continue
        row["flagged"] += 1
        # a job's waste is its largest cause, never more than it held: two causes of one job
        # (idle and CPU-only, say) describe the same GPU-hours, as in the digests
        lead = max(causes, key=lambda cause: (causes[cause], -_specific(cause)))
        row["causes"][lead] = row["causes"].get(lead, 0.0) + min(largest, hours)
        row["wasted"] += min(largest, hours)
    out = []
    for group, r in rows.items():
        top = max(r["causes"].items(), key=lambda item: (item[1], item[0]), default=(None, 0.0))
        kwh = r["joules"] / JOULES_PER_KWH
        out.append(
            ReportRow(
                group=group,
                jobs=r["jobs"],
                jobs_flagged=r["flagged"],
                gpu_hours=round(r["hours"], 4),
                gpu_hours_wasted=round(r["wasted"], 4),
                wasted_share=round(r["wasted"] / r["hours"], 4) if r["hours"] > 0 else None,
                top_cause=top[0],
                top_cause_gpu_hours=round(top[1], 4),
                energy_kwh=round(kwh, 4),
                energy_estimated_share=round(r["est"] / r["joules"], 4) if r["joules"] > 0 else None,
                co2_kg=None if co2_kg_per_kwh is None else round(kwh * co2_kg_per_kwh, 4),
            )
        )
    return sorted(out, key=lambda row: (-row.gpu_hours_wasted, -row.gpu_hours, row.group))


def _specific(cause: str) -> int:
    """Rank of a cause in the classifier's tie-break (lower: more specific, as the listing orders
    equal verdicts): a CPU-only job that is also idle is credited to cpu_only."""
    try:
        return PRIORITY[Cause(cause)]
    except ValueError:
        return len(PRIORITY)


def _allocated(
    engine: sa.Engine, by: GroupBy, start: datetime, end: datetime
) -> dict[str, tuple[str, float]]:
    """job id -> (its group, GPU-hours it held inside the period)."""
    j = slurm_jobs.c
    group_col = j[_COLUMN[by]]
    query = sa.select(j.job_id, group_col.label("grp"), j.gpus, j.start_at, j.end_at).where(
        j.gpus > 0, j.start_at.is_not(None), j.start_at < end, sa.or_(j.end_at.is_(None), j.end_at > start)
    )
    out: dict[str, tuple[str, float]] = {}
    with engine.connect() as conn:
        for r in conn.execute(query):
            held_from = max(r.start_at, start)
            held_to = min(r.end_at or end, end)
            seconds = max(0.0, (held_to - held_from).total_seconds())
            out[r.job_id] = (r.grp or UNKNOWN, r.gpus * seconds / 3600)
    return out
