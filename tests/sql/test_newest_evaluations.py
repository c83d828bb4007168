"""Each job's newest evaluation, kept by triggers on ``verdicts`` on both databases, whoever
writes the verdicts; filled from stored verdicts by the migration."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.schema import newest_evaluations, verdicts

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
