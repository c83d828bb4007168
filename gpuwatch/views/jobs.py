"""Which Slurm jobs ran, on which GPUs, and how busy those were: ``gpuwatch jobs``.

Also the job facts every listing shares, so they are worked out once: the id users type
(:func:`display_id`), seconds run (:func:`run_seconds`) and the job filters
(:func:`apply_job_filters`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from gpuwatch.clock import utcnow
from gpuwatch.slurm.model import TERMINAL_STATES, normalize_state
from gpuwatch.sql.job_hours import floor_hour
from gpuwatch.sql.jobs import AGENT, CHUNK, SLURM
from gpuwatch.sql.readings import samples_between
from gpuwatch.sql.schema import job_gpus, nodes, slurm_jobs
from gpuwatch.views.period import jobs_in_period


def _chunks(items: Sequence[Any], size: int = CHUNK) -> list[Sequence[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def run_seconds(start: datetime | None, end: datetime | None, state: str | None, now: datetime) -> int | None:
    """Seconds a job has run at ``now``: to ``now`` while running (or state unknown), else to its end."""
    if start is None:
        return None
    running = state is None or state not in TERMINAL_STATES
    stop = now if running or end is None else min(end, now)
    return max(0, int((stop - start).total_seconds()))


def display_id(job_id: str, array_job_id: str | None, array_task_id: Any) -> str:
    """The id users type: ``<array job>_<task>`` for an array task, else Slurm's job id."""
    if array_job_id and array_task_id is not None:
        return f"{array_job_id}_{array_task_id}"
    return job_id


@dataclass(frozen=True)
class JobFilters:
    """What ``gpuwatch jobs`` (and the HTTP API later) can ask for; None = no filter.

    ``since``: jobs that were running at or after this time (not ended before it).
    ``states``: upper-case Slurm states, any of them. New filters go here and into
    :func:`jobs_query`; the CLI maps its options onto this one object.
    """

    user: str | None = None
    account: str | None = None
    partition: str | None = None
    node: str | None = None
    states: tuple[str, ...] = ()
    since: datetime | None = None
    limit: int | None = None


@dataclass(frozen=True)
class JobIdentity:
    """Which job, whose, where: what every job record of the read model starts with."""

    job_id: str  # what users type: "18_1" for an array task
    raw_job_id: str
    name: str | None
    user: str | None
    account: str | None
    partition: str | None
    state: str | None


@dataclass(frozen=True)
class JobSummary:
    """One job as ``gpuwatch jobs`` shows it."""

    job_id: str
    display_id: str
    name: str | None
    user: str | None
    account: str | None
    partition: str | None
    state: str | None
    submit_at: datetime | None
    start_at: datetime | None
    end_at: datetime | None
    #: seconds run: start to now (running) or to its end (finished); see :func:`run_seconds`
    duration_s: int | None
    nodes: list[str]
    gpus: int | None
    #: ``node:index`` of every GPU the job held (Slurm's allocation, else the agents' attribution)
    gpu_list: list[str] = field(default_factory=list)
    #: mean ``util_gpu_ratio`` of its GPUs' samples inside the job's run time; None: no samples
    mean_util_ratio: float | None = None
    util_samples: int = 0
    #: where the GPUs and samples were matched from: "slurm" (job_gpus), "agent" (attribution)
    matched_by: str | None = None
    exit_code: int | None = None
    exit_signal: int | None = None


def _like_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def jobs_query(
    engine: sa.Engine | sa.Connection, filters: JobFilters | None = None, *, now: datetime | None = None
) -> list[JobSummary]:
    """Jobs matching ``filters``, newest start first (pending last), with GPUs and utilization.

    The GPUs are the job's ``job_gpus``: Slurm's allocation, else (a job seen only by ``sacct``,
    or the sync is off) those the agents attributed to it, as the rollup pass stored them, or
    before it has, as the agents' attribution samples say.
    Utilization is the sample-weighted mean over its run of the GPU-minutes it held
    (:func:`gpuwatch.views.period.jobs_in_period`: the job-hours the rollup pass summed, the
    minutes of the rest), the figure ``gpuwatch report`` and the job view read, so it is there
    for as long as the rollups are, not only while the raw samples are kept.
    """
    filters = filters or JobFilters()
    now = now or utcnow()
    if isinstance(engine, sa.Connection):
        return _jobs_query(engine, filters, now)
    with engine.connect() as conn:
        return _jobs_query(conn, filters, now)


def apply_job_filters(stmt: Any, f: Any) -> Any:
    """The job filters every listing shares (``gpuwatch jobs``, ``--low-util``), on ``slurm_jobs``.

    ``f`` has ``user``, ``account``, ``partition``, ``states``, ``node`` and ``since``
    (:class:`JobFilters`, ``LowUtilFilters``). ``since`` keeps jobs still running, or whose
    state is unknown, or that ended at or after it.
    """
    j = slurm_jobs.c
    if f.user:
        stmt = stmt.where(j.user_name == f.user)
    if f.account:
        stmt = stmt.where(j.account == f.account)
    if f.partition:
        stmt = stmt.where(j.partition == f.partition)
    if f.states:
        stmt = stmt.where(j.state.in_([normalize_state(s) or s for s in f.states]))
    if f.node:
        # nodes is a JSON list of names; '"name"' matches one element exactly on both dialects
        stmt = stmt.where(sa.cast(j.nodes, sa.Text).like(f'%"{_like_escape(f.node)}"%', escape="\\"))
    if f.since is not None:
        stmt = stmt.where(
            sa.or_(
                j.end_at.is_(None),
                j.end_at >= f.since,
                j.state.is_(None),
                j.state.not_in(sorted(TERMINAL_STATES)),
            )
        )
    return stmt


#: ``slurm_jobs`` columns a :class:`JobSummary` holds under the same name, as stored
_AS_STORED = ("name", "account", "partition", "state", "submit_at", "gpus", "exit_code", "exit_signal")


def _jobs_query(conn: sa.Connection, f: JobFilters, now: datetime) -> list[JobSummary]:
    j = slurm_jobs.c
    stmt = apply_job_filters(sa.select(slurm_jobs), f)
    stmt = stmt.order_by(j.start_at.is_(None), j.start_at.desc(), j.job_id.desc())
    if f.limit:
        stmt = stmt.limit(f.limit)
    rows = conn.execute(stmt).mappings().all()
    ids = [r["job_id"] for r in rows]
    mapped = _by_job_gpus(conn, ids)
    missing = [r for r in rows if r["job_id"] not in mapped]
    attributed = _by_attribution(conn, missing) if missing else {}
    util = _utilization(conn, rows, now)
    out = []
    for r in rows:
        job_id = r["job_id"]
        mean, n = util.get(job_id, (None, 0))
        if job_id in mapped:
            gpu_list, matched = mapped[job_id]
        elif job_id in attributed:
            gpu_list, matched = attributed[job_id], AGENT
        else:
            gpu_list, mean, n, matched = [], None, 0, None
        start, end = r["start_at"], r["end_at"]
        duration = run_seconds(start, end, r["state"], now)
        display = display_id(job_id, r["array_job_id"], r["array_task_id"])
        out.append(
            JobSummary(
                job_id=job_id,
                display_id=display,
                user=r["user_name"],
                start_at=start,
                end_at=end,
                duration_s=duration if duration is not None else r["elapsed_s"],
                nodes=list(r["nodes"] or []),
                gpu_list=gpu_list,
                mean_util_ratio=mean,
                util_samples=n,
                matched_by=matched,
                **{name: r[name] for name in _AS_STORED},
            )
        )
    return out


def _gpu_label(node: str, index: int) -> str:
    return f"{node}:{index}"


def _by_job_gpus(conn: sa.Connection, ids: Sequence[str]) -> dict[str, tuple[list[str], str]]:
    """Job id -> its GPUs from ``job_gpus`` as ``node:index``, and whose map that is: Slurm's
    allocation, or the agents' attribution the rollup pass stored for a job Slurm gave none."""
    gpus: dict[str, list[str]] = defaultdict(list)
    source: dict[str, str] = {}
    g = job_gpus.c
    for chunk in _chunks(list(ids)):
        for job_id, node, idx, src in conn.execute(
            sa.select(g.job_id, g.node, g.gpu_index, g.source)
            .where(g.job_id.in_(chunk))
            .order_by(g.node, g.gpu_index)
        ):
            gpus[job_id].append(_gpu_label(node, idx))
            source[job_id] = SLURM if SLURM in (src, source.get(job_id)) else src
    return {job_id: (labels, source[job_id]) for job_id, labels in gpus.items()}


#: how long before its Slurm start an agent may already attribute a GPU to a job (clocks apart)
ATTRIBUTION_LEAD = timedelta(hours=1)


def _by_attribution(conn: sa.Connection, rows: Sequence[sa.RowMapping]) -> dict[str, list[str]]:
    """Job id -> the GPUs the agents attributed to it, for jobs with no ``job_gpus`` yet (the
    rollup pass stores the agents' map once it rolls the job's minutes). Read from the jobs'
    earliest start on (less :data:`ATTRIBUTION_LEAD`) where every start is known: SQLite unpacks
    the host packs it reads, and these are the jobs that started last."""
    found: dict[str, set[tuple[str, int]]] = defaultdict(set)
    starts = [r["start_at"] for r in rows]
    since = min(starts) - ATTRIBUTION_LEAD if starts and None not in starts else None
    for chunk in _chunks([r["job_id"] for r in rows]):
        a = samples_between(conn, "attribution", since, job_ids=chunk).c
        for job_id, node, idx in conn.execute(
            sa.select(a.job_id, nodes.c.name, a.gpu_index)
            .join(nodes, nodes.c.id == a.node_id)
            .where(a.job_id.in_(chunk))
            .distinct()
        ):
            found[job_id].add((node, int(idx)))
    return {job_id: [_gpu_label(n, i) for n, i in sorted(pairs)] for job_id, pairs in found.items()}


def _utilization(
    conn: sa.Connection, rows: Sequence[sa.RowMapping], now: datetime
) -> dict[str, tuple[float | None, int]]:
    """Job id -> (mean utilization of the GPUs it held over its run, samples behind it), from
    the rollups (the agents' attributed GPUs count once the rollup pass has added them to
    ``job_gpus``); jobs not started yet have none."""
    started = [r for r in rows if r["start_at"] is not None and r["start_at"] < now]
    if not started:
        return {}
    first = floor_hour(min(r["start_at"] for r in started))
    found = jobs_in_period(conn.engine, first, now, [r["job_id"] for r in started])
    return {
        job_id: (p.util_sum / p.util_samples if p.util_samples else None, p.util_samples)
        for job_id, p in found.items()
    }
