"""newest_evaluations.waste: whether each job's newest evaluation found a waste cause

The low-utilization listing reads the verdicts of each job's newest evaluation and keeps the
jobs with waste, a third of them or fewer. Found with ``EXISTS`` over ``verdicts`` per job,
PostgreSQL misjudged the join and read every verdict stored (1.4 M rows at 1,000 nodes,
growing with the history kept); with the answer stored beside the evaluation time it reads the
wasting jobs' rows by index. The triggers that keep ``evaluated_at`` keep ``waste`` too, so
every writer of verdicts keeps it: an insert of a newer evaluation sets it from its row, one of
the same evaluation adds its row's, a delete looks the job's newest evaluation up again. Filled
from the verdicts already stored.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-06 06:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpuwatch.sql.migrate import earlier_revision

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

_WASTE = "cause <> 'healthy'"
_PG = [
    f"""CREATE OR REPLACE FUNCTION gpuwatch_latest_after_insert() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO newest_evaluations (job_id, evaluated_at, waste)
        VALUES (NEW.job_id, NEW.evaluated_at, NEW.{_WASTE})
        ON CONFLICT (job_id) DO UPDATE SET
            waste = CASE
                WHEN EXCLUDED.evaluated_at > newest_evaluations.evaluated_at THEN EXCLUDED.waste
                WHEN EXCLUDED.evaluated_at = newest_evaluations.evaluated_at
                    THEN newest_evaluations.waste OR EXCLUDED.waste
                ELSE newest_evaluations.waste END,
            evaluated_at = GREATEST(newest_evaluations.evaluated_at, EXCLUDED.evaluated_at);
        RETURN NULL;
    END $$""",
    f"""CREATE OR REPLACE FUNCTION gpuwatch_latest_after_delete() RETURNS trigger LANGUAGE plpgsql AS $$
    DECLARE newest timestamptz;
    BEGIN
        SELECT max(evaluated_at) INTO newest FROM verdicts WHERE job_id = OLD.job_id;
        IF newest IS NULL THEN
            DELETE FROM newest_evaluations WHERE job_id = OLD.job_id;
        ELSE
            UPDATE newest_evaluations SET evaluated_at = newest, waste = EXISTS (
                SELECT 1 FROM verdicts WHERE job_id = OLD.job_id AND evaluated_at = newest AND {_WASTE}
            ) WHERE job_id = OLD.job_id;
        END IF;
        RETURN NULL;
    END $$""",
]
_SQLITE = [
    f"""CREATE TRIGGER verdicts_latest_insert AFTER INSERT ON verdicts BEGIN
        INSERT INTO newest_evaluations (job_id, evaluated_at, waste)
        VALUES (NEW.job_id, NEW.evaluated_at, NEW.{_WASTE})
        ON CONFLICT (job_id) DO UPDATE SET
            waste = CASE
                WHEN excluded.evaluated_at > evaluated_at THEN excluded.waste
                WHEN excluded.evaluated_at = evaluated_at THEN waste OR excluded.waste
                ELSE waste END,
            evaluated_at = max(evaluated_at, excluded.evaluated_at);
    END""",
    f"""CREATE TRIGGER verdicts_latest_delete AFTER DELETE ON verdicts BEGIN
        UPDATE newest_evaluations SET
            evaluated_at = (SELECT max(evaluated_at) FROM verdicts WHERE job_id = OLD.job_id),
            waste = EXISTS (
                SELECT 1 FROM verdicts v WHERE v.job_id = OLD.job_id AND v.{_WASTE} AND v.evaluated_at = (
                    SELECT max(evaluated_at) FROM verdicts WHERE job_id = OLD.job_id
                )
            )
        WHERE job_id = OLD.job_id AND EXISTS (SELECT 1 FROM verdicts WHERE job_id = OLD.job_id);
        DELETE FROM newest_evaluations
        WHERE job_id = OLD.job_id AND NOT EXISTS (SELECT 1 FROM verdicts WHERE job_id = OLD.job_id);
    END""",
]
_TRIGGERS = ("verdicts_latest_insert", "verdicts_latest_delete")


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    op.add_column(
        "newest_evaluations", sa.Column("waste", sa.Boolean, nullable=False, server_default=sa.false())
    )
    op.execute(
        "UPDATE newest_evaluations SET waste = EXISTS (SELECT 1 FROM verdicts v WHERE v.job_id = "
        "newest_evaluations.job_id AND v.evaluated_at = newest_evaluations.evaluated_at "
        f"AND v.{_WASTE})"
    )
    waste = sa.column("waste", sa.Boolean)
    op.create_index(
        "ix_newest_evaluations_waste",
        "newest_evaluations",
        ["evaluated_at"],
        postgresql_where=waste,
        sqlite_where=waste,
    )
    if not _postgres():
        for name in _TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
    for statement in _PG if _postgres() else _SQLITE:
        op.execute(statement)


def downgrade() -> None:
    """Back to revision 0010's triggers, which keep the time alone. SQLite drops the column by
    copying the table, which its triggers on ``verdicts`` name: they go first, and come back."""
    before = earlier_revision("0010_newest_evaluations.py")
    if not _postgres():
        for name in _TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
    op.drop_index("ix_newest_evaluations_waste", table_name="newest_evaluations")
    with op.batch_alter_table("newest_evaluations") as batch:
        batch.drop_column("waste")
    if _postgres():
        for statement in before._PG:
            if statement.startswith("CREATE FUNCTION"):
                op.execute(statement.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1))
    else:
        for statement in before._SQLITE:
            op.execute(statement)
