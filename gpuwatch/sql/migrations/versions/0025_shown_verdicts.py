"""shown_verdicts: the verdict each job's newest evaluation shows, a row per wasting job

The low-utilization listing shows one verdict per wasting job (``Evaluation.shown``). Picked at
query time, that took an index probe into ``verdicts`` per wasting job and a window pass over
its rows: 1.75-2.7 s at 10,000 nodes (87,000 wasting jobs, 13.9 M verdict rows). Stored in a
table of its own, a copy of the shown verdict's columns but the evidence, the listing reads
that table and ``slurm_jobs`` alone. Not columns of ``newest_evaluations``: its row triggers
rewrite a job's row for every verdict stored, and each rewrite would copy the verdict's text.

The pick is :attr:`gpuwatch.views.evaluations.Evaluation.shown`'s rule in SQL (a test holds the
stored pick equal to it): a window's lead is its most confident verdict, the first stored on
ties; the shown verdict is the lead naming a waste cause, specific causes before
``unknown_low``, then whole job, latest phase, recent. Every writer of verdicts keeps it: on
PostgreSQL a statement-level trigger per insert and delete picks again for the jobs the
statement touched (after the row triggers that keep ``newest_evaluations``), on SQLite the row
triggers of revision 0017 do, as their last statements. Filled from the verdicts stored.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-07 14:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpuwatch.sql.migrate import earlier_revision
from gpuwatch.sql.types import UtcDateTime

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

#: the verdict columns copied (all but the evidence), ``id`` the verdict's
_COPIED = ("id", "evaluated_at", "window_kind", "window_start", "window_end", "cause", "confidence", "gpus",
           "gpu_hours", "gpu_hours_wasted", "mean_util_ratio", "summary", "fix", "rules_version")  # fmt: skip


#: the shown verdict among a job's newest evaluation's (``n``): the lead of each window (its
#: most confident verdict, the first stored on ties) naming a waste cause, specific causes
#: before ``unknown_low``, then whole job, latest phase, recent
_SHOWN = """FROM verdicts v
            WHERE v.job_id = n.job_id AND v.evaluated_at = n.evaluated_at AND v.cause <> 'healthy'
              AND v.window_kind IN ('job', 'segment', 'recent')
              AND NOT EXISTS (
                  SELECT 1 FROM verdicts b
                  WHERE b.job_id = v.job_id AND b.evaluated_at = v.evaluated_at
                    AND b.window_kind = v.window_kind
                    AND (b.confidence > v.confidence
                         OR (b.confidence = v.confidence AND b.id < v.id)))
            ORDER BY v.cause = 'unknown_low',
                     CASE v.window_kind WHEN 'job' THEN 0 WHEN 'segment' THEN 1 ELSE 2 END
            LIMIT 1"""


def _pick(jobs: str, *, postgres: bool) -> str:
    """Insert the shown verdict of each job that ``jobs`` (a condition on ``newest_evaluations
    n``) keeps, at its newest evaluation; none for a job whose windows lead with no waste cause.

    Each job costs index probes on ``(job_id, evaluated_at)``. PostgreSQL reads the verdict in a
    ``LATERAL`` subquery: joined by id to a pick (or ``WHERE id IN`` the picks), the planner
    hashed the picks against a sequential scan of every verdict stored, once per statement the
    triggers ran for (38-72 ms a job stored, against 1 ms without the trigger). SQLite has no
    ``LATERAL``; it probes the id's index for a pick."""
    columns = ", ".join(f"s.{c}" for c in _COPIED)
    into = f"INSERT INTO shown_verdicts (job_id, {', '.join(_COPIED)}) SELECT s.job_id, {columns}"
    if postgres:
        return f"""{into} FROM newest_evaluations n
        CROSS JOIN LATERAL (SELECT v.* {_SHOWN}) s
        WHERE n.waste AND {jobs}"""
    return f"""{into} FROM newest_evaluations n
        JOIN verdicts s ON s.id = (SELECT v.id {_SHOWN})
        WHERE n.waste AND {jobs}"""


_PG_FUNCTION = f"""CREATE OR REPLACE FUNCTION gpuwatch_shown_refresh() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM shown_verdicts WHERE job_id IN (SELECT job_id FROM changed);
        {_pick("n.job_id IN (SELECT job_id FROM changed)", postgres=True)};
        RETURN NULL;
    END $$"""
_PG_TRIGGERS = {
    "verdicts_shown_insert": "AFTER INSERT ON verdicts REFERENCING NEW TABLE AS changed",
    "verdicts_shown_delete": "AFTER DELETE ON verdicts REFERENCING OLD TABLE AS changed",
}
_PG_CALL = "FOR EACH STATEMENT EXECUTE FUNCTION gpuwatch_shown_refresh()"
_SQLITE_TRIGGERS = ("verdicts_latest_insert", "verdicts_latest_delete")


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def _sqlite_triggers() -> list[str]:
    """Revision 0017's triggers, each ending with the pick for the row's job."""
    out = []
    for statement, row in zip(
        earlier_revision("0017_newest_evaluation_waste.py")._SQLITE, ("NEW", "OLD"), strict=True
    ):
        pick = _pick(f"n.job_id = {row}.job_id", postgres=False)
        refresh = f"DELETE FROM shown_verdicts WHERE job_id = {row}.job_id;\n    {pick};"
        body, end = statement.rstrip().rsplit("END", 1)
        out.append(f"{body}    {refresh}\n    END{end}")
    return out


def upgrade() -> None:
    op.create_table(
        "shown_verdicts",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("id", sa.BigInteger, nullable=False),
        sa.Column("evaluated_at", UtcDateTime, nullable=False),
        sa.Column("window_kind", sa.String(16), nullable=False),
        sa.Column("window_start", UtcDateTime, nullable=False),
        sa.Column("window_end", UtcDateTime, nullable=False),
        sa.Column("cause", sa.String(32), nullable=False),
        sa.Column("confidence", sa.Float(53), nullable=False),
        sa.Column("gpus", sa.Integer, nullable=True),
        sa.Column("gpu_hours", sa.Float(53), nullable=True),
        sa.Column("gpu_hours_wasted", sa.Float(53), nullable=True),
        sa.Column("mean_util_ratio", sa.Float(53), nullable=True),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("fix", sa.Text, nullable=True),
        sa.Column("rules_version", sa.String(16), nullable=False),
    )
    op.execute(_pick("true", postgres=_postgres()))
    if _postgres():
        op.execute("ANALYZE shown_verdicts")  # its size for the planner: a hash join, not a probe a row
        op.execute(_PG_FUNCTION)
        for name, when in _PG_TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {when} {_PG_CALL}")
    else:
        for name in _SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
        for statement in _sqlite_triggers():
            op.execute(statement)


def downgrade() -> None:
    """Back to revision 0017's triggers, without the table."""
    if _postgres():
        for name in _PG_TRIGGERS:
            op.execute(f"DROP TRIGGER {name} ON verdicts")
        op.execute("DROP FUNCTION gpuwatch_shown_refresh()")
    else:
        for name in _SQLITE_TRIGGERS:
            op.execute(f"DROP TRIGGER {name}")
        for statement in earlier_revision("0017_newest_evaluation_waste.py")._SQLITE:
            op.execute(statement)
    op.drop_table("shown_verdicts")
