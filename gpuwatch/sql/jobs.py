"""Slurm jobs in the store: what the daemon's sync writes.

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
  Only jobs whose allocation changed are touched: a steady cluster costs one ``SELECT``. A
  changed job's ``job_hours`` already summed are summed again from its new map, and its
  ``job_totals`` row is deleted (both were derived from the old map).
- :func:`attach_attributed_gpus` (the rollup pass) — a job Slurm gave no GPU map gets the GPUs
  the agents attributed to it (``source = 'agent'``) until Slurm's allocation replaces them.

Correlation: :func:`job_for_gpu` / :func:`jobs_for_gpu`, the daemon-side match of (node,
GPU index, time) to a job, used when an agent had no prolog map file. What people read about
jobs is in :mod:`gpuwatch.views`.
All statements run on PostgreSQL and SQLite.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from gpuwatch.clock import utcnow
from gpuwatch.slurm.model import TERMINAL_STATES, SlurmJob
from gpuwatch.sql.job_hours import resum_jobs
from gpuwatch.sql.readings import samples_between
from gpuwatch.sql.schema import job_gpus, nodes, slurm_jobs

#: ``job_gpus.source``: Slurm's allocation, or the GPUs the agents attributed to a job Slurm
#: gave no GPU map
SLURM, AGENT = "slurm", "agent"
#: rows per statement for IN lists and multi-row inserts (SQLite's variable limit is 32766)
CHUNK = 500
#: ids in one IN list of a read: under SQLite's 32,766 variables with room for the rest of the
#: statement; one statement instead of many where a report reads the thousands of jobs a
#: period cuts
IDS_PER_READ = 30_000


def among(conn: sa.Connection, column: sa.ColumnElement, ids: Sequence[str]) -> sa.ColumnElement[bool]:
    """``column IN ids``; on PostgreSQL ``column = ANY(ids)`` with the ids as ONE array
    parameter: a statement of thousands of placeholders costs more to send than to run."""
    if conn.dialect.name == "postgresql":
        return column == sa.any_(sa.bindparam(None, list(ids), type_=postgresql.ARRAY(sa.String)))
    return column.in_(list(ids))


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
    ``slurm_jobs`` (foreign key). A changed job's summed hours are summed again from its new
    map and its stored totals dropped (:func:`gpuwatch.sql.job_hours.resum_jobs`).
    """
    wanted = {job: _pairs(alloc) for job, alloc in allocations.items() if _pairs(alloc)}
    if not wanted:
        return 0
    have: dict[str, set[tuple[str, int]]] = defaultdict(set)
    ids = sorted(wanted)
    for chunk in _chunks(ids):
        for job_id, node, idx in conn.execute(
            sa.select(job_gpus.c.job_id, job_gpus.c.node, job_gpus.c.gpu_index).where(
                job_gpus.c.job_id.in_(chunk), job_gpus.c.source == SLURM
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
    for chunk in _chunks(changed):  # what was derived from the old map: summed anew
        resum_jobs(conn, chunk)
    return len(changed)


def attach_attributed_gpus(
    conn: sa.Connection, start: datetime, end: datetime, node_id: int | None = None
) -> int:
    """Add to ``job_gpus`` (``source = 'agent'``) the GPUs the agents attributed to a job in
    ``[start, end)`` when Slurm gave the job no GPU map, so its hours are summed, its energy
    counted and a MIG instance weighed as its share of the card like any other job's. Slurm's
    allocation, when it comes, replaces them (:func:`replace_job_gpus`). Returns rows added."""
    attribution = samples_between(conn, "attribution", start, end, node_id=node_id)
    a, n, jg = attribution.c, nodes.c, job_gpus.c
    slurm_map = sa.exists().where(jg.job_id == a.job_id, jg.source == SLURM)
    known = sa.exists().where(jg.job_id == a.job_id, jg.node == n.name, jg.gpu_index == a.gpu_index)
    seen = (
        sa.select(a.job_id, n.name, a.gpu_index, sa.literal(AGENT).label("source"))
        .distinct()
        .select_from(attribution.join(nodes, n.id == a.node_id))
        .join(slurm_jobs, slurm_jobs.c.job_id == a.job_id)
        .where(~slurm_map, ~known)
    )
    return conn.execute(
        job_gpus.insert().from_select(["job_id", "node", "gpu_index", "source"], seen)
    ).rowcount


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
