"""Slurm jobs in the store: what the daemon's sync writes and what the CLI reads.

Writes (:class:`~gpuwatch.daemon.slurm_sync.SlurmSync`):

- :func:`upsert_jobs` — one dialect upsert (``INSERT ... ON CONFLICT DO UPDATE``, as
  :mod:`gpuwatch.daemon.store.batch_store` does) for any number of :class:`~gpuwatch.slurm.model.SlurmJob`.
  Sources disagree on what they know (``sacct`` has no uid and no GPU indices, counts no
  GPU when ``gres/gpu`` is not tracked, ``squeue`` loses the reason once a job runs), so the
  merge rules are per column: ``state``, ``state_reason`` and ``source`` are the newest
  report's; every other column takes the newest *non-null* value (a source that does not
  know a field never erases it); the exit code/signal pair, once a terminal report gave one,
  is kept while the job stays terminal — the first terminal report is ``squeue``'s, right in
  every version, while 22.05's ``sacct --json`` reports exit code 0 for a job that exited 3.
- :func:`replace_job_gpus` — a job's ``job_gpus`` rows become exactly the GPUs of its
  newest non-empty allocation; an empty one (pending, finished: 22.05 ``squeue`` drops
  ``gres_detail`` once a job ends) never deletes, so a finished job keeps the GPUs it held.
  Only jobs whose allocation changed are touched: a steady cluster costs one ``SELECT``.

Reads: :func:`jobs_query` (the ``gpuwatch jobs`` rows, with each job's GPUs and mean GPU
utilization over its run time) and :func:`job_for_gpu` / :func:`jobs_for_gpu`, the
daemon-side correlation of (node, GPU index, time) used when an agent had no prolog map file.
All statements run on PostgreSQL and SQLite.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from gpuwatch.clock import utcnow
from gpuwatch.slurm.model import TERMINAL_STATES, SlurmJob, normalize_state
from gpuwatch.sql.schema import attribution_samples, gpu_samples, job_gpus, nodes, slurm_jobs
from gpuwatch.sql.types import UtcDateTime

#: rows per statement for IN lists and multi-row inserts (SQLite's variable limit is 32766)
CHUNK = 500

#: columns the newest non-null report wins (a source that lacks them keeps the old value)
_COALESCED = (
    "name", "user_name", "uid", "account", "partition", "qos", "array_job_id", "array_task_id",
    "submit_at", "start_at", "end_at", "time_limit_s", "elapsed_s", "nodes", "cpus",
    "memory_bytes", "gpus", "tres",
)  # fmt: skip
#: columns the newest report always sets
_OVERWRITTEN = ("source", "state", "state_reason", "updated_at")
#: JSON columns (NULL when unknown: the schema's Json stores None as SQL NULL, so coalesce works)
_JSON_COLS = frozenset({"nodes", "tres"})


def _insert(conn: sa.Connection, table: sa.Table) -> Any:
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return dialect.insert(table)


def _chunks(items: Sequence[Any], size: int = CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


def job_row(job: SlurmJob, now: datetime) -> dict[str, Any]:
    """One job's ``slurm_jobs`` row; empty ``nodes``/``tres`` are NULL ("not known")."""
    return {
        "job_id": job.job_id,
        "source": job.source,
        "name": job.name,
        "user_name": job.user,
        "uid": job.uid,
        "account": job.account,
        "partition": job.partition,
        "qos": job.qos,
        "state": job.state,
        "state_reason": job.state_reason,
        "array_job_id": job.array_job_id,
        "array_task_id": job.array_task_id,
        "submit_at": job.submit,
        "start_at": job.start,
        "end_at": job.end,
        "time_limit_s": job.time_limit_s,
        "elapsed_s": job.elapsed_s,
        "nodes": list(job.nodes) or None,
        "cpus": job.cpus,
        "memory_bytes": job.memory_bytes,
        "gpus": job.gpus,
        "exit_code": job.exit_code,
        "exit_signal": job.exit_signal,
        "tres": dict(job.tres) or None,
        "first_seen_at": now,
        "updated_at": now,
    }


def upsert_jobs(conn: sa.Connection, jobs: Sequence[SlurmJob], now: datetime | None = None) -> int:
    """Insert or merge ``jobs`` into ``slurm_jobs`` (rules in the module doc); returns the count.

    A job id given twice keeps the later record (``ON CONFLICT`` cannot touch a row twice in
    one statement on PostgreSQL).
    """
    now = now or utcnow()
    latest = {job.job_id: job for job in jobs}
    if not latest:
        return 0
    rows = [job_row(latest[job_id], now) for job_id in sorted(latest)]  # one lock order
    if conn.dialect.name == "postgresql":
        _upsert_by_copy(conn, rows)
        return len(rows)
    stmt = _insert(conn, slurm_jobs)
    stmt = stmt.on_conflict_do_update(index_elements=[slurm_jobs.c.job_id], set_=_merge(stmt))
    for chunk in _chunks(rows):
        conn.execute(stmt, list(chunk))  # sqlite3's executemany: one prepared statement, C loop
    return len(rows)


#: session temp twin of slurm_jobs for the PostgreSQL COPY path
_LOAD = sa.Table("_gw_load_slurm_jobs", sa.MetaData(), *[sa.Column(c.name, c.type) for c in slurm_jobs.c])


def _copy_value(name: str, value: Any) -> Any:
    return json.dumps(value) if name in _JSON_COLS and value is not None else value


def _upsert_by_copy(conn: sa.Connection, rows: list[dict[str, Any]]) -> None:
    """PostgreSQL: COPY into a temp table, then one ``INSERT ... SELECT ... ON CONFLICT``.

    psycopg sends an ``executemany`` as one statement per row, and a multi-row VALUES of
    1,000 jobs x 26 parameters spends ~0.25 s converting placeholders; COPY avoids both
    (bench/slurm_sync.py).
    """
    names = [c.name for c in slurm_jobs.c]
    dbapi = conn.connection.dbapi_connection
    assert dbapi is not None
    with dbapi.cursor() as cur:
        cur.execute(
            f'CREATE TEMP TABLE IF NOT EXISTS "{_LOAD.name}" (LIKE slurm_jobs INCLUDING DEFAULTS) '
            "ON COMMIT DELETE ROWS"
        )
        cur.execute(f'DELETE FROM "{_LOAD.name}"')  # an earlier call in this same transaction
        quoted = ", ".join(f'"{n}"' for n in names)
        with cur.copy(f'COPY "{_LOAD.name}" ({quoted}) FROM STDIN') as copy:
            for row in rows:
                copy.write_row([_copy_value(n, row[n]) for n in names])
    stmt = postgresql.insert(slurm_jobs).from_select(
        names, sa.select(*[_LOAD.c[n] for n in names]).order_by(_LOAD.c.job_id)
    )
    conn.execute(stmt.on_conflict_do_update(index_elements=[slurm_jobs.c.job_id], set_=_merge(stmt)))


#: terminal states as SQL literals (constants without quotes): executemany cannot expand IN
#: parameters
_TERMINAL_SQL = [sa.literal_column(f"'{state}'") for state in sorted(TERMINAL_STATES)]


def _merge(stmt: Any) -> dict[str, Any]:
    """The ``ON CONFLICT DO UPDATE SET`` of :func:`upsert_jobs` (rules in the module doc)."""
    ex, cur = stmt.excluded, slurm_jobs.c
    keep_exit = sa.and_(
        cur.state.in_(_TERMINAL_SQL),
        ex.state.in_(_TERMINAL_SQL),
        sa.or_(cur.exit_code.is_not(None), cur.exit_signal.is_not(None)),
    )
    set_: dict[str, Any] = {c: ex[c] for c in _OVERWRITTEN}
    set_.update({c: sa.func.coalesce(ex[c], cur[c]) for c in _COALESCED})
    set_["exit_code"] = sa.case((keep_exit, cur.exit_code), else_=ex.exit_code)
    set_["exit_signal"] = sa.case((keep_exit, cur.exit_signal), else_=ex.exit_signal)
    return set_


Allocation = Mapping[str, Sequence[int]]  # node -> GRES indices


def _pairs(allocation: Allocation) -> frozenset[tuple[str, int]]:
    return frozenset((node, int(i)) for node, idx in allocation.items() for i in idx)


def replace_job_gpus(conn: sa.Connection, allocations: Mapping[str, Allocation]) -> int:
    """Make each job's ``job_gpus`` rows its non-empty allocation; returns jobs changed.

    ``allocations`` maps job id -> {node: indices} (``SlurmJob.gpu_indices``); jobs with an
    empty allocation are ignored (see the module doc). The jobs must already be in
    ``slurm_jobs`` (foreign key).
    """
    wanted = {job: _pairs(alloc) for job, alloc in allocations.items() if _pairs(alloc)}
    if not wanted:
        return 0
    have: dict[str, set[tuple[str, int]]] = defaultdict(set)
    ids = sorted(wanted)
    for chunk in _chunks(ids):
        for job_id, node, idx in conn.execute(
            sa.select(job_gpus.c.job_id, job_gpus.c.node, job_gpus.c.gpu_index).where(
                job_gpus.c.job_id.in_(chunk)
            )
        ):
            have[job_id].add((node, int(idx)))
    changed = [job for job in ids if wanted[job] != have.get(job, set())]
    for chunk in _chunks(changed):
        conn.execute(job_gpus.delete().where(job_gpus.c.job_id.in_(chunk)))
    rows = [
        {"job_id": job, "node": node, "gpu_index": idx}
        for job in changed
        for node, idx in sorted(wanted[job])
    ]
    for chunk in _chunks(rows):
        conn.execute(job_gpus.insert(), list(chunk))
    return len(changed)


def unfinished_jobs(conn: sa.Connection) -> dict[str, datetime | None]:
    """Job id -> earliest known time (start, else submit) of every row not in a final state.

    The sync uses it to widen its ``sacct`` window over jobs that left ``squeue`` while the
    daemon was not looking (down longer than ``MinJobAge``).
    """
    c = slurm_jobs.c
    rows = conn.execute(
        sa.select(c.job_id, sa.func.coalesce(c.start_at, c.submit_at)).where(
            sa.or_(c.state.is_(None), c.state.not_in(sorted(TERMINAL_STATES)))
        )
    )
    return {job_id: ts for job_id, ts in rows}


# --------------------------------------------------------------------------- correlation


def jobs_for_gpu(conn: sa.Connection, node: str, gpu_index: int, ts: datetime) -> list[str]:
    """Jobs holding GPU ``gpu_index`` of ``node`` at ``ts``, most recently started first.

    A job holds it when ``job_gpus`` has the pair and ``start_at <= ts < end_at`` (no end:
    open-ended). ``end_at`` of a running job is Slurm's expected end, which the next sync
    replaces with the real one. Several jobs: a shared GPU (GRES sharding, oversubscription).
    """
    j = slurm_jobs.c
    stmt = (
        sa.select(j.job_id)
        .join(job_gpus, job_gpus.c.job_id == j.job_id)
        .where(
            job_gpus.c.node == node,
            job_gpus.c.gpu_index == gpu_index,
            j.start_at.is_not(None),
            j.start_at <= ts,
            sa.or_(j.end_at.is_(None), j.end_at > ts),
        )
        .order_by(j.start_at.desc(), j.job_id)
    )
    return list(conn.execute(stmt).scalars())


def job_for_gpu(conn: sa.Connection, node: str, gpu_index: int, ts: datetime) -> str | None:
    """The job holding (node, GPU index) at ``ts`` (the latest started if shared), or None."""
    found = jobs_for_gpu(conn, node, gpu_index, ts)
    return found[0] if found else None


# --------------------------------------------------------------------------- reading


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
    elapsed_s: int | None
    nodes: list[str]
    gpus: int | None
    #: ``node:index`` of every GPU the job held (Slurm's allocation, else the agents' attribution)
    gpu_list: list[str] = field(default_factory=list)
    #: mean ``util_gpu_ratio`` of its GPUs' samples inside the job's run time; None: no samples
    util_gpu_mean: float | None = None
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

    Utilization is the mean of ``gpu_samples.util_gpu_ratio`` over the job's GPUs from
    ``job_gpus``, samples with ``start_at <= ts < coalesce(end_at, now)``. A job with no
    ``job_gpus`` rows (seen only by ``sacct``, or the sync is off) falls back to the agents'
    ``attribution_samples``, matched to ``gpu_samples`` of the same node, GPU and time stamp
    (both come from one agent cycle).
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


def _jobs_query(conn: sa.Connection, f: JobFilters, now: datetime) -> list[JobSummary]:
    j = slurm_jobs.c
    stmt = apply_job_filters(sa.select(slurm_jobs), f)
    stmt = stmt.order_by(j.start_at.is_(None), j.start_at.desc(), j.job_id.desc())
    if f.limit:
        stmt = stmt.limit(f.limit)
    rows = conn.execute(stmt).mappings().all()
    ids = [r["job_id"] for r in rows]
    slurm_gpus, slurm_util = _by_job_gpus(conn, ids, now)
    missing = [i for i in ids if i not in slurm_gpus]
    agent_gpus, agent_util = _by_attribution(conn, missing) if missing else ({}, {})
    out = []
    for r in rows:
        job_id = r["job_id"]
        if job_id in slurm_gpus:
            gpu_list, (mean, n), matched = slurm_gpus[job_id], slurm_util.get(job_id, (None, 0)), "slurm"
        elif job_id in agent_gpus:
            gpu_list, (mean, n), matched = agent_gpus[job_id], agent_util.get(job_id, (None, 0)), "agent"
        else:
            gpu_list, mean, n, matched = [], None, 0, None
        start, end = r["start_at"], r["end_at"]
        elapsed = r["elapsed_s"]
        if r["state"] == "RUNNING" and start is not None:
            elapsed = max(0, int((now - start).total_seconds()))
        display = job_id
        if r["array_job_id"] and r["array_task_id"] is not None:
            display = f"{r['array_job_id']}_{r['array_task_id']}"
        out.append(
            JobSummary(
                job_id=job_id,
                display_id=display,
                name=r["name"],
                user=r["user_name"],
                account=r["account"],
                partition=r["partition"],
                state=r["state"],
                submit_at=r["submit_at"],
                start_at=start,
                end_at=end,
                elapsed_s=elapsed,
                nodes=list(r["nodes"] or []),
                gpus=r["gpus"],
                gpu_list=gpu_list,
                util_gpu_mean=mean,
                util_samples=n,
                matched_by=matched,
                exit_code=r["exit_code"],
                exit_signal=r["exit_signal"],
            )
        )
    return out


def _gpu_label(node: str, index: int) -> str:
    return f"{node}:{index}"


def _by_job_gpus(
    conn: sa.Connection, ids: Sequence[str], now: datetime
) -> tuple[dict[str, list[str]], dict[str, tuple[float | None, int]]]:
    """GPUs from ``job_gpus`` and the mean utilization of their samples in the job's run time."""
    gpus: dict[str, list[str]] = defaultdict(list)
    util: dict[str, tuple[float | None, int]] = {}
    j, g, s = slurm_jobs.c, job_gpus.c, gpu_samples.c
    end = sa.func.coalesce(j.end_at, sa.literal(now, UtcDateTime))
    for chunk in _chunks(list(ids)):
        for job_id, node, idx in conn.execute(
            sa.select(g.job_id, g.node, g.gpu_index).where(g.job_id.in_(chunk)).order_by(g.node, g.gpu_index)
        ):
            gpus[job_id].append(_gpu_label(node, idx))
        stmt = (
            sa.select(g.job_id, sa.func.avg(s.util_gpu_ratio), sa.func.count(s.util_gpu_ratio))
            .select_from(job_gpus)
            .join(slurm_jobs, j.job_id == g.job_id)
            .join(nodes, nodes.c.name == g.node)
            .join(
                gpu_samples,
                sa.and_(
                    s.node_id == nodes.c.id,
                    s.gpu_index == g.gpu_index,
                    s.ts >= j.start_at,
                    s.ts < end,
                ),
            )
            .where(g.job_id.in_(chunk))
            .group_by(g.job_id)
        )
        for job_id, mean, n in conn.execute(stmt):
            util[job_id] = (float(mean) if mean is not None else None, int(n))
    return dict(gpus), util


def _by_attribution(
    conn: sa.Connection, ids: Sequence[str]
) -> tuple[dict[str, list[str]], dict[str, tuple[float | None, int]]]:
    """GPUs and utilization from the agents' attribution samples (jobs without ``job_gpus``)."""
    gpus: dict[str, list[str]] = {}
    util: dict[str, tuple[float | None, int]] = {}
    a, s = attribution_samples.c, gpu_samples.c
    for chunk in _chunks(list(ids)):
        found: dict[str, set[tuple[str, int]]] = defaultdict(set)
        for job_id, node, idx in conn.execute(
            sa.select(a.job_id, nodes.c.name, a.gpu_index)
            .join(nodes, nodes.c.id == a.node_id)
            .where(a.job_id.in_(chunk))
            .distinct()
        ):
            found[job_id].add((node, int(idx)))
        for job_id, pairs in found.items():
            gpus[job_id] = [_gpu_label(n, i) for n, i in sorted(pairs)]
        stmt = (
            sa.select(a.job_id, sa.func.avg(s.util_gpu_ratio), sa.func.count(s.util_gpu_ratio))
            .select_from(attribution_samples)
            .join(
                gpu_samples,
                sa.and_(s.node_id == a.node_id, s.gpu_index == a.gpu_index, s.ts == a.ts),
            )
            .where(a.job_id.in_(chunk))
            .group_by(a.job_id)
        )
        for job_id, mean, n in conn.execute(stmt):
            util[job_id] = (float(mean) if mean is not None else None, int(n))
    return gpus, util
