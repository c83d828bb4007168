"""Each job's newest evaluation, kept by triggers on ``verdicts`` on both databases, whoever
writes the verdicts; filled from stored verdicts by the migration."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.schema import newest_evaluations, verdicts
from gpuwatch.sql.types import UtcDateTime

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def _verdict(job: str, at: datetime, cause: str = "healthy") -> dict:
    return {
        "job_id": job, "evaluated_at": at, "window_kind": "recent",
        "window_start": at - timedelta(minutes=10), "window_end": at, "cause": cause, "confidence": 0.8,
        "summary": "s", "evidence": {}, "rules_version": "t",
    }  # fmt: skip


def _newest(engine) -> dict[str, datetime]:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        return dict(
            conn.execute(sa.select(newest_evaluations.c.job_id, newest_evaluations.c.evaluated_at)).all()
        )


def test_inserts_move_it_forward_and_deletes_look_it_up_again(engine) -> None:  # type: ignore[no-untyped-def]
    t1, t2, t3 = T0, T0 + timedelta(minutes=2), T0 + timedelta(minutes=4)
    with engine.begin() as conn:
        conn.execute(verdicts.insert(), [_verdict("a", t2), _verdict("a", t2, "idle_allocation")])
        conn.execute(verdicts.insert(), [_verdict("a", t1), _verdict("b", t1)])  # an older evaluation after
    assert _newest(engine) == {"a": t2, "b": t1}
    with engine.begin() as conn:
        conn.execute(verdicts.insert(), [_verdict("a", t3)])
    assert _newest(engine)["a"] == t3
    with engine.begin() as conn:  # the newest evaluation's rows deleted: the one before counts
        conn.execute(verdicts.delete().where(verdicts.c.evaluated_at == t3))
    assert _newest(engine)["a"] == t2
    with engine.begin() as conn:  # an evaluation stored anew (delete, then insert): unchanged
        conn.execute(verdicts.delete().where(verdicts.c.job_id == "a", verdicts.c.evaluated_at == t2))
        conn.execute(verdicts.insert(), [_verdict("a", t2)])
    assert _newest(engine)["a"] == t2
    with engine.begin() as conn:
        conn.execute(verdicts.delete().where(verdicts.c.job_id == "b"))
    assert "b" not in _newest(engine)


def test_the_migration_fills_it_from_stored_verdicts(db_url) -> None:  # type: ignore[no-untyped-def]
    engine = create_engine(db_url)
    try:
        migrate.upgrade(engine, "0009")
        with engine.begin() as conn:
            conn.execute(verdicts.insert(), [_verdict("a", T0), _verdict("a", T0 + timedelta(hours=1)),
                                             _verdict("b", T0)])  # fmt: skip
        migrate.upgrade(engine)
        assert _newest(engine) == {"a": T0 + timedelta(hours=1), "b": T0}
        with engine.begin() as conn:  # and the triggers run from then on
            conn.execute(verdicts.insert(), [_verdict("b", T0 + timedelta(hours=2))])
        assert _newest(engine)["b"] == T0 + timedelta(hours=2)
    finally:
        engine.dispose()


def _waste(engine) -> dict[str, bool]:  # type: ignore[no-untyped-def]
    with engine.connect() as conn:
        rows = conn.execute(sa.select(newest_evaluations.c.job_id, newest_evaluations.c.waste)).all()
    return {job: bool(waste) for job, waste in rows}


def test_waste_follows_the_newest_evaluation(engine) -> None:  # type: ignore[no-untyped-def]
    """The listing of waste reads ``waste``: true when a verdict of the job's newest evaluation
    names a cause, whatever order the rows come in and whichever rows are deleted."""
    t1, t2, t3 = T0, T0 + timedelta(minutes=2), T0 + timedelta(minutes=4)
    with engine.begin() as conn:
        conn.execute(verdicts.insert(), [_verdict("a", t1, "healthy"), _verdict("b", t1, "input_bound")])
    assert _waste(engine) == {"a": False, "b": True}
    with engine.begin() as conn:  # a second window of the same evaluation finds waste
        conn.execute(verdicts.insert(), [_verdict("a", t1, "idle_allocation"), _verdict("b", t1, "healthy")])
    assert _waste(engine) == {"a": True, "b": True}
    with engine.begin() as conn:  # a newer evaluation, healthy: no longer waste
        conn.execute(verdicts.insert(), [_verdict("a", t2, "healthy")])
    assert _waste(engine)["a"] is False
    with engine.begin() as conn:  # an older evaluation stored late changes nothing
        conn.execute(verdicts.insert(), [_verdict("a", T0 - timedelta(minutes=5), "small_work")])
    assert _waste(engine)["a"] is False
    with engine.begin() as conn:
        conn.execute(verdicts.insert(), [_verdict("a", t3, "small_work")])
    assert _waste(engine)["a"] is True
    with engine.begin() as conn:  # the newest evaluation deleted: the one before decides again
        conn.execute(verdicts.delete().where(verdicts.c.evaluated_at == t3))
    assert _waste(engine)["a"] is False and _newest(engine)["a"] == t2
    with engine.begin() as conn:
        conn.execute(verdicts.delete().where(verdicts.c.evaluated_at == t2))
    assert _waste(engine)["a"] is True and _newest(engine)["a"] == t1


def test_the_migration_fills_waste_from_stored_verdicts(db_url) -> None:  # type: ignore[no-untyped-def]
    engine = create_engine(db_url)
    try:
        migrate.upgrade(engine, "0016")
        times = ("evaluated_at", "window_start", "window_end")
        old = sa.table(  # verdicts as revision 0016 has them, the columns these rows set
            "verdicts",
            *(sa.column(c, UtcDateTime) if c in times else sa.column(c) for c in _verdict("x", T0)),
        )
        rows = [_verdict("a", T0, "idle_allocation"), _verdict("a", T0 + timedelta(hours=1)),
                _verdict("b", T0), _verdict("b", T0, "input_bound")]  # fmt: skip
        with engine.begin() as conn:
            conn.execute(old.insert(), [{**r, "evidence": "{}"} for r in rows])
        migrate.upgrade(engine)
        assert _waste(engine) == {"a": False, "b": True}
        migrate.downgrade(engine, "0016")  # and back: the triggers keep the time alone again
        with engine.begin() as conn:
            conn.execute(old.insert(), [{**_verdict("c", T0), "evidence": "{}"}])
        with engine.connect() as conn:
            assert (
                conn.execute(sa.text("SELECT job_id FROM newest_evaluations WHERE job_id = 'c'")).scalar()
                == "c"
            )
    finally:
        engine.dispose()


def rule(conn: sa.Connection) -> dict[str, tuple[datetime, bool]]:
    """Each job's newest evaluation time and whether a verdict of it names waste, from every
    verdict stored, in Python: what the triggers keep."""
    v = verdicts.c
    newest: dict[str, tuple[datetime, bool]] = {}
    for job, at, cause in conn.execute(sa.select(v.job_id, v.evaluated_at, v.cause)):
        seen = newest.get(job)
        if seen is None or at > seen[0]:
            newest[job] = (at, cause != "healthy")
        elif at == seen[0]:
            newest[job] = (at, seen[1] or cause != "healthy")
    return newest


def stored(conn: sa.Connection) -> dict[str, tuple[datetime, bool]]:
    n = newest_evaluations.c
    rows = conn.execute(sa.select(n.job_id, n.evaluated_at, n.waste)).all()
    return {job: (at, bool(waste)) for job, at, waste in rows}


def test_statements_of_every_shape_keep_the_rule(engine) -> None:  # type: ignore[no-untyped-def]
    """Inserts of one row to many, a statement holding several evaluations of a job (older
    after newer, waste at one time and not another), deletes of rows, of a job's newest
    evaluation and of whole jobs: after each statement the table holds the rule over the
    verdicts (row triggers on SQLite, statement triggers on PostgreSQL)."""
    rnd = random.Random(3)
    times = [T0 + timedelta(minutes=2 * k) for k in range(5)]
    causes = ("healthy", "healthy", "idle_allocation", "input_bound")
    for step in range(40):
        with engine.begin() as conn:
            if step % 4 == 3:
                ids = conn.execute(sa.select(verdicts.c.id)).scalars().all()
                gone = rnd.sample(ids, min(len(ids), rnd.choice((1, 5, 30))))
                conn.execute(verdicts.delete().where(verdicts.c.id.in_(gone)))
            elif step % 8 == 5:
                at = rnd.choice(times)
                conn.execute(verdicts.delete().where(verdicts.c.evaluated_at == at, verdicts.c.job_id < "j4"))
            else:
                rows = [_verdict(f"j{rnd.randrange(8)}", rnd.choice(times), rnd.choice(causes))
                        for _ in range(rnd.choice((1, 3, 12, 40)))]  # fmt: skip
                conn.execute(verdicts.insert(), rows)
            assert stored(conn) == rule(conn), step
    with engine.begin() as conn:
        conn.execute(verdicts.delete().where(verdicts.c.job_id.in_(["j1", "j2"])))
        assert stored(conn) == rule(conn) and "j1" not in stored(conn)
