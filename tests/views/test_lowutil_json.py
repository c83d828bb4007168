"""The listing's JSON made by PostgreSQL is byte-equal to the rows of ``low_util_jobs`` encoded
by ``json``, in every sort, on values chosen to differ between the two writers: integral and
huge floats, NaN, non-ASCII and control characters, microseconds, array tasks, jobs Slurm never
reported."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest
import sqlalchemy as sa

from gpuwatch.cli.jobs import LOW_UTIL_KEYS, render_low_util
from gpuwatch.cli.render import OutputFormat, json_array, render
from gpuwatch.sql.schema import slurm_jobs, verdicts
from gpuwatch.views import SORTS, LowUtilFilters, low_util_jobs, low_util_json
from gpuwatch.views.lowutil_json import JSON_KEYS

NOW = datetime(2026, 3, 2, 8, 0, 0, 250_000, tzinfo=timezone.utc)
FLOATS = (None, 0.0, -0.0, 1.0, 100.0, 0.1, 1 / 3, 1e-05, 2.5e-07, 123456789012345.0, 1e15,
          1234567890123456.0, 1713822622284525.5, 9999999999999998.0, 1e16, 1.5e300,
          float("nan"))  # fmt: skip
TEXTS = ("plain", 'quote " and \\ backslash', "tab\tnewline\n", "ctl \x01\x1f del \x7f", "café ☕ 𝄞", "")


def _verdicts(rnd: random.Random, jobs: int) -> list[dict]:
    rows = []
    for n in range(jobs):
        at = NOW - timedelta(minutes=rnd.randint(1, 600), microseconds=rnd.choice((0, 0, 1, 999_999)))
        for window in rnd.sample(("job", "segment", "recent"), rnd.randint(1, 3)):
            rows.append(
                {"job_id": str(500 + n), "evaluated_at": at, "window_kind": window,
                 "window_start": at - timedelta(hours=1), "window_end": at,
                 "cause": rnd.choice(("idle_allocation", "input_bound", "unknown_low", "healthy")),
                 "confidence": rnd.choice((0.5, 0.9, 1.0)), "gpus": rnd.choice((None, 1, 8)),
                 "gpu_hours": rnd.choice(FLOATS), "gpu_hours_wasted": rnd.choice(FLOATS),
                 "mean_util_ratio": rnd.choice(FLOATS), "summary": f"job {500 + n}: {rnd.choice(TEXTS)}",
                 "fix": None, "evidence": {}, "rules_version": "t"}
            )  # fmt: skip
    return rows


def _slurm_jobs(rnd: random.Random, jobs: int) -> list[dict]:
    rows = []
    for n in range(jobs):
        if rnd.random() < 0.2:
            continue  # known only from its verdicts
        start = rnd.choice((None, NOW - timedelta(hours=3, microseconds=7), NOW + timedelta(minutes=5)))
        state = rnd.choice(("RUNNING", "COMPLETED", "FAILED", None))
        end = (
            None
            if state in ("RUNNING", None) or start is None
            else start + timedelta(minutes=rnd.choice((1, 900)))
        )
        array = rnd.random() < 0.3
        rows.append(
            {"job_id": str(500 + n), "source": "squeue", "state": state, "start_at": start, "end_at": end,
             "user_name": rnd.choice((None, "alice", "zoë")), "account": rnd.choice(TEXTS),
             "partition": "gpu",
             "array_job_id": rnd.choice(("77", "")) if array else None,
             "array_task_id": str(n) if array else None, "first_seen_at": NOW, "updated_at": NOW}
        )  # fmt: skip
    return rows


def _python(engine: sa.Engine, filters: LowUtilFilters) -> str:
    return render_low_util(low_util_jobs(engine, filters, now=NOW), OutputFormat.JSON, "")


def test_postgresql_writes_what_json_writes(pg_engine) -> None:
    rnd = random.Random(21)
    with pg_engine.begin() as conn:
        conn.execute(verdicts.insert(), _verdicts(rnd, 120))
        conn.execute(slurm_jobs.insert(), _slurm_jobs(rnd, 120))
    base = LowUtilFilters(since=NOW - timedelta(days=1))
    for filters in [replace(base, sort=sort) for sort in SORTS] + [
        replace(base, limit=7, sort="util"),
        replace(base, cause="input_bound"),
        replace(base, running=True),
        replace(base, user="nobody"),
    ]:
        objects = low_util_json(pg_engine, filters, now=NOW, keys=LOW_UTIL_KEYS)
        assert objects is not None
        assert json_array(objects) == _python(pg_engine, filters), filters
    whole = _python(pg_engine, base)
    tricky = ('"caf\\u00e9', "\\u007f", "1713822622284525.5", "NaN", ".250000+00:00", "-0.0", '"77_')
    missing = [text for text in tricky if text not in whole]
    assert not missing
    assert '"job_id": "5' in whole


def test_every_key_it_knows(pg_engine) -> None:
    rnd = random.Random(4)
    with pg_engine.begin() as conn:
        conn.execute(verdicts.insert(), _verdicts(rnd, 30))
        conn.execute(slurm_jobs.insert(), _slurm_jobs(rnd, 30))
    filters = LowUtilFilters()
    objects = low_util_json(pg_engine, filters, now=NOW, keys=JSON_KEYS)
    assert objects is not None
    rows = [{k: getattr(job, k) for k in JSON_KEYS} for job in low_util_jobs(pg_engine, filters, now=NOW)]
    assert json_array(objects) == render(rows, [(k, k) for k in JSON_KEYS], OutputFormat.JSON)
    with pytest.raises(ValueError):
        low_util_json(pg_engine, filters, now=NOW, keys=("nodes",))


def test_sqlite_has_no_such_path(engine) -> None:
    if engine.dialect.name == "sqlite":
        assert low_util_json(engine, LowUtilFilters(), now=NOW, keys=LOW_UTIL_KEYS) is None
