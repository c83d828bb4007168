"""The low-utilization listing as JSON text made by PostgreSQL, one object per listed job.

``gpuwatch jobs --low-util --format json`` writes every listed job: 87,000 at 10,000 nodes.
Read as :class:`~gpuwatch.views.lowutil.LowUtilJob` objects and encoded by ``json`` that cost
about 2.4 s of the command's CPU (bench/README.md, the low-util command); here the database
writes each row's object as text while it reads the page (:func:`~gpuwatch.views.lowutil.listing_query`,
the same rows in the same order), and the command joins the texts.

Each value is written as ``json.dumps`` writes the :class:`LowUtilJob` attribute of the same
name (a test holds the two outputs byte-equal): ISO 8601 times with ``+00:00``, seconds run as
:func:`~gpuwatch.views.jobs.run_seconds` counts them, floats in Python's ``repr``
(PostgreSQL's shortest text, with ``.0`` on integral values and fixed notation from 1e15 to
1e16, where PostgreSQL writes an exponent), strings escaped as JSON. ``json.dumps`` escapes
what is not printable ASCII and PostgreSQL does not: a row holding such a character is parsed
and encoded again by ``json`` (its floats parse back to the same ``repr``).

SQLite has no such path: :func:`low_util_json` answers None there, and callers encode
:func:`~gpuwatch.views.lowutil.low_util_page`'s rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from gpuwatch.slurm.model import TERMINAL_STATES
from gpuwatch.sql.engine import is_postgres
from gpuwatch.sql.schema import slurm_jobs, verdicts
from gpuwatch.views.lowutil import LowUtilFilters, listing_query

_NULL = sa.literal("null")


def _text(column: Any) -> sa.ColumnElement[str]:
    """A string as JSON: quoted and escaped (``to_json``), or null."""
    return sa.func.coalesce(sa.cast(sa.func.to_json(column), sa.Text), _NULL)


def _integer(column: Any) -> sa.ColumnElement[str]:
    return sa.func.coalesce(sa.cast(column, sa.Text), _NULL)


def _float(column: Any) -> sa.ColumnElement[str]:
    """A float8 as Python's ``repr`` writes it (``extra_float_digits = 1``: the shortest text
    that reads back the same value, as ``repr``'s digits)."""
    text = sa.cast(column, sa.Text)
    size = sa.func.abs(column)
    # 1e15 <= |x| < 1e16: PostgreSQL writes d.ddde+15, Python the digits with a point after 16
    digits = sa.func.replace(sa.func.split_part(sa.func.ltrim(text, "-"), "e", 1), ".", "")
    sign = sa.case((column < 0, "-"), else_="")
    fixed = sa.case(
        (sa.func.length(digits) <= 16, sign + sa.func.rpad(digits, 16, "0") + ".0"),
        else_=sign + sa.func.left(digits, 16) + "." + sa.func.substr(digits, 17),
    )
    return sa.case(
        (column.is_(None), _NULL),
        (sa.and_(size < 1e15, column == sa.func.trunc(column)), text + ".0"),  # not NaN, not infinite
        (sa.and_(size >= 1e15, size < 1e16), fixed),
        else_=text,
    )


def _time(column: Any) -> sa.ColumnElement[str]:
    """A timestamptz as ``datetime.isoformat`` writes a UTC one: microseconds only when any."""
    text = sa.func.to_char(sa.func.timezone("UTC", column), 'YYYY-MM-DD"T"HH24:MI:SS.US')
    iso = '"' + sa.func.replace(text, ".000000", "") + '+00:00"'
    return sa.case((column.is_(None), _NULL), else_=iso)


def _display_id(job_id: Any) -> sa.ColumnElement[str]:
    """:func:`~gpuwatch.views.jobs.display_id` in SQL."""
    j = slurm_jobs.c
    array_task = sa.and_(j.array_job_id.is_not(None), j.array_job_id != "", j.array_task_id.is_not(None))
    return sa.case((array_task, j.array_job_id + "_" + j.array_task_id), else_=job_id)


def _run_seconds(now: datetime) -> sa.ColumnElement[Any]:
    """:func:`~gpuwatch.views.jobs.run_seconds` in SQL: whole seconds, none below 0."""
    j = slurm_jobs.c
    at = sa.literal(now, verdicts.c.evaluated_at.type)
    running = sa.or_(j.state.is_(None), j.state.not_in(sorted(TERMINAL_STATES)), j.end_at.is_(None))
    stop = sa.case((running, at), else_=sa.func.least(j.end_at, at))
    seconds = sa.func.floor(sa.extract("epoch", stop - j.start_at))
    return sa.case((j.start_at.is_(None), None), else_=sa.func.greatest(0, seconds).cast(sa.BigInteger))


#: each :class:`LowUtilJob` attribute this path writes, as its JSON text in SQL, given the
#: columns of the verdicts listed (``verdicts`` or ``shown_verdicts``) and ``now``
_VALUES: dict[str, Callable[[Any, datetime], sa.ColumnElement[str]]] = {
    "job_id": lambda v, now: _text(_display_id(v.job_id)),
    "raw_job_id": lambda v, now: _text(v.job_id),
    "name": lambda v, now: _text(slurm_jobs.c.name),
    "user": lambda v, now: _text(slurm_jobs.c.user_name),
    "account": lambda v, now: _text(slurm_jobs.c.account),
    "partition": lambda v, now: _text(slurm_jobs.c.partition),
    "state": lambda v, now: _text(slurm_jobs.c.state),
    "start_at": lambda v, now: _time(slurm_jobs.c.start_at),
    "end_at": lambda v, now: _time(slurm_jobs.c.end_at),
    "duration_s": lambda v, now: _integer(_run_seconds(now)),
    "gpus": lambda v, now: _integer(v.gpus),
    "gpu_hours": lambda v, now: _float(v.gpu_hours),
    "gpu_hours_wasted": lambda v, now: _float(v.gpu_hours_wasted),
    "mean_util_ratio": lambda v, now: _float(v.mean_util_ratio),
    "cause": lambda v, now: _text(v.cause),
    "confidence": lambda v, now: _float(v.confidence),
    "window_kind": lambda v, now: _text(v.window_kind),
    "evaluated_at": lambda v, now: _time(v.evaluated_at),
    "summary": lambda v, now: _text(v.summary),
    "fix": lambda v, now: _text(v.fix),
}
#: the :class:`LowUtilJob` attributes :func:`low_util_json` can write
JSON_KEYS = tuple(_VALUES)


def _object(verdict: Any, keys: Sequence[str], now: datetime) -> sa.ColumnElement[str]:
    """One row's JSON object, ``keys`` in order, spaced as ``json.dumps`` spaces them; the
    listed verdict's columns are ``verdict``."""
    parts: list[Any] = []
    for i, key in enumerate(keys):
        parts += [("{" if i == 0 else ", ") + json.dumps(key) + ": ", _VALUES[key](verdict, now)]
    return sa.func.concat(*parts, "}")


def _as_json_writes(line: str) -> str:
    """``line`` as ``json.dumps`` writes it: PostgreSQL leaves non-ASCII and DEL unescaped."""
    if line.isascii() and "\x7f" not in line:
        return line
    return json.dumps(json.loads(line))


def low_util_json(
    engine: sa.Engine | sa.Connection, filters: LowUtilFilters, *, now: datetime, keys: Sequence[str]
) -> list[str] | None:
    """Each listed job's JSON object as text, the attributes ``keys`` (of :data:`JSON_KEYS`) of
    :class:`LowUtilJob` in that order, as :func:`~gpuwatch.views.lowutil.low_util_jobs` lists
    them; None on SQLite (no such path: encode ``low_util_jobs``)."""
    if not set(keys) <= set(JSON_KEYS):
        raise ValueError(f"keys must be of {JSON_KEYS}, not {sorted(set(keys) - set(JSON_KEYS))}")
    if isinstance(engine, sa.Connection):
        return _lines(engine, filters, now, keys)
    with engine.connect() as conn:
        return _lines(conn, filters, now, keys)


def _lines(conn: sa.Connection, f: LowUtilFilters, now: datetime, keys: Sequence[str]) -> list[str] | None:
    if not is_postgres(conn):
        return None
    listing = listing_query(conn, f, now)
    conn.exec_driver_sql("SET LOCAL extra_float_digits = 1")  # the shortest exact text of a float
    lines = conn.execute(listing.rows(_object(listing.verdicts.c, keys, now))).scalars().all()
    return [_as_json_writes(line) for line in lines]
