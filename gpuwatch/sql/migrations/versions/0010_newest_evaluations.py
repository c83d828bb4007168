"""newest_evaluations: each job's newest evaluation time, kept by triggers on verdicts

The listing and the job page want each job's newest evaluation. Found with
``max(evaluated_at) ... group by job_id`` that is a pass over every verdict row of the period,
and the classifier writes rows every few minutes for every running job. This table holds the
answer, one row per job, kept by triggers so every writer (the classifier, ``gpuwatch
import``, a bulk COPY) keeps it: after an insert the job's time moves forward, after a delete
it is looked up again (the rows of an evaluation stored anew are deleted first). Filled from
the verdicts already stored.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-05 12:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpuwatch.sql.types import UtcDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_PG = [
    """CREATE FUNCTION gpuwatch_latest_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO newest_evaluations (job_id, evaluated_at) VALUES (NEW.job_id, NEW.evaluated_at)
        ON CONFLICT (job_id) DO UPDATE
        SET evaluated_at = GREATEST(newest_evaluations.evaluated_at, EXCLUDED.evaluated_at);
        RETURN NULL;
    END $$""",
    """CREATE FUNCTION gpuwatch_latest_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE newest timestamptz;
    BEGIN
        SELECT max(evaluated_at) INTO newest FROM verdicts WHERE job_id = OLD.job_id;
        IF newest IS NULL THEN
            DELETE FROM newest_evaluations WHERE job_id = OLD.job_id;
        ELSE
            UPDATE newest_evaluations SET evaluated_at = newest WHERE job_id = OLD.job_id;
        END IF;
        RETURN NULL;
    END $$""",
    """CREATE TRIGGER verdicts_latest_insert AFTER INSERT ON verdicts
       FOR EACH ROW EXECUTE FUNCTION gpuwatch_latest_after_insert()""",
    """CREATE TRIGGER verdicts_latest_delete AFTER DELETE ON verdicts
       FOR EACH ROW EXECUTE FUNCTION gpuwatch_latest_after_delete()""",
]
_SQLITE = [
    """CREATE TRIGGER verdicts_latest_insert AFTER INSERT ON verdicts BEGIN
        INSERT INTO newest_evaluations (job_id, evaluated_at) VALUES (NEW.job_id, NEW.evaluated_at)
        ON CONFLICT (job_id) DO UPDATE SET evaluated_at = max(evaluated_at, excluded.evaluated_at);
    END""",
    """CREATE TRIGGER verdicts_latest_delete AFTER DELETE ON verdicts BEGIN
        UPDATE newest_evaluations SET evaluated_at = (
            SELECT max(evaluated_at) FROM verdicts WHERE job_id = OLD.job_id
        ) WHERE job_id = OLD.job_id AND EXISTS (SELECT 1 FROM verdicts WHERE job_id = OLD.job_id);
        DELETE FROM newest_evaluations
        WHERE job_id = OLD.job_id AND NOT EXISTS (SELECT 1 FROM verdicts WHERE job_id = OLD.job_id);
    END""",
]


def upgrade() -> None:
    op.create_table(
        "newest_evaluations",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("evaluated_at", UtcDateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_newest_evaluations_evaluated", "newest_evaluations", ["evaluated_at"])
    op.execute(
        "INSERT INTO newest_evaluations (job_id, evaluated_at) "
        "SELECT job_id, max(evaluated_at) FROM verdicts GROUP BY job_id"
    )
    for statement in _PG if op.get_bind().dialect.name == "postgresql" else _SQLITE:
        op.execute(statement)


def downgrade() -> None:
    op.execute("DROP TRIGGER IF EXISTS verdicts_latest_insert" + _on())
    op.execute("DROP TRIGGER IF EXISTS verdicts_latest_delete" + _on())
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS gpuwatch_latest_after_insert()")
        op.execute("DROP FUNCTION IF EXISTS gpuwatch_latest_after_delete()")
    op.drop_index("ix_newest_evaluations_evaluated", table_name="newest_evaluations")
    op.drop_table("newest_evaluations")


def _on() -> str:
    return " ON verdicts" if op.get_bind().dialect.name == "postgresql" else ""
