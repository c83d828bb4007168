"""How much energy each job's GPUs used: the per-minute energy of its GPUs while it held them.

``gpu_minutes.energy_joules`` is filled by the rollups from the driver's monotonic
total-energy counter (NVML ``nvmlDeviceGetTotalEnergyConsumption``), or, for the samples where
the counter cannot say (absent, reset, a gap), from mean power x interval, counted in
``energy_power_samples`` (``sql/rollups.py``). A job's energy is the sum over the minutes of the
GPUs it held (``job_gpus``) from the minute it started to its end, within the period asked: on a
shared node only the job's own GPUs count. GPU energy only: CPUs, memory and cooling are not in
it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpuwatch.sql.job_hours import gpu_sums
from gpuwatch.sql.resolution import tier_for

JOULES_PER_KWH = 3.6e6


@dataclass(frozen=True)
class JobEnergy:
    job_id: str
    joules: float
    #: share of the samples behind it (a lost GPU's are not) whose energy came from power x
    #: interval, not the counter
    estimated_share: float

    @property
    def kwh(self) -> float:
        return self.joules / JOULES_PER_KWH


def gpus_energy(
    conn: sa.Connection, gpus: Sequence[tuple[int, int]], job_id: str, start: datetime, end: datetime
) -> JobEnergy | None:
    """Energy of the GPUs ``(node_id, gpu_index)`` over ``[start, end)`` (a job's own GPUs and
    run, as the job page knows them); None when no minute of them has an energy figure. Read
    from the minutes, or the hours for a range older than the minutes (``sql/resolution.py``)."""
    if not gpus:
        return None
    tier = tier_for(conn, start, end)
    m = tier.gpu.c
    wanted = sa.or_(*(sa.and_(m.node_id == node, m.gpu_index == index) for node, index in gpus))
    query = sa.select(*gpu_sums(tier.gpu)).where(wanted, *tier.within(tier.gpu, start, end))
    row = conn.execute(query).mappings().one()
    return energy_of(job_id, row)


def energy_of(job_id: str, row: Any) -> JobEnergy | None:
    """A :class:`JobEnergy` from the energy sums of :func:`gpuwatch.sql.job_hours.gpu_sums`;
    None when no minute had a figure."""
    if row["energy_joules"] is None:
        return None
    samples = row["energy_samples"]
    return JobEnergy(
        job_id, float(row["energy_joules"]), (row["energy_power_samples"] or 0) / samples if samples else 0.0
    )
