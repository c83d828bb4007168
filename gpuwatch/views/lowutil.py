"""Which jobs waste their GPUs, and why: the one listing behind the CLI, the web view, the
demo and the alert rules.

One row per job whose newest evaluation has a waste cause (:attr:`Evaluation.shown`): the
whole-job window's leading verdict, or the recent window's when the whole job looks healthy.
Each row says which window it comes from (``window_kind``), and its GPU-hours wasted are that
stored verdict's, so every surface reports the same number for the same job.

It reads ``shown_verdicts`` (the verdict each job's newest evaluation shows, kept by triggers on
``verdicts``) joined to ``slurm_jobs`` — never samples, and no ``verdicts`` row. The listing is
sorted, counted and paged in SQL on the shown verdicts' ids and sort keys, then the page's rows
are read, so a page costs the rows it shows plus the database's pass over the wasting jobs.
``cause`` picks per job at query time instead (:func:`shown_select`) and reads ``verdicts``.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar, overload

import sqlalchemy as sa

from gpuwatch.slurm.model import HOLDING_STATES, TERMINAL_STATES
from gpuwatch.sql.buckets import epoch_seconds
from gpuwatch.sql.engine import is_postgres
from gpuwatch.sql.jobs import CHUNK
from gpuwatch.sql.schema import shown_verdicts, slurm_jobs, verdicts
from gpuwatch.views.evaluations import (
    LISTED_COLUMNS,
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

T = TypeVar("T")


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


class _Shown(Generic[T]):
    """A field of the job's shown verdict, read through the job (``job.cause`` is
    ``job.verdict.cause``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, job: None, owner: type | None = None) -> _Shown[T]: ...
    @overload
    def __get__(self, job: LowUtilJob, owner: type | None = None) -> T: ...
    def __get__(self, job: LowUtilJob | None, owner: type | None = None) -> T | _Shown[T]:
        return self if job is None else getattr(job.verdict, self.name)


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
    cause = _Shown[str]()
    confidence = _Shown[float]()
    window_kind = _Shown[str]()
    evaluated_at = _Shown[datetime]()
    gpus = _Shown[int | None]()
    gpu_hours = _Shown[float | None]()
    gpu_hours_wasted = _Shown[float | None]()
    mean_util_ratio = _Shown[float | None]()
    summary = _Shown[str]()
    fix = _Shown[str | None]()

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


def _order(conn: sa.Connection, sort: str, listed: Any, now: datetime) -> tuple[tuple[Any, bool], ...]:
    """The listing's order in SQL, as (expression, descending) pairs; ties by job id.
    ``listed`` has the listed rows' ``job_id``, ``gpu_hours_wasted`` and ``mean_util_ratio``."""
    j = slurm_jobs.c
    if sort == "wasted":
        return ((sa.func.coalesce(listed.gpu_hours_wasted, 0.0), True), (listed.job_id, False))
    if sort == "util":
        util = listed.mean_util_ratio
        return ((util.is_(None), False), (util, False), (listed.job_id, False))
    if sort == "duration":
        return ((_run_seconds_sql(conn, now), True), (listed.job_id, False))
    if sort == "start":
        return ((j.start_at.is_(None), False), (j.start_at, True), (listed.job_id, False))
    raise ValueError(f"sort must be one of {SORTS}, not {sort!r}")


@dataclass(frozen=True)
class _Listed:
    """Where the listing's verdicts come from: ``verdicts`` columns of a table, its rows found
    by ``key`` (the job, or the verdict id); the listed query picks them."""

    table: sa.Table
    key: str
    query: sa.Select[Any]
    columns: Any


def _listed(f: LowUtilFilters) -> _Listed:
    """The listed jobs' shown verdicts, before any filter on ``slurm_jobs``.

    Without a cause: the verdict each job's newest evaluation shows, stored in ``shown_verdicts``
    (migration 0025), so the listing reads no ``verdicts`` row. With one: picked per job in SQL
    (:func:`shown_select`), then read from ``verdicts`` by id.
    """
    if f.cause is None:
        s = shown_verdicts.c
        query = sa.select(shown_verdicts)
        if f.evaluated_since is not None:
            query = query.where(s.evaluated_at >= f.evaluated_since)
        if f.job_ids is not None:
            query = query.where(s.job_id.in_(list(f.job_ids)))
        return _Listed(shown_verdicts, "job_id", query, s)
    picked = shown_select(evaluated_since=f.evaluated_since, job_ids=f.job_ids, cause=f.cause)
    shown = picked.subquery("shown")
    return _Listed(verdicts, "id", sa.select(shown), shown.c)


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

    Sorted, counted and paged in SQL on the stored shown verdicts (:func:`_listed`), so a page of
    50 reads the text of 50 verdicts. Listed verdicts carry no evidence and no ``others`` unless
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


@dataclass(frozen=True)
class ListingQuery:
    """The listing in SQL: the page of listed jobs (their ids, shown verdict ids, sort keys and
    the count of all), sorted, counted and paged before the verdicts' text is read."""

    #: ``job_id``, ``verdict_id``, ``sort_<i>`` and ``total`` of each listed job on the page
    page: sa.Subquery
    #: the whole listing, uncut (to count it when a page lies past its end)
    whole: sa.Select[Any]
    #: the page's order, over its columns
    order: tuple[Any, ...]
    #: the table the page's verdicts are read from: ``verdicts``, or its copy ``shown_verdicts``
    verdicts: sa.Table
    #: the page's column that finds a page row's verdict there, and the table's
    key: str

    def rows(self, *columns: Any) -> sa.Select[Any]:
        """``columns`` of the page's rows (of :attr:`verdicts`, ``slurm_jobs`` and the page), in
        order."""
        page, found = self.page, self.verdicts.c[self.key]
        on = found == (page.c.job_id if self.key == "job_id" else page.c.verdict_id)
        return (
            sa.select(*columns)
            .select_from(page.join(self.verdicts, on))
            .outerjoin(slurm_jobs, slurm_jobs.c.job_id == page.c.job_id)
            .order_by(*self.order)
        )


def listing_query(conn: sa.Connection, f: LowUtilFilters, now: datetime, offset: int = 0) -> ListingQuery:
    """The listing ``f`` asks for, from ``offset``, as SQL; on PostgreSQL it also sets what the
    listing's transaction runs best with."""
    j = slurm_jobs.c
    listed = _listed(f)
    c = listed.columns
    order = _order(conn, f.sort, c, now)
    # sorted, counted and paged on the listed ids and sort keys alone; the page's verdicts and
    # Slurm facts are read after, for its rows only
    keys = [expression.label(f"sort_{i}") for i, (expression, _) in enumerate(order)]
    query = listed.query.with_only_columns(c.job_id.label("job_id"), c.id.label("verdict_id"), *keys)
    query = apply_job_filters(query.outerjoin(slurm_jobs, j.job_id == c.job_id), f)
    if f.running:
        query = query.where(sa.or_(j.state.is_(None), j.state.in_(HOLDING_STATES)))
    # a page is filtered apart from its order: asked for the first rows in order, PostgreSQL
    # probed slurm_jobs once per listed job to keep the order instead of hashing it (every row:
    # inlined, so that it may run in parallel)
    filtered = query.cte("listed")
    if is_postgres(conn) and f.limit is not None:
        filtered = filtered.prefix_with("MATERIALIZED")
    sorted_keys = [filtered.c[f"sort_{i}"] for i in range(len(order))]
    ranked = [key.desc() if d else key for key, (_, d) in zip(sorted_keys, order, strict=True)]
    page = (
        sa.select(filtered, sa.func.count().over().label("total"))
        .order_by(*ranked)
        .offset(offset or None)
        .limit(f.limit)
        .subquery("page")
    )
    paged = [page.c[f"sort_{i}"] for i in range(len(order))]
    if is_postgres(conn):
        # for this transaction: at 10,000 nodes (87,000 wasting jobs) the estimated cost passes
        # jit_above_cost, and compiling the expressions took longer than it saved; a listing of
        # every row sorts them in memory (bench/README.md, the low-util command)
        conn.exec_driver_sql("SET LOCAL jit = off")
        conn.exec_driver_sql("SET LOCAL work_mem = '64MB'")
    ordered = tuple(key.desc() if d else key for key, (_, d) in zip(paged, order, strict=True))
    return ListingQuery(page, sa.select(filtered), ordered, listed.table, listed.key)


def _page(conn: sa.Connection, f: LowUtilFilters, now: datetime, offset: int, evidence: bool) -> LowUtilPage:
    j = slurm_jobs.c
    listing = listing_query(conn, f, now, offset)
    v = listing.verdicts.c
    # the nodes as JSON text, parsed once per job listed
    job_columns = [(sa.cast(j[c], sa.Text) if c == "nodes" else j[c]).label(f"job_{c}") for c in _JOB_COLUMNS]
    rows_query = listing.rows(*(v[name] for name in LISTED_COLUMNS), *job_columns, listing.page.c.total)
    result = conn.execute(rows_query)
    read = _job_reader(list(result.keys()), now)
    rows = result.all()
    if rows or not offset:
        total = int(rows[0].total) if rows else 0
    else:  # a page past the end: the listing is counted apart
        counted = sa.select(sa.func.count()).select_from(listing.whole.subquery())
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
