"""Migration 0026: on PostgreSQL ``newest_evaluations`` is kept by statement-level triggers that
write a job's row once a statement and leave a row whose values stay the same unwritten, before
the triggers that pick ``shown_verdicts`` from it; its downgrade restores revision 0017's row
triggers, and the answers are the same on either."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch.classify.runner import store_evaluations
from gpuwatch.classify.verdict import Cause, Verdict
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.schema import shown_verdicts, verdicts
from tests.sql.test_newest_evaluations import rule, stored
from tests.sql.verdict_triggers import DELETE, INSERT, TRIGGERS, classifier_pass, definitions

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
_DEFINITIONS = definitions("verdicts_latest_")


def _pass(at: datetime, jobs: range, seed: int) -> dict[str, tuple[datetime, list[Verdict]]]:
    return classifier_pass(
        at,
        jobs,
        seed,
        causes=(Cause.HEALTHY, Cause.HEALTHY, Cause.IDLE_ALLOCATION, Cause.INPUT_BOUND),
        confidences=(0.5, 0.9),
    )


def _versions(conn: sa.Connection) -> dict[str, str]:
    """Each row's ``xmin``: the transaction that wrote its version."""
    return dict(conn.execute(sa.text("SELECT job_id, xmin::text FROM newest_evaluations")).all())


def _count_writes(engine: sa.Engine) -> None:
    """A row trigger on ``newest_evaluations`` noting each row version written, by job."""
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE newest_writes (job_id text NOT NULL)"))
        conn.execute(
            sa.text("""CREATE FUNCTION note_newest_write() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN INSERT INTO newest_writes VALUES (NEW.job_id); RETURN NULL; END $$""")
        )
        conn.execute(
            sa.text("""CREATE TRIGGER newest_written AFTER INSERT OR UPDATE ON newest_evaluations
            FOR EACH ROW EXECUTE FUNCTION note_newest_write()""")
        )


def _writes(engine: sa.Engine) -> dict[str, int]:
    """Row versions written per job since the last call."""
    with engine.begin() as conn:
        counted = conn.execute(sa.text("SELECT job_id, count(*) FROM newest_writes GROUP BY job_id")).all()
        conn.execute(sa.text("DELETE FROM newest_writes"))
    return dict(counted)


def _shown_matches_newest(conn: sa.Connection) -> bool:
    """Every stored pick is of its job's newest evaluation, one that found waste."""
    s = shown_verdicts.c
    picks = dict(conn.execute(sa.select(s.job_id, s.evaluated_at)).all())
    newest = stored(conn)
    return all(newest[job] == (at, True) for job, at in picks.items())


def test_a_pass_writes_each_row_once_and_a_pass_stored_again_writes_none(pg_url) -> None:
    """A pass of 3 verdicts a job: each job's row written once with 0026's statement triggers,
    3 times with revision 0025's row triggers. An older pass stored again writes no row (each
    row's ``xmin`` stays); the newest pass stored again writes each row twice (the DELETE looks
    the job up again, the INSERT moves it forward), against 6 times row by row."""
    t1, t2 = T0, T0 + timedelta(minutes=2)
    jobs = range(40)
    engine = create_engine(pg_url)
    try:
        migrate.upgrade(engine, "0025")
        _count_writes(engine)
        store_evaluations(engine, _pass(t1, jobs, seed=1))
        assert set(_writes(engine).values()) == {3}
        store_evaluations(engine, _pass(t2, jobs, seed=2))
        assert set(_writes(engine).values()) == {3}
        store_evaluations(engine, _pass(t2, jobs, seed=2))
        assert set(_writes(engine).values()) == {6}

        migrate.upgrade(engine, "0026")
        more = range(40, 80)
        store_evaluations(engine, _pass(t1, more, seed=3))  # new jobs: inserted once
        assert _writes(engine) == {f"j{n}": 1 for n in more}
        t3 = t2 + timedelta(minutes=2)
        store_evaluations(engine, _pass(t3, range(80), seed=6))
        assert _writes(engine) == {f"j{n}": 1 for n in range(80)}
        with engine.connect() as conn:
            before = _versions(conn)
            assert stored(conn) == rule(conn) and len(before) == 80
        store_evaluations(engine, _pass(t2, range(80), seed=7))  # older, stored again: nothing
        assert _writes(engine) == {}
        with engine.connect() as conn:
            assert _versions(conn) == before
            assert stored(conn) == rule(conn)
        store_evaluations(engine, _pass(t3, range(80), seed=6))  # the newest again: twice
        assert set(_writes(engine).values()) == {2}
        with engine.connect() as conn:
            assert stored(conn) == rule(conn)
            assert _shown_matches_newest(conn)
    finally:
        engine.dispose()


def test_the_newest_evaluation_is_kept_before_the_pick_reads_it(pg_engine) -> None:
    """Statement triggers of one event fire in name order: ``verdicts_latest_*`` (this table)
    before ``verdicts_shown_*`` (the pick, which reads it). A job first seen in a statement shows
    its pick; one whose newest evaluation is deleted shows the one before."""
    with pg_engine.connect() as conn:
        for event, name in ((INSERT, "insert"), (DELETE, "delete")):
            ordered = conn.execute(sa.text(TRIGGERS), {"row": False, "event": event}).scalars().all()
            assert ordered.index(f"verdicts_latest_{name}") < ordered.index(f"verdicts_shown_{name}")
            row_level = conn.execute(sa.text(TRIGGERS), {"row": True, "event": event}).scalars().all()
            assert not any(t.startswith("verdicts_latest") for t in row_level)
    t1, t2 = T0, T0 + timedelta(minutes=2)
    row = {"job_id": "new", "window_kind": "job", "window_start": T0 - timedelta(hours=1), "window_end": T0,
           "confidence": 0.9, "summary": "s", "evidence": {}, "rules_version": "t"}  # fmt: skip
    with pg_engine.begin() as conn:
        conn.execute(verdicts.insert(), [row | {"evaluated_at": t1, "cause": "idle_allocation"}])
    with pg_engine.begin() as conn:
        conn.execute(verdicts.insert(), [row | {"evaluated_at": t2, "cause": "input_bound"}])
    with pg_engine.connect() as conn:
        assert conn.execute(sa.select(shown_verdicts.c.evaluated_at, shown_verdicts.c.cause)).all() == [
            (t2, "input_bound")
        ]
    with pg_engine.begin() as conn:
        conn.execute(verdicts.delete().where(verdicts.c.evaluated_at == t2))
    with pg_engine.connect() as conn:
        assert conn.execute(sa.select(shown_verdicts.c.evaluated_at, shown_verdicts.c.cause)).all() == [
            (t1, "idle_allocation")
        ]


def test_up_down_up_keeps_the_answers(pg_url) -> None:
    """Filled at revision 0025 (row triggers), up to 0026, down and up again, with verdicts
    stored and deleted at each: the same newest evaluations as the rule over the verdicts, and
    the downgrade's triggers and functions are 0025's, as the catalog reads them."""
    engine = create_engine(pg_url)
    try:
        migrate.upgrade(engine, "0025")
        store_evaluations(engine, _pass(T0, range(30), seed=1))
        store_evaluations(engine, _pass(T0 + timedelta(minutes=2), range(0, 30, 2), seed=2))
        with engine.connect() as conn:
            row_triggers = conn.execute(sa.text(_DEFINITIONS)).all()
            answers = stored(conn)
            assert answers == rule(conn) and len(answers) == 30
        for step in range(2):
            migrate.upgrade(engine, "0026")
            with engine.connect() as conn:
                assert conn.execute(sa.text(_DEFINITIONS)).all() != row_triggers
                assert stored(conn) == rule(conn)
            at = T0 + timedelta(minutes=4 + 2 * step)
            store_evaluations(engine, _pass(at, range(10 * step, 40), seed=3 + step))
            with engine.begin() as conn:  # one statement: several jobs, some deleted whole
                conn.execute(verdicts.delete().where(verdicts.c.job_id.in_(["j3", "j5", f"j{20 + step}"])))
                conn.execute(verdicts.delete().where(verdicts.c.evaluated_at == at, verdicts.c.job_id < "j2"))
            with engine.connect() as conn:
                answers = stored(conn)
                assert answers == rule(conn) and "j3" not in answers
            migrate.downgrade(engine, "0025")
            with engine.connect() as conn:
                assert conn.execute(sa.text(_DEFINITIONS)).all() == row_triggers
                assert stored(conn) == answers
            store_evaluations(engine, _pass(at + timedelta(minutes=1), range(5, 15), seed=9))
            with engine.connect() as conn:
                assert stored(conn) == rule(conn)
        migrate.upgrade(engine)
        with engine.connect() as conn:
            assert stored(conn) == rule(conn)
    finally:
        engine.dispose()
