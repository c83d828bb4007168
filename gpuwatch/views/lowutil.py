"""Which jobs waste their GPUs, and why: the one listing behind the CLI, the web view, the
demo and the alert rules.

One row per job whose newest evaluation has a waste cause (:attr:`Evaluation.shown`): the
whole-job window's leading verdict, or the recent window's when the whole job looks healthy.
Each row says which window it comes from (``window_kind``), and its GPU-hours wasted are that
stored verdict's, so every surface reports the same number for the same job.

It reads ``verdicts`` (the newest evaluation per job, found by ``newest_evaluations``) joined to
``slurm_jobs`` — never samples. The shown verdict is picked, the listing sorted, counted and paged
in SQL, so a page costs the rows it shows plus the database's pass over the wasting jobs' newest
verdicts.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpuwatch.slurm.model import HOLDING_STATES, TERMINAL_STATES
from gpuwatch.sql.buckets import epoch_seconds
from gpuwatch.sql.engine import is_postgres
from gpuwatch.sql.jobs import CHUNK
from gpuwatch.sql.schema import slurm_jobs
from gpuwatch.views.evaluations import (
    Evaluation,
    VerdictRow,
    group_evaluations,
    latest_select,
    shown_select,
    verdict_reader,
    verdicts_of,
)
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


def _run_seconds_sql(conn: sa.Connection, now: datetime) -> sa.ColumnElement[Any]:
    """:func:`run_seconds` in SQL (0 where the start is unknown or after ``now``), for sorting by
    duration."""
    j = slurm_jobs.c
    start, end, at = epoch_seconds(conn, j.start_at), epoch_seconds(conn, j.end_at), int(now.timestamp())
    running = sa.or_(j.state.is_(None), j.state.not_in(sorted(TERMINAL_STATES)), j.end_at.is_(None))
    stop = sa.case((running, at), (end > at, at), else_=end)
    return sa.case((j.start_at.is_(None), 0), (stop < start, 0), else_=stop - start)


def _order(conn: sa.Connection, sort: str, shown: Any, now: datetime) -> tuple[Any, ...]:
    """The listing's order in SQL; ties by job id."""
    j = slurm_jobs.c
    if sort == "wasted":
        return (sa.func.coalesce(shown.gpu_hours_wasted, 0.0).desc(), shown.job_id)
    if sort == "util":
        return (shown.mean_util_ratio.is_(None), shown.mean_util_ratio, shown.job_id)
    if sort == "duration":
        return (_run_seconds_sql(conn, now).desc(), shown.job_id)
    if sort == "start":
        return (j.start_at.is_(None), j.start_at.desc(), shown.job_id)
    raise ValueError(f"sort must be one of {SORTS}, not {sort!r}")


#: the ``slurm_jobs`` columns read beside the verdict (as ``job_<name>``), in the order
#: :func:`_job_reader` unpacks them
_JOB_COLUMNS = ("user_name", "account", "partition", "state", "start_at", "end_at", "nodes",
                "array_job_id", "array_task_id", "name")  # fmt: skip


@dataclass(frozen=True)
class LowUtilPage:
    """Some rows of the listing, and how many rows the whole listing has."""

    jobs: list[LowUtilJob]
    total: int


def low_util_page(
    engine: sa.Engine | sa.Connection,
    filters: LowUtilFilters | None = None,
    *,
    now: datetime,
    offset: int = 0,
    evidence: bool = False,
) -> LowUtilPage:
    """The jobs wasting GPUs per their newest evaluation, sorted per ``filters.sort``: at most
    ``filters.limit`` of them from ``offset``, and the count of all.

    The shown verdict is picked, sorted, counted and paged in SQL (:func:`shown_select`), so a
    page of 50 reads 50 rows. Listed verdicts carry no evidence and no ``others`` unless
    ``evidence`` (the alert rules read both): then a second query reads the listed jobs'
    evaluations.
    """
    f = filters or LowUtilFilters()
    if f.sort not in SORTS:  # a bad sort fails before the query
        raise ValueError(f"sort must be one of {SORTS}, not {f.sort!r}")
    if isinstance(engine, sa.Connection):
        return _page(engine, f, now, offset, evidence)
    with engine.connect() as conn:
        return _page(conn, f, now, offset, evidence)


def low_util_jobs(
    engine: sa.Engine | sa.Connection,
    filters: LowUtilFilters | None = None,
    *,
    now: datetime,
    evidence: bool = False,
) -> list[LowUtilJob]:
    """The jobs wasting GPUs per their newest evaluation, sorted per ``filters.sort``, at most
    ``filters.limit`` (:func:`low_util_page` from the first row)."""
    return low_util_page(engine, filters, now=now, evidence=evidence).jobs


def _page(conn: sa.Connection, f: LowUtilFilters, now: datetime, offset: int, evidence: bool) -> LowUtilPage:
    j = slurm_jobs.c
    shown = shown_select(evaluated_since=f.evaluated_since, job_ids=f.job_ids, cause=f.cause).subquery(
        "shown"
    )
    # the nodes as JSON text, parsed once per job listed
    job_columns = [(sa.cast(j[c], sa.Text) if c == "nodes" else j[c]).label(f"job_{c}") for c in _JOB_COLUMNS]
    query = sa.select(*shown.c, *job_columns, sa.func.count().over().label("total"))
    query = apply_job_filters(query.outerjoin(slurm_jobs, j.job_id == shown.c.job_id), f)
    if f.running:
        query = query.where(sa.or_(j.state.is_(None), j.state.in_(HOLDING_STATES)))
    query = query.order_by(*_order(conn, f.sort, shown.c, now)).offset(offset or None).limit(f.limit)
    if is_postgres(conn):
        # for this transaction: the query is bound by one index probe per wasting job; at 10,000
        # nodes (87,000 of them) its estimated cost passes jit_above_cost, and compiling its
        # expressions took longer than it saved (bench/README.md, the low-util command)
        conn.exec_driver_sql("SET LOCAL jit = off")
    result = conn.execute(query)
    read = _job_reader(list(result.keys()), now)
    rows = result.all()
    if rows or not offset:
        total = int(rows[0].total) if rows else 0
    else:  # a page past the end: the listing is counted apart
        counted = sa.select(sa.func.count()).select_from(query.limit(None).offset(None).subquery())
        total = int(conn.execute(counted).scalar_one())
    others: dict[str, Evaluation] = {}
    if evidence:
        ids = [r.job_id for r in rows]
        for start in range(0, len(ids), CHUNK):
            others |= group_evaluations(
                verdicts_of(conn.execute(latest_select(job_ids=ids[start : start + CHUNK])))
            )
    return LowUtilPage([read(r, others) for r in rows], total)


def _job_reader(
    keys: list[str], now: datetime
) -> Callable[[Sequence[Any], dict[str, Evaluation]], LowUtilJob]:
    """What makes a :class:`LowUtilJob` of each row of the listing's query (columns ``keys``),
    with the verdicts of its evaluation in ``evaluations`` when read: positions found once per
    query (:func:`verdict_reader`), a row's values read by position."""
    read_verdict = verdict_reader(keys)
    job_facts = operator.itemgetter(*(keys.index(f"job_{c}") for c in _JOB_COLUMNS))

    def read(row: Sequence[Any], evaluations: dict[str, Evaluation]) -> LowUtilJob:
        user, account, partition, state, start, end, nodes, array_job_id, array_task_id, name = job_facts(row)
        verdict = read_verdict(row)
        others: tuple[VerdictRow, ...] = ()
        evaluation = evaluations.get(verdict.job_id)
        if evaluation is not None:
            verdict = next((v for v in evaluation.verdicts if v.verdict_id == verdict.verdict_id), verdict)
            others = evaluation.others(verdict)
        return LowUtilJob(
            job_id=display_id(verdict.job_id, array_job_id, array_task_id),
            raw_job_id=verdict.job_id,
            name=name,
            user=user,
            account=account,
            partition=partition,
            state=state,
            nodes=tuple(json.loads(nodes or "null") or ()),
            start_at=start,
            end_at=end,
            duration_s=run_seconds(start, end, state, now),
            verdict=verdict,
            others=others,
        )

    return read
