"""newest_evaluations on PostgreSQL: kept by statement-level triggers, each job's row written once

Revision 0017's row triggers ran an upsert on ``newest_evaluations`` for every verdict stored:
a classifier pass of 3 verdicts a job rewrote each job's row 3 times (and a delete looked the
job up again per row deleted), and each rewrite left a dead row version and, where the time
changed, new index entries. A 10,000-node fill grew the table to ~700 MB for 250,000 rows. On
PostgreSQL the triggers are now statement-level, with transition tables, as 0025's are:

- after an insert, the statement's rows are taken per job first (its newest evaluation time
  among them, and whether a row at that time names waste), then merged into the stored row as
  the row triggers did, one row after the other: a newer evaluation replaces it, the same
  evaluation adds its waste, an older one changes nothing;
- after a delete, the jobs the statement touched are looked up again in ``verdicts`` (newest
  time, and waste at it), and a job with no verdict left loses its row.

A row whose values would stay the same is not written (the upsert's ``DO UPDATE ... WHERE``,
the update's comparison), so storing an older evaluation again leaves no dead row version, and a
pass writes each job's row once. The triggers keep their names: PostgreSQL fires the
statement triggers of one event in name order, and ``verdicts_latest_*`` run before 0025's
``verdicts_shown_*``, whose pick reads ``newest_evaluations``. SQLite has no statement
triggers; it keeps 0025's row triggers.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-07 17:00:00
"""

from __future__ import annotations

from alembic import op

from gpuwatch.sql.migrate import earlier_revision

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

_WASTE = "cause <> 'healthy'"
_PG_FUNCTIONS = [
    # the statement's rows per job: the newest evaluation among them, and its waste
    f"""CREATE OR REPLACE FUNCTION gpuwatch_latest_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO newest_evaluations AS n (job_id, evaluated_at, waste)
        SELECT DISTINCT ON (job_id) job_id, evaluated_at, bool_or({_WASTE})
        FROM added GROUP BY job_id, evaluated_at ORDER BY job_id, evaluated_at DESC
        ON CONFLICT (job_id) DO UPDATE SET
            evaluated_at = EXCLUDED.evaluated_at,
            waste = CASE WHEN EXCLUDED.evaluated_at > n.evaluated_at THEN EXCLUDED.waste
                         ELSE n.waste OR EXCLUDED.waste END
        WHERE EXCLUDED.evaluated_at > n.evaluated_at
           OR (EXCLUDED.evaluated_at = n.evaluated_at AND EXCLUDED.waste AND NOT n.waste);
        RETURN NULL;
    END $$""",
    f"""CREATE OR REPLACE FUNCTION gpuwatch_latest_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE newest_evaluations n SET evaluated_at = l.evaluated_at, waste = l.waste
        FROM (SELECT DISTINCT job_id FROM removed) j
        CROSS JOIN LATERAL (
            SELECT m.newest AS evaluated_at, EXISTS (
                SELECT 1 FROM verdicts v
                WHERE v.job_id = j.job_id AND v.evaluated_at = m.newest AND v.{_WASTE}
            ) AS waste
            FROM (SELECT max(evaluated_at) AS newest FROM verdicts WHERE job_id = j.job_id) m
            WHERE m.newest IS NOT NULL
        ) l
        WHERE n.job_id = j.job_id AND (n.evaluated_at <> l.evaluated_at OR n.waste <> l.waste);
        DELETE FROM newest_evaluations n
        WHERE n.job_id IN (SELECT job_id FROM removed)
          AND NOT EXISTS (SELECT 1 FROM verdicts v WHERE v.job_id = n.job_id);
        RETURN NULL;
    END $$""",
]
#: PostgreSQL fires the statement triggers of one event in the order of their names: these
#: come before 0025's ``verdicts_shown_insert`` and ``verdicts_shown_delete``, which read
#: ``newest_evaluations`` (``tests/sql/test_newest_evaluations_per_statement.py`` checks it)
_PG_TRIGGERS = {
    "verdicts_latest_insert": "AFTER INSERT ON verdicts REFERENCING NEW TABLE AS added "
    "FOR EACH STATEMENT EXECUTE FUNCTION gpuwatch_latest_after_insert()",
    "verdicts_latest_delete": "AFTER DELETE ON verdicts REFERENCING OLD TABLE AS removed "
    "FOR EACH STATEMENT EXECUTE FUNCTION gpuwatch_latest_after_delete()",
}


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    if not _postgres():
        return
    shown = earlier_revision("0025_shown_verdicts.py")._PG_TRIGGERS
    assert all(mine < theirs for mine in _PG_TRIGGERS for theirs in shown), "fired after the pick"
    for name in _PG_TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON verdicts")
    for statement in _PG_FUNCTIONS:
        op.execute(statement)
    for name, when in _PG_TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} {when}")


def downgrade() -> None:
    """Back to revision 0017's row triggers: its functions, on 0010's triggers."""
    if not _postgres():
        return
    for name in _PG_TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON verdicts")
    for statement in earlier_revision("0017_newest_evaluation_waste.py")._PG:
        op.execute(statement)
    for statement in earlier_revision("0010_newest_evaluations.py")._PG:
        if statement.startswith("CREATE TRIGGER"):
            op.execute(statement)
