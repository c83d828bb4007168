"""Migration 0030: on PostgreSQL ``verdict_hours`` is kept by statement-level triggers that write
each changed (job, hour, cause) row once a statement and leave a row whose picks stay unwritten;
they fire first on ``verdicts`` and no other trigger reads the table; the downgrade restores
revision 0019's row triggers, and the answers are the same on either."""

from __future__ import annotations

import random
from collections import Counter
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch.classify.runner import store_evaluations
from gpuwatch.classify.verdict import Verdict
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.schema import verdicts
from tests.sql.test_verdict_hours import random_statement, rule_over_verdicts, stored_picks
from tests.sql.verdict_triggers import DELETE, INSERT, TRIGGERS, classifier_pass, definitions

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
_DEFINITIONS = definitions("verdicts_hours_")


def _pass(at: datetime, jobs: range, seed: int) -> dict[str, tuple[datetime, list[Verdict]]]:
    return classifier_pass(at, jobs, seed, wasted=(None, 0.5, 0.5, 2.0))


def _statements_keep_the_rule(engine: sa.Engine, rng: random.Random) -> dict[tuple, tuple]:
    """Fifteen random statements, each leaving verdict_hours as the rule over ``verdicts`` has
    it; the picks stored after them."""
    for _ in range(15):
        with engine.begin() as conn:
            random_statement(conn, rng)
            assert stored_picks(conn) == rule_over_verdicts(conn)
    with engine.connect() as conn:
        return stored_picks(conn)


def _count_writes(engine: sa.Engine) -> None:
    """Each statement on ``verdicts`` numbered (a statement trigger that fires before it), and each
    row version of ``verdict_hours`` written or deleted noted with the statement's number, its
    key, and whether an update left the row's values as they were."""
    statements = [
        "CREATE SEQUENCE verdict_statements",
        "CREATE TABLE hour_writes (statement bigint, job_id text, hour timestamptz, cause text, same bool)",
        """CREATE FUNCTION number_statement() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN PERFORM nextval('verdict_statements'); RETURN NULL; END $$""",
        """CREATE TRIGGER a_numbered BEFORE INSERT OR DELETE ON verdicts
        FOR EACH STATEMENT EXECUTE FUNCTION number_statement()""",
        """CREATE FUNCTION note_hour_write() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'DELETE' THEN
                INSERT INTO hour_writes VALUES (currval('verdict_statements'), OLD.job_id, OLD.hour,
                                                OLD.cause, false);
            ELSE
                INSERT INTO hour_writes VALUES (currval('verdict_statements'), NEW.job_id, NEW.hour,
                    NEW.cause, TG_OP = 'UPDATE' AND OLD IS NOT DISTINCT FROM NEW);
            END IF;
            RETURN NULL;
        END $$""",
        """CREATE TRIGGER hour_written AFTER INSERT OR UPDATE OR DELETE ON verdict_hours
        FOR EACH ROW EXECUTE FUNCTION note_hour_write()""",
    ]
    with engine.begin() as conn:
        for statement in statements:
            conn.execute(sa.text(statement))


def _writes(engine: sa.Engine) -> tuple[Counter, int]:
    """Since the last call: row writes per (statement, key), and how many left a row as it was."""
    with engine.begin() as conn:
        noted = conn.execute(sa.text("SELECT statement, job_id, hour, cause, same FROM hour_writes")).all()
        conn.execute(sa.text("DELETE FROM hour_writes"))
    return Counter(tuple(n[:4]) for n in noted), sum(n.same for n in noted)


def test_a_pass_writes_each_changed_pick_once_a_statement_and_no_unchanged_row(pg_url) -> None:
    """Classifier passes (one DELETE per evaluation time, INSERTs of 2,000 rows: 750 jobs x 3
    verdicts make two). Row by row (0029) a statement writes a key several times and rewrites
    rows it leaves as they were; with 0030's statement triggers each key at most once a
    statement, only where its picks change. An older pass stored again writes nothing."""
    jobs = range(750)
    engine = create_engine(pg_url)
    try:
        migrate.upgrade(engine, "0029")
        _count_writes(engine)
        store_evaluations(engine, _pass(T0, jobs, seed=1))
        store_evaluations(engine, _pass(T0 + timedelta(minutes=2), jobs, seed=2))
        store_evaluations(engine, _pass(T0 + timedelta(minutes=2), jobs, seed=2))
        counted, same = _writes(engine)
        assert max(counted.values()) > 1 and same > 0  # what the count tells apart
        with engine.connect() as conn:
            assert stored_picks(conn) == rule_over_verdicts(conn)

        migrate.upgrade(engine, "0030")
        for minutes, seed in ((4, 3), (6, 4), (6, 4), (6, 5), (4, 6), (66, 7)):
            with engine.connect() as conn:
                before = stored_picks(conn)
            store_evaluations(engine, _pass(T0 + timedelta(minutes=minutes), jobs, seed=seed))
            counted, same = _writes(engine)
            with engine.connect() as conn:
                after = stored_picks(conn)
                assert after == rule_over_verdicts(conn), (minutes, seed)
            assert counted and same == 0 and set(counted.values()) == {1}, (minutes, seed)
            changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
            assert {k[1:] for k in counted} == changed  # each changed row written, no other

        # rows that beat no pick (an older whole-job row, a recent one with less waste), then
        # deleted again: no row written by either statement
        with engine.connect() as conn:
            before = stored_picks(conn)
        beaten = [
            {"job_id": job, "evaluated_at": at, "window_kind": kind, "window_start": at, "window_end": at,
             "cause": cause, "confidence": 0.5, "gpu_hours_wasted": wasted, "summary": "beaten",
             "evidence": {}, "rules_version": "t"}
            for (job, hour, cause), (whole_at, _, _, recent_id, recent_wasted) in before.items()
            if whole_at is not None and recent_id is not None and whole_at > hour
            for kind, at, wasted in (("job", whole_at - timedelta(minutes=1), 5.0),
                                     ("recent", whole_at, recent_wasted / 2))
        ]  # fmt: skip
        assert len(beaten) > 100
        with engine.begin() as conn:
            conn.execute(verdicts.insert().values(beaten))
            conn.execute(verdicts.delete().where(verdicts.c.summary == "beaten"))
        assert _writes(engine) == (Counter(), 0)
        with engine.connect() as conn:
            assert stored_picks(conn) == before == rule_over_verdicts(conn)
    finally:
        engine.dispose()


def test_the_hours_triggers_fire_first_and_nothing_else_reads_the_table(pg_engine) -> None:
    """``verdicts_hours_*`` are statement-level and come first in name order; no other trigger
    function on ``verdicts`` reads ``verdict_hours``, so where they fire among the others leaves
    every table the same."""
    with pg_engine.connect() as conn:
        for event, name in ((INSERT, "insert"), (DELETE, "delete")):
            ordered = conn.execute(sa.text(TRIGGERS), {"row": False, "event": event}).scalars().all()
            assert ordered[0] == f"verdicts_hours_{name}" and len(ordered) > 1
            row_level = conn.execute(sa.text(TRIGGERS), {"row": True, "event": event}).scalars().all()
            assert not any(t.startswith("verdicts_hours") for t in row_level)
        others = conn.execute(
            sa.text("""SELECT t.tgname, pg_get_functiondef(t.tgfoid) FROM pg_trigger t
            WHERE t.tgrelid = 'verdicts'::regclass AND NOT t.tgisinternal
              AND t.tgname NOT LIKE 'verdicts_hours_%'""")
        ).all()
    assert others and not [name for name, body in others if "verdict_hours" in body]


def test_up_down_up_keeps_the_answers(pg_url) -> None:
    """Filled at revision 0029 (row triggers), up to 0030, down and up again, with statements of
    mixed shapes at each: the same rows as the rule over the verdicts, and the downgrade's
    triggers and functions are 0019's, as the catalog reads them."""
    rng = random.Random(3)
    engine = create_engine(pg_url)
    try:
        migrate.upgrade(engine, "0029")
        with engine.begin() as conn:
            for _ in range(20):
                random_statement(conn, rng)
        with engine.connect() as conn:
            row_triggers = conn.execute(sa.text(_DEFINITIONS)).all()
            answers = stored_picks(conn)
            assert answers == rule_over_verdicts(conn) and len(answers) > 10
        assert len(row_triggers) == 2 and all("FOR EACH ROW" in t for _, t, _ in row_triggers)
        for _ in range(2):
            migrate.upgrade(engine, "0030")
            with engine.connect() as conn:
                statement_triggers = conn.execute(sa.text(_DEFINITIONS)).all()
                assert all("FOR EACH STATEMENT" in t for _, t, _ in statement_triggers)
                assert stored_picks(conn) == answers
            answers = _statements_keep_the_rule(engine, rng)
            migrate.downgrade(engine, "0029")
            with engine.connect() as conn:
                assert conn.execute(sa.text(_DEFINITIONS)).all() == row_triggers
                assert stored_picks(conn) == answers
            answers = _statements_keep_the_rule(engine, rng)
        migrate.upgrade(engine)
        with engine.connect() as conn:
            assert stored_picks(conn) == answers == rule_over_verdicts(conn)
    finally:
        engine.dispose()
