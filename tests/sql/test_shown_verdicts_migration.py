"""Migration 0025 stores the verdict each job's newest evaluation shows (``shown_verdicts``), filled
from the verdicts already stored and kept by triggers after; its downgrade drops it and leaves
revision 0017's triggers keeping the evaluation time and ``waste``, on both databases."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.schema import shown_verdicts, verdicts
from gpuwatch.views.evaluations import VerdictRow, group_evaluations, latest_select, verdicts_of

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
CAUSES = ("healthy", "healthy", "idle_allocation", "input_bound", "unknown_low")

#: ``newest_evaluations`` as revision 0024 has it
_newest = sa.table("newest_evaluations", sa.column("job_id"), sa.column("waste"))


def _verdicts(rnd: random.Random, jobs: int) -> list[dict]:
    rows = []
    for n in range(jobs):
        for age in range(rnd.choice((1, 2))):
            at = T0 - timedelta(hours=age)
            for _ in range(rnd.randint(1, 5)):
                window = rnd.choice(("job", "segment", "recent"))
                rows.append(
                    {"job_id": f"j{n}", "evaluated_at": at, "window_kind": window, "window_end": at,
                     "window_start": at - timedelta(hours=1), "cause": rnd.choice(CAUSES),
                     "confidence": rnd.choice((0.5, 0.9)), "gpus": 2, "gpu_hours": 2.0,
                     "gpu_hours_wasted": rnd.choice((None, 0.5, 1.5)),
                     "mean_util_ratio": rnd.choice((None, 0.1)),
                     "summary": "s", "fix": None, "evidence": {}, "rules_version": "t"}
                )  # fmt: skip
    rnd.shuffle(rows)
    return rows


def _expected(conn: sa.Connection) -> dict[str, VerdictRow]:
    evaluations = group_evaluations(verdicts_of(conn.execute(latest_select())))
    picks = {job: e.shown for job, e in evaluations.items()}
    return {job: replace(v, stored_evidence=None) for job, v in picks.items() if v}


def _stored(conn: sa.Connection) -> dict[str, VerdictRow]:
    return {v.job_id: v for v in verdicts_of(conn.execute(sa.select(shown_verdicts)))}


def test_the_upgrade_fills_the_pick_and_the_downgrade_keeps_the_rest(db_url) -> None:
    rnd = random.Random(5)
    engine = create_engine(db_url)
    try:
        migrate.upgrade(engine, "0024")
        with engine.begin() as conn:
            conn.execute(verdicts.insert(), _verdicts(rnd, 60))
        migrate.upgrade(engine, "0025")
        with engine.connect() as conn:
            expected = _expected(conn)
            assert 10 < len(expected) < 60
            assert _stored(conn) == expected
        with engine.begin() as conn:  # the triggers keep it from here
            conn.execute(verdicts.delete().where(verdicts.c.job_id.in_(["j1", "j2", "j3"])))
            conn.execute(verdicts.insert(), [r | {"job_id": f"k{r['job_id']}"} for r in _verdicts(rnd, 20)])
        with engine.connect() as conn:
            assert _stored(conn) == _expected(conn)
        migrate.downgrade(engine, "0024")
        assert "shown_verdicts" not in sa.inspect(engine).get_table_names()
        with engine.begin() as conn:
            conn.execute(verdicts.insert(), [r | {"job_id": "fresh", "cause": "idle_allocation"}
                                             for r in _verdicts(rnd, 1)])  # fmt: skip
            waste = conn.execute(sa.select(_newest.c.waste).where(_newest.c.job_id == "fresh")).scalar_one()
            assert waste
        migrate.upgrade(engine, "0025")
        with engine.connect() as conn:
            assert _stored(conn) == _expected(conn)
            assert "fresh" in _stored(conn)
    finally:
        engine.dispose()
