"""newest_evaluations.shown_*: the verdict each job's newest evaluation shows, and its sort keys

The low-utilization listing shows one verdict per wasting job (``Evaluation.shown``). Picked at
query time, that took an index probe into ``verdicts`` per wasting job and a window pass over
its rows: 1.75-2.7 s at 10,000 nodes (87,000 wasting jobs, 13.9 M verdict rows). Stored beside
the evaluation time, with the two verdict values the listing sorts by, the listing sorts,
counts and pages ``newest_evaluations`` and reads the shown verdicts by id for the page alone.

The pick is :attr:`gpuwatch.views.evaluations.Evaluation.shown`'s rule in SQL (a test holds the
stored pick equal to it): a window's lead is its most confident verdict, the first stored on
ties; the shown verdict is the lead naming a waste cause, specific causes before
``unknown_low``, then whole job, latest phase, recent. Every writer of verdicts keeps it: on
PostgreSQL a statement-level trigger per insert and delete picks again for the jobs the
statement touched (after the row triggers that keep ``evaluated_at``), on SQLite the row
triggers of revision 0017 do, as their last statement. Filled from the verdicts stored.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07 14:00:00
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

#: the columns, and what each holds of the shown verdict
_COLUMNS = {"shown_id": "id", "shown_wasted": "gpu_hours_wasted", "shown_util": "mean_util_ratio"}
_SET = "({}) = ".format(", ".join(_COLUMNS))


#: the ``newest_evaluations`` row a pick is for (SQLite's triggers take no alias in an UPDATE)
_N = "newest_evaluations"


def _pick() -> str:
    """The shown verdict's values for a row of ``newest_evaluations``, at its newest evaluation;
    no row when no window leads with a waste cause."""
    values = ", ".join(f"v.{c}" for c in _COLUMNS.values())
    return f"""(SELECT {values} FROM verdicts v
        WHERE v.job_id = {_N}.job_id AND v.evaluated_at = {_N}.evaluated_at AND v.cause <> 'healthy'
          AND v.window_kind IN ('job', 'segment', 'recent')
          AND NOT EXISTS (
              SELECT 1 FROM verdicts b
              WHERE b.job_id = v.job_id AND b.evaluated_at = v.evaluated_at
                AND b.window_kind = v.window_kind
                AND (b.confidence > v.confidence OR (b.confidence = v.confidence AND b.id < v.id)))
        ORDER BY v.cause = 'unknown_low',
                 CASE v.window_kind WHEN 'job' THEN 0 WHEN 'segment' THEN 1 ELSE 2 END
        LIMIT 1)"""


_FILL = f"UPDATE {_N} SET {_SET}{_pick()} WHERE waste"
_PG_FUNCTION = f"""CREATE OR REPLACE FUNCTION gpuwatch_shown_refresh() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        UPDATE {_N} SET {_SET}{_pick()}
        WHERE job_id IN (SELECT DISTINCT job_id FROM changed);
        RETURN NULL;
    END $$"""
_PG_TRIGGERS = {
    "verdicts_shown_insert": "AFTER INSERT ON verdicts REFERENCING NEW TABLE AS changed",
    "verdicts_shown_delete": "AFTER DELETE ON verdicts REFERENCING OLD TABLE AS changed",
}
_PG_CALL = "EXECUTE FUNCTION gpuwatch_shown_refresh()"
_SQLITE_TRIGGERS = ("verdicts_latest_insert", "verdicts_latest_delete")


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def _sqlite_triggers() -> list[str]:
    """Revision 0017's triggers, each ending with the pick for the row's job."""
    refresh = f"UPDATE {_N} SET {_SET}{_pick()} WHERE job_id = {{row}}.job_id;"
    out = []
    for statement, row in zip(_revision_0017()._SQLITE, ("NEW", "OLD"), strict=True):
        body, end = statement.rstrip().rsplit("END", 1)
        out.append(f"{body}    {refresh.format(row=row)}\n    END{end}")
    return out


def upgrade() -> None:
    with op.batch_alter_table("newest_evaluations") as batch:
        batch.add_column(sa.Column("shown_id", sa.BigInteger, nullable=True))
        batch.add_column(sa.Column("shown_wasted", sa.Float(53), nullable=True))
        batch.add_column(sa.Column("shown_util", sa.Float(53), nullable=True))
    op.execute(_FILL)
    if _postgres():
        op.execute(_PG_FUNCTION)
        for name, when in _PG_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {when} FOR EACH STATEMENT {_PG_CALL}")
    else:
        for name in _SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
        for statement in _sqlite_triggers():
            op.execute(statement)


def downgrade() -> None:
    """Back to revision 0017's triggers. SQLite drops the columns by copying the table, which
    its triggers on ``verdicts`` name: they go first, and come back."""
    if _postgres():
        for name in _PG_TRIGGERS:
            op.execute(f"DROP TRIGGER {name} ON verdicts")
        op.execute("DROP FUNCTION gpuwatch_shown_refresh()")
    else:
        for name in _SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
    with op.batch_alter_table("newest_evaluations") as batch:
        for name in reversed(_COLUMNS):
            batch.drop_column(name)
    if not _postgres():
        for statement in _revision_0017()._SQLITE:
            op.execute(statement)


def _revision_0017() -> ModuleType:
    """The migration that made the SQLite triggers: their text lives there, once."""
    path = Path(__file__).with_name("0017_newest_evaluation_waste.py")
    spec = importlib.util.spec_from_file_location("gpuwatch_migration_0017", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
