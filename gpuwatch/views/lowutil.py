"""Which jobs waste their GPUs, and why: the one listing behind the CLI, the web view, the
demo and the alert rules.

One row per job whose newest evaluation has a waste cause (:attr:`Evaluation.shown`): the
whole-job window's leading verdict, or the recent window's when the whole job looks healthy.
Each row says which window it comes from (``window_kind``), and its GPU-hours wasted are that
stored verdict's, so every surface reports the same number for the same job.

It reads ``verdicts`` (the newest evaluation per job) joined to ``slurm_jobs`` — never
samples — so its cost follows the number of jobs and verdict rows, not the samples behind them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpuwatch.slurm.model import HOLDING_STATES
from gpuwatch.sql.schema import slurm_jobs
from gpuwatch.views.evaluations import VerdictRow, group_evaluations, latest_select, verdict_of
from gpuwatch.views.jobs import JobFilters, JobIdentity, apply_job_filters, display_id, run_seconds

SORTS = ("wasted", "util", "duration", "start")


@dataclass(frozen=True)
class LowUtilFilters(JobFilters):
    """The job filters of ``gpuwatch jobs`` (``since``: jobs not ended before it), and what only
    the listing of verdicts asks; None or empty = no filter."""

    #: jobs whose newest evaluation ran at or after this time
    evaluated_since: datetime | None = None
    #: show this cause's verdict, for jobs whose newest evaluation found it
    cause: str | None = None
    job_ids: tuple[str, ...] | None = None
    #: only jobs that still hold their GPUs (Slurm says running, or only the agents know them)
    running: bool = False
    sort: str = "wasted"


@dataclass(frozen=True)
class LowUtilJob(JobIdentity):
    """A job that wastes GPUs: its Slurm facts, the verdict shown and the evaluation's others."""

    nodes: tuple[str, ...]
    start_at: datetime | None
    end_at: datetime | None
    #: seconds run: start to now (running) or to its end (finished)
    duration_s: int | None
    verdict: VerdictRow
    #: the evaluation's other waste verdicts: the rest of the shown window, then the other window
    others: tuple[VerdictRow, ...] = ()

    # the shown verdict's fields, so renderers read one flat record
    @property
    def cause(self) -> str:
        return self.verdict.cause

    @property
    def confidence(self) -> float:
        return self.verdict.confidence

    @property
    def window_kind(self) -> str:
        return self.verdict.window_kind

    @property
    def evaluated_at(self) -> datetime:
        return self.verdict.evaluated_at

    @property
    def gpus(self) -> int | None:
        return self.verdict.gpus

    @property
    def gpu_hours(self) -> float | None:
        return self.verdict.gpu_hours

    @property
    def gpu_hours_wasted(self) -> float | None:
        return self.verdict.gpu_hours_wasted

    @property
    def mean_util_ratio(self) -> float | None:
        return self.verdict.mean_util_ratio

    @property
    def summary(self) -> str:
        return self.verdict.summary

    @property
    def fix(self) -> str | None:
        return self.verdict.fix

    @property
    def evidence_text(self) -> str:
        """The summary without its ``job ID:`` prefix (for tables that show the job already)."""
        prefix = f"job {self.raw_job_id}: "
        return self.summary[len(prefix) :] if self.summary.startswith(prefix) else self.summary


def _sort_key(sort: str) -> Callable[[LowUtilJob], Any]:
    big = float("inf")
    if sort == "wasted":
        return lambda r: (-(r.gpu_hours_wasted or 0.0), r.job_id)
    if sort == "util":
        return lambda r: (big if r.mean_util_ratio is None else r.mean_util_ratio, r.job_id)
    if sort == "duration":
        return lambda r: (-(r.duration_s or 0), r.job_id)
    if sort == "start":
        return lambda r: (-(r.start_at.timestamp() if r.start_at else -big), r.job_id)
    raise ValueError(f"sort must be one of {SORTS}, not {sort!r}")


_JOB_COLUMNS = ("user_name", "account", "partition", "state", "start_at", "end_at", "nodes",
                "array_job_id", "array_task_id", "name")  # fmt: skip


def low_util_jobs(
    engine: sa.Engine | sa.Connection, filters: LowUtilFilters | None = None, *, now: datetime
) -> list[LowUtilJob]:
    """The jobs wasting GPUs per their newest evaluation, sorted per ``filters.sort``."""
    f = filters or LowUtilFilters()
    key = _sort_key(f.sort)  # a bad sort fails before the query
    j = slurm_jobs.c
    base = latest_select(evaluated_since=f.evaluated_since, job_ids=f.job_ids, waste_only=True)
    # the nodes as JSON text, parsed once per job listed rather than once per verdict row
    job_columns = [(sa.cast(j[c], sa.Text) if c == "nodes" else j[c]).label(f"job_{c}") for c in _JOB_COLUMNS]
    query = base.add_columns(*job_columns).outerjoin(slurm_jobs, j.job_id == base.selected_columns.job_id)
    query = apply_job_filters(query, f)
    if f.running:
        query = query.where(sa.or_(j.state.is_(None), j.state.in_(HOLDING_STATES)))
    if isinstance(engine, sa.Connection):
        rows = list(engine.execute(query).mappings())
    else:
        with engine.connect() as conn:
            rows = list(conn.execute(query).mappings())
    facts = {r["job_id"]: r for r in rows}
    out: list[LowUtilJob] = []
    for job_id, evaluation in group_evaluations([verdict_of(r) for r in rows]).items():
        waste = evaluation.waste
        shown = evaluation.of_cause(f.cause) if f.cause is not None else evaluation.shown
        if shown is None or not shown.is_waste:
            continue
        r = facts[job_id]
        start, end, state = r["job_start_at"], r["job_end_at"], r["job_state"]
        out.append(
            LowUtilJob(
                job_id=display_id(job_id, r["job_array_job_id"], r["job_array_task_id"]),
                raw_job_id=job_id,
                name=r["job_name"],
                user=r["job_user_name"],
                account=r["job_account"],
                partition=r["job_partition"],
                state=state,
                nodes=tuple(json.loads(r["job_nodes"] or "null") or ()),
                start_at=start,
                end_at=end,
                duration_s=run_seconds(start, end, state, now),
                verdict=shown,
                others=tuple(v for v in waste if v is not shown),
            )
        )
    out.sort(key=key)
    return out[: f.limit] if f.limit else out
