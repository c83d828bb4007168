"""What the classifier last said about each job: every verdict row of its newest evaluation.

An evaluation (one ``evaluated_at`` of a job) holds one verdict per cause seen in each of its
windows: ``job`` (the whole run), ``segment`` (the job's latest phase, since its behaviour last
changed; only where it changed) and ``recent`` (the last ``classify.recent_window_s``).
A window where no cause fired holds one ``healthy`` row. Which row a listing shows, and so
which GPU-hours wasted every surface reports, is decided here once: :attr:`Evaluation.shown`.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from functools import cached_property
from typing import Any

import sqlalchemy as sa

from gpuwatch.classify.verdict import Cause
from gpuwatch.sql.schema import newest_evaluations, verdicts

HEALTHY = Cause.HEALTHY.value
#: the fallback cause "low, reason unknown": any cause a rule names is more actionable
GENERIC = Cause.UNKNOWN_LOW.value
#: the window a listing prefers: GPU-hours wasted over the whole run, then over the latest phase
#: (dated: "idle since 14:05"), then the rolling slice
WINDOW_ORDER = ("job", "segment", "recent")
#: each window in words, for every surface that names one
WINDOW_NAMES = {"job": "whole job", "segment": "latest phase", "recent": "recent"}


@dataclass(frozen=True)
class VerdictRow:
    """One stored verdict: a cause seen in one window of one evaluation, with its evidence."""

    verdict_id: int
    job_id: str
    evaluated_at: datetime
    window_kind: str
    window_start: datetime
    window_end: datetime
    cause: str
    confidence: float
    gpus: int | None
    gpu_hours: float | None
    gpu_hours_wasted: float | None
    mean_util_ratio: float | None
    summary: str
    fix: str | None
    rules_version: str = ""
    #: the evidence as read: JSON text, parsed on first use (a listing of thousands of jobs
    #: shows none of it, and does not read it: None), or the dict itself
    stored_evidence: str | dict[str, Any] | None = None

    @cached_property
    def evidence(self) -> dict[str, Any]:
        raw = self.stored_evidence
        value = json.loads(raw) if isinstance(raw, str) else raw
        return value if isinstance(value, dict) else {"value": value}

    @property
    def is_waste(self) -> bool:
        return self.cause != HEALTHY

    @property
    def window_s(self) -> float:
        return (self.window_end - self.window_start).total_seconds()


def _window_rank(kind: str) -> int:
    return WINDOW_ORDER.index(kind) if kind in WINDOW_ORDER else len(WINDOW_ORDER)


def _best_first(row: VerdictRow) -> tuple[int, float, int]:
    # the classifier stores a window's verdicts best first, so ids break confidence ties by cause
    return (_window_rank(row.window_kind), -row.confidence, row.verdict_id)


@dataclass(frozen=True)
class Evaluation:
    """One job's newest evaluation: its verdicts, whole-job window first, each window best first."""

    job_id: str
    evaluated_at: datetime
    verdicts: tuple[VerdictRow, ...]

    def window(self, kind: str) -> tuple[VerdictRow, ...]:
        return self._windows.get(kind, ())

    @cached_property
    def _windows(self) -> dict[str, tuple[VerdictRow, ...]]:
        """The verdicts by window, grouped once (a listing asks each job for every window)."""
        out: dict[str, list[VerdictRow]] = {}
        for v in self.verdicts:
            out.setdefault(v.window_kind, []).append(v)
        return {kind: tuple(rows) for kind, rows in out.items()}

    @cached_property
    def shown(self) -> VerdictRow | None:
        """The verdict a listing (and an alert) shows: the most actionable window's leading one.

        That is the whole-job window's when it names a cause; else the segment window's (the
        latest phase: a job that went idle after a busy start, dated), else the recent window's,
        when the whole job looks healthy or only :data:`GENERIC` ("low, cause unknown");
        :data:`GENERIC` only when no window names a cause; None when no window leads with a
        waste cause.
        """
        leads = [found[0] for kind in WINDOW_ORDER if (found := self.window(kind)) and found[0].is_waste]
        specific = [v for v in leads if v.cause != GENERIC]
        return (specific or leads or [None])[0]

    def of_cause(self, cause: str) -> VerdictRow | None:
        """The verdict of ``cause``, in :data:`WINDOW_ORDER`; None if no window found it."""
        return next((v for v in self.verdicts if v.cause == cause), None)

    @property
    def waste(self) -> tuple[VerdictRow, ...]:
        """Every waste verdict, :attr:`shown` first, then the rest of its window, then the other."""
        lead = self.shown
        return () if lead is None else (lead, *self.others(lead))

    def others(self, lead: VerdictRow) -> tuple[VerdictRow, ...]:
        """The waste verdicts besides ``lead``: the rest of its window first, then the others."""
        rest = [v for v in self.verdicts if v.is_waste and v.verdict_id != lead.verdict_id]
        rest.sort(key=lambda v: (v.window_kind != lead.window_kind, _best_first(v)))
        return tuple(rest)


def latest_select(
    *, evaluated_since: datetime | None = None, job_ids: Sequence[str] | None = None, waste_only: bool = False
) -> sa.Select[Any]:
    """The verdict rows of each job's newest evaluation (callers add joins and filters): found by
    ``newest_evaluations`` (kept by triggers on ``verdicts``) and the (job, time) index, not by a
    pass over the verdict history. ``waste_only``: only the evaluations holding a waste verdict
    (``newest_evaluations.waste``; most jobs are healthy: a listing of waste reads none of their
    rows)."""
    v, newest = verdicts.c, newest_evaluations.c
    latest = sa.select(newest.job_id, newest.evaluated_at.label("at"))
    if evaluated_since is not None:
        latest = latest.where(newest.evaluated_at >= evaluated_since)
    if job_ids is not None:
        latest = latest.where(newest.job_id.in_(list(job_ids)))
    if waste_only:
        latest = latest.where(newest.waste)
    sub = latest.subquery("latest")
    # the evidence as JSON text: parsed when a surface shows it (VerdictRow.evidence)
    columns = [sa.cast(c, sa.Text).label(c.name) if c.name == "evidence" else c for c in verdicts.c]
    return sa.select(*columns).join(sub, sa.and_(v.job_id == sub.c.job_id, v.evaluated_at == sub.c.at))


def _window_rank_sql(kind: sa.ColumnElement[str]) -> sa.ColumnElement[int]:
    return sa.case({k: i for i, k in enumerate(WINDOW_ORDER)}, value=kind, else_=len(WINDOW_ORDER))


#: the verdict columns a listing reads: all but the evidence (it shows none)
LISTED_COLUMNS = tuple(c.name for c in verdicts.c if c.name != "evidence")


def shown_select(
    *, cause: str, evaluated_since: datetime | None = None, job_ids: Sequence[str] | None = None
) -> sa.Select[Any]:
    """One row per job whose newest evaluation found ``cause``: the verdict
    :meth:`Evaluation.of_cause` picks, chosen in SQL so that a listing sorts, counts and pages in
    the database. :data:`LISTED_COLUMNS` of ``verdicts``. (Without a cause the listing reads the
    verdict :attr:`Evaluation.shown` picks as stored in ``shown_verdicts``.)

    The same rule as :meth:`Evaluation.of_cause` (a test holds the two equal): the cause's verdict
    in :data:`WINDOW_ORDER`, the most confident, then the first stored.
    """
    v, newest = verdicts.c, newest_evaluations.c
    latest = sa.select(newest.job_id, newest.evaluated_at.label("at")).where(newest.waste)
    if evaluated_since is not None:
        latest = latest.where(newest.evaluated_at >= evaluated_since)
    if job_ids is not None:
        latest = latest.where(newest.job_id.in_(list(job_ids)))
    sub = latest.subquery("latest")
    chosen = (
        sa.select(*(v[name] for name in LISTED_COLUMNS))
        .join(sub, sa.and_(v.job_id == sub.c.job_id, v.evaluated_at == sub.c.at))
        .where(v.cause == cause, v.cause != HEALTHY)
        .subquery("chosen")
    )
    c = chosen.c
    order = (_window_rank_sql(c.window_kind), c.confidence.desc(), c.id)
    pick = sa.func.row_number().over(partition_by=c.job_id, order_by=order).label("pick")
    picked = sa.select(*(c[name] for name in LISTED_COLUMNS), pick).subquery("picked")
    return sa.select(*(picked.c[name] for name in LISTED_COLUMNS)).where(picked.c.pick == 1)


#: the ``verdicts`` column behind each :class:`VerdictRow` field not named as stored
_COLUMN_OF = {"verdict_id": "id", "stored_evidence": "evidence"}


def verdict_reader(keys: Sequence[str]) -> Callable[[Sequence[Any]], VerdictRow]:
    """What makes a :class:`VerdictRow` of each result row whose columns are ``keys`` (the
    ``verdicts`` columns, and any others a query adds): the columns' positions are found once
    per query and a row's values handed on by position, so a listing of thousands of rows reads
    no value by name. A query without ``evidence`` makes rows without it (the last field)."""
    at = {key: i for i, key in enumerate(keys)}
    columns = [_COLUMN_OF.get(f.name, f.name) for f in fields(VerdictRow)]
    if "evidence" not in at:
        columns.remove("evidence")
    values = operator.itemgetter(*(at[column] for column in columns))

    def read(row: Sequence[Any]) -> VerdictRow:
        return VerdictRow(*values(row))

    return read


def verdicts_of(result: sa.Result[Any]) -> list[VerdictRow]:
    """Every row of a query of ``verdicts`` columns as a :class:`VerdictRow`."""
    read = verdict_reader(list(result.keys()))
    return [read(row) for row in result]


def group_evaluations(rows: Sequence[VerdictRow]) -> dict[str, Evaluation]:
    """Verdict rows of latest evaluations -> one :class:`Evaluation` per job, rows ordered."""
    per_job: dict[str, list[VerdictRow]] = {}
    for row in rows:
        per_job.setdefault(row.job_id, []).append(row)
    return {
        job_id: Evaluation(job_id, found[0].evaluated_at, tuple(sorted(found, key=_best_first)))
        for job_id, found in per_job.items()
    }


def latest_evaluations(
    conn: sa.Connection,
    *,
    evaluated_since: datetime | None = None,
    job_ids: Sequence[str] | None = None,
) -> dict[str, Evaluation]:
    """Each job's newest evaluation (optionally: only those at or after ``evaluated_since``)."""
    query = latest_select(evaluated_since=evaluated_since, job_ids=job_ids)
    return group_evaluations(verdicts_of(conn.execute(query)))
