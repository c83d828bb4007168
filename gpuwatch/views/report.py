"""Who wastes GPU-hours, by user, account or partition, over a period: ``gpuwatch report``.

A job counts for the part of its run inside the period (:mod:`gpuwatch.views.job_figures`:
GPU-hours held, a MIG instance as its share of the card; its largest cause's wasted GPU-hours,
capped at what it held; energy, utilization, CPU, memory; the advice of its next request). An
ended job the period holds whole adds its stored totals (:mod:`gpuwatch.views.job_totals`,
summed per group in SQL); every other job is computed here from its hours and verdicts, so a
month of a large cluster reads a row per job, not per job-hour. The top cause of a group is
the one with the most wasted GPU-hours; CO2 is the energy times ``report.grid_co2_kg_per_kwh``
when the site sets it; cost comes from the site's prices (:class:`Prices`); the trend is the
wasted share of the period's last week against the week before (:func:`trend_weeks`). A period
asked for as a length before its end starts on the hour (:func:`report_period`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum

import sqlalchemy as sa

from gpuwatch.sql.job_hours import floor_hour
from gpuwatch.sql.schema import slurm_jobs
from gpuwatch.views.energy import JOULES_PER_KWH
from gpuwatch.views.job_figures import ADVISED, JobFigures, figures, held, wasted_by_job
from gpuwatch.views.job_totals import covered, covered_sums
from gpuwatch.views.period import jobs_in_period


class GroupBy(str, Enum):
    USER = "user"
    ACCOUNT = "account"
    PARTITION = "partition"


_COLUMN = {GroupBy.USER: "user_name", GroupBy.ACCOUNT: "account", GroupBy.PARTITION: "partition"}
#: the group of a job whose user, account or partition Slurm did not give
UNKNOWN = "(unknown)"
WEEK = timedelta(days=7)
#: the jobs a period cuts (or that have no stored totals) are read by id up to this many; more
#: are read with the whole period's rows, which is faster than long lists of ids
_BY_ID = 5_000


@dataclass(frozen=True)
class Prices:
    """What GPU time costs (``[report]`` in the config); neither set: no cost figures."""

    gpu_hour: float | None = None
    #: per hour of one unit of Slurm's TRES ``billing``; used for jobs whose billing Slurm gave
    billing_hour: float | None = None


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
    #: mean NVML utilization of the jobs' GPUs over their samples inside the period
    gpu_efficiency: float | None = None
    #: cores used / cores allocated over the jobs' cgroup minutes inside the period
    cpu_efficiency: float | None = None
    #: each job's host memory peak / limit (one node, page cache included), GPU-hour weighted
    memory_efficiency: float | None = None
    #: what the GPU-hours cost, and the wasted ones; None when no price is configured
    cost: float | None = None
    cost_wasted: float | None = None
    #: wasted / allocated in the period's last 7 days, and in the 7 days before (the trend)
    wasted_share_last_week: float | None = None
    wasted_share_week_before: float | None = None
    #: jobs that ended in the period whose next request should change (views/advice.py, as
    #: ``gpuwatch job ID`` advises each): a shorter time limit, less memory, more or fewer cores
    jobs_advised_time: int = 0
    jobs_advised_memory: int = 0
    jobs_advised_cpus: int = 0
    #: ended jobs the period holds whole, advised over their whole run as ``gpuwatch job ID``
    #: advises each (stored totals, views/job_totals.py): fewer GPUs, a smaller card or MIG
    #: slice; and the GPU-hours their verdicts' fixes would return (an estimate; None: none)
    jobs_advised_gpus: int = 0
    jobs_advised_gpu_size: int = 0
    saving_gpu_hours: float | None = None

    def advised(self) -> list[tuple[str, int]]:
        """(what to change, jobs) for each request some jobs should change, as people read it."""
        found = (
            ("gpus", self.jobs_advised_gpus),
            ("card", self.jobs_advised_gpu_size),
            ("time", self.jobs_advised_time),
            ("memory", self.jobs_advised_memory),
            ("cpus", self.jobs_advised_cpus),
        )
        return [(what, n) for what, n in found if n]


@dataclass
class _Group:
    """A group's running sums while the report is built: from stored job totals (SQL sums,
    :meth:`add_sums`) and from the jobs the period cuts (one job at a time, :meth:`add`)."""

    jobs: int = 0
    flagged: int = 0
    hours: float = 0.0
    wasted: float = 0.0
    causes: dict[str, float] = field(default_factory=dict)
    joules: float = 0.0
    estimated_joules: float = 0.0
    util_sum: float = 0.0
    util_samples: int = 0
    cpu_used: float = 0.0
    cpu_alloc: float = 0.0
    memory_weighted: float = 0.0
    memory_hours: float = 0.0
    # cost, priced at the end: jobs with Slurm's billing, and the others
    billed_jobs: int = 0
    billing_hours: float = 0.0
    billing_hours_wasted: float = 0.0
    unbilled_jobs: int = 0
    unbilled_gpu_hours: float = 0.0
    unbilled_wasted: float = 0.0
    advised: dict[str, int] = field(default_factory=dict)
    saving: float | None = None

    def add(self, f: JobFigures) -> None:
        self.jobs += 1
        self.hours += f.gpu_hours
        if f.lead_cause is not None:
            self.flagged += 1
            self.wasted += f.gpu_hours_wasted
            self.causes[f.lead_cause] = self.causes.get(f.lead_cause, 0.0) + f.gpu_hours_wasted
        if f.energy_joules is not None:
            self.joules += f.energy_joules
            self.estimated_joules += f.energy_estimated_joules or 0.0
        self.util_sum += f.util_sum
        self.util_samples += f.util_samples
        self.cpu_used += f.cpu_used_cores
        self.cpu_alloc += f.cpu_allocated_cores
        if f.memory_ratio is not None and f.gpu_hours > 0:
            self.memory_weighted += f.memory_ratio * f.gpu_hours
            self.memory_hours += f.gpu_hours
        if f.billing_hours is not None:
            self.billed_jobs += 1
            self.billing_hours += f.billing_hours
            share = f.gpu_hours_wasted / f.gpu_hours if f.gpu_hours > 0 else 0.0
            self.billing_hours_wasted += f.billing_hours * share
        else:
            self.unbilled_jobs += 1
            self.unbilled_gpu_hours += f.gpu_hours
            self.unbilled_wasted += f.gpu_hours_wasted
        for kind in f.advised:
            self.advised[kind] = self.advised.get(kind, 0) + 1

    def add_sums(self, r: sa.Row) -> None:
        """Stored totals summed in SQL, of the jobs whose waste is credited to ``r.lead_cause``."""
        if r.lead_cause is not None:
            self.causes[r.lead_cause] = self.causes.get(r.lead_cause, 0.0) + (r.wasted or 0.0)
        self.jobs += r.jobs
        self.flagged += r.flagged
        self.hours += r.gpu_hours or 0.0
        self.wasted += r.wasted or 0.0
        self.joules += r.joules or 0.0
        self.estimated_joules += r.estimated_joules or 0.0
        self.util_sum += r.util_sum or 0.0
        self.util_samples += int(r.util_samples or 0)
        self.cpu_used += r.cpu_used or 0.0
        self.cpu_alloc += r.cpu_alloc or 0.0
        self.memory_weighted += r.memory_weighted or 0.0
        self.memory_hours += r.memory_hours or 0.0
        self.billed_jobs += r.billed_jobs or 0
        self.billing_hours += r.billing_hours or 0.0
        self.billing_hours_wasted += r.billing_hours_wasted or 0.0
        self.unbilled_jobs += r.unbilled_jobs or 0
        self.unbilled_gpu_hours += r.unbilled_gpu_hours or 0.0
        self.unbilled_wasted += r.unbilled_wasted or 0.0
        for kind in (*ADVISED, "gpus", "gpu_size"):
            self.advised[kind] = self.advised.get(kind, 0) + int(getattr(r, f"advised_{kind}") or 0)
        if r.saving_gpu_hours is not None:
            self.saving = (self.saving or 0.0) + r.saving_gpu_hours

    def costs(self, prices: Prices) -> tuple[float | None, float | None]:
        """Billing-hours x their price for jobs Slurm gave a billing, GPU-hours x theirs for the
        rest (or for all, with no billing price); None where no job had a price."""
        cost = wasted = None
        if prices.billing_hour is not None and self.billed_jobs:
            cost = self.billing_hours * prices.billing_hour
            wasted = self.billing_hours_wasted * prices.billing_hour
        if prices.gpu_hour is not None:
            if prices.billing_hour is None and self.jobs:
                hours, lost = self.hours, self.wasted
            elif self.unbilled_jobs:
                hours, lost = self.unbilled_gpu_hours, self.unbilled_wasted
            else:
                return cost, wasted
            cost = (cost or 0.0) + hours * prices.gpu_hour
            wasted = (wasted or 0.0) + lost * prices.gpu_hour
        return cost, wasted


def usage_report(
    engine: sa.Engine,
    by: GroupBy,
    start: datetime,
    end: datetime,
    co2_kg_per_kwh: float | None = None,
    prices: Prices | None = None,
    group: str | None = None,
) -> list[ReportRow]:
    """Every group with a GPU job running inside ``[start, end)``, most wasted GPU-hours first;
    only ``group``'s row when given, read from that group's jobs alone (a user's page)."""
    prices = prices or Prices()
    group_col, where = _grouping(by, group)
    groups: dict[str, _Group] = defaultdict(_Group)
    last, before = trend_weeks(end)
    # the trend's weeks read their own rows: on other connections while this one reads the
    # period (the database works on them at once); a period that is the last week is its own.
    # The jobs the period cuts: their minutes and hours on a third, their verdicts on this one
    with ThreadPoolExecutor(max_workers=3) as pool:
        week_before_read = pool.submit(_held_and_wasted, engine, by, *before, group)
        last_week_read = None if start == last[0] else pool.submit(_held_and_wasted, engine, by, *last, group)
        with engine.connect() as conn:
            sums = covered_sums(conn, start, end, group_col, where)
            cut = held(conn, start, end, group_col, (*where, ~covered(start, end)))
        for r in sums:  # a row per group and cause
            groups[r.grp or UNKNOWN].add_sums(r)
        ids = sorted(cut) if len(cut) <= _BY_ID else None
        period_read = pool.submit(jobs_in_period, engine, start, end, job_ids=ids) if cut else None
        wasted = wasted_by_job(engine, start, end, ids) if cut else {}
        period = period_read.result() if period_read is not None else {}
        for job_id, h in cut.items():
            lead, hours_wasted = wasted.get(job_id, (None, 0.0))
            groups[h.group or UNKNOWN].add(figures(h, period.get(job_id), lead, hours_wasted))
        if last_week_read is None:
            last_week = _shares((name, (g.hours, g.wasted)) for name, g in groups.items())
        else:
            last_week = _shares(last_week_read.result().items())
        week_before = _shares(week_before_read.result().items())
    out = [
        _row(name, g, co2_kg_per_kwh, prices, last_week.get(name), week_before.get(name))
        for name, g in groups.items()
    ]
    return sorted(out, key=lambda row: (-row.gpu_hours_wasted, -row.gpu_hours, row.group))


def _grouping(by: GroupBy, group: str | None) -> tuple[sa.ColumnElement, tuple[sa.ColumnElement, ...]]:
    """The ``slurm_jobs`` column of ``by``, and the condition for ``group``'s jobs alone."""
    column = slurm_jobs.c[_COLUMN[by]]
    if group is None:
        return column, ()
    return column, (column.is_(None) if group == UNKNOWN else column == group,)


def _row(
    group: str,
    g: _Group,
    co2_kg_per_kwh: float | None,
    prices: Prices,
    last_week: float | None,
    week_before: float | None,
) -> ReportRow:
    top = max(g.causes.items(), key=lambda item: (item[1], item[0]), default=(None, 0.0))
    kwh = g.joules / JOULES_PER_KWH
    cost, cost_wasted = g.costs(prices)
    return ReportRow(
        group=group,
        jobs=g.jobs,
        jobs_flagged=g.flagged,
        gpu_hours=round(g.hours, 4),
        gpu_hours_wasted=round(g.wasted, 4),
        wasted_share=_share(g.wasted, g.hours),
        top_cause=top[0],
        top_cause_gpu_hours=round(top[1], 4),
        energy_kwh=round(kwh, 4),
        energy_estimated_share=_share(g.estimated_joules, g.joules),
        co2_kg=None if co2_kg_per_kwh is None else round(kwh * co2_kg_per_kwh, 4),
        gpu_efficiency=_share(g.util_sum, g.util_samples),
        cpu_efficiency=_share(g.cpu_used, g.cpu_alloc),
        memory_efficiency=_share(g.memory_weighted, g.memory_hours),
        cost=None if cost is None else round(cost, 2),
        cost_wasted=None if cost_wasted is None else round(cost_wasted, 2),
        wasted_share_last_week=last_week,
        wasted_share_week_before=week_before,
        jobs_advised_time=g.advised.get("time", 0),
        jobs_advised_memory=g.advised.get("memory", 0),
        jobs_advised_cpus=g.advised.get("cpus", 0),
        jobs_advised_gpus=g.advised.get("gpus", 0),
        jobs_advised_gpu_size=g.advised.get("gpu_size", 0),
        saving_gpu_hours=None if g.saving is None else round(g.saving, 4),
    )


def _share(part: float, whole: float) -> float | None:
    return round(part / whole, 4) if whole > 0 else None


def _held_and_wasted(
    engine: sa.Engine, by: GroupBy, start: datetime, end: datetime, group: str | None = None
) -> dict[str, tuple[float, float]]:
    """group -> (GPU-hours held, wasted) in ``[start, end)``, counted as :func:`usage_report`
    counts them."""
    group_col, where = _grouping(by, group)
    out: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    with engine.connect() as conn:
        sums = covered_sums(conn, start, end, group_col, where, hours_only=True)
        cut = held(conn, start, end, group_col, (*where, ~covered(start, end)))
    for r in sums:
        pair = out[r.grp or UNKNOWN]
        pair[0] += r.gpu_hours or 0.0
        pair[1] += r.wasted or 0.0
    ids = sorted(cut) if len(cut) <= _BY_ID else None
    wasted = wasted_by_job(engine, start, end, ids) if cut else {}
    for job_id, h in cut.items():
        pair = out[h.group or UNKNOWN]
        pair[0] += h.gpu_hours
        pair[1] += min(wasted.get(job_id, (None, 0.0))[1], h.gpu_hours)
    return {name: (hours, lost) for name, (hours, lost) in out.items()}


def report_period(span: timedelta, end: datetime) -> tuple[datetime, datetime]:
    """The period of a report asked for as "``span`` before ``end``": from the start of the hour
    ``span`` before ``end``, to ``end``. A period that starts on the hour reads whole job-hours
    there (``sql/job_hours.py``); one that starts inside an hour also reads that hour's GPU-minutes
    and verdicts (the figures: ``docs/cli.md``, ``bench/report_time.py``)."""
    return floor_hour(end - span), end


def trend_weeks(end: datetime) -> tuple[tuple[datetime, datetime], tuple[datetime, datetime]]:
    """The trend's last week and the week before it: the week ends at ``end`` and starts on the
    hour (:func:`report_period`), the week before is the seven days before that, whole hours."""
    last = report_period(WEEK, end)
    return last, (last[0] - WEEK, last[0])


def _shares(sums: Iterable[tuple[str, tuple[float, float]]]) -> dict[str, float]:
    return {name: share for name, (hours, lost) in sums if (share := _share(lost, hours)) is not None}


@dataclass(frozen=True)
class WeekRow:
    """One week of one user, account or partition: what its jobs held and wasted."""

    start: datetime
    end: datetime
    gpu_hours: float
    gpu_hours_wasted: float
    wasted_share: float | None


def weekly_history(
    engine: sa.Engine, by: GroupBy, group: str, end: datetime, weeks: int = 8
) -> list[WeekRow]:
    """The ``weeks`` weeks before ``end``, oldest first, counted as :func:`usage_report` counts
    (a job's largest cause, capped at what it held in the week): the trend the group pages chart.
    The weeks are the trend's (:func:`trend_weeks`): the last ends at ``end``, each starts on the hour."""
    out = []
    hour = floor_hour(end)
    for k in range(weeks, 0, -1):
        w_start, w_end = hour - k * WEEK, (hour - (k - 1) * WEEK) if k > 1 else end
        hours, lost = _held_and_wasted(engine, by, w_start, w_end, group).get(group, (0.0, 0.0))
        out.append(WeekRow(w_start, w_end, round(hours, 4), round(lost, 4), _share(lost, hours)))
    return out
