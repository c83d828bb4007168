"""job_totals: an ended job's report figures over its whole run, so a month's report sums a row per job

A report over a month of a large cluster read every job-hour and every verdict-hour of the
month and built each job's figures in Python (seconds at 1,000 nodes). An ended job's figures
do not change once its hours are summed, so they are stored once (``views/job_totals.py``) and
a period that holds the whole job sums them in SQL. A row is made from the Slurm facts and the
newest evaluation it names; a reader checks them. Triggers delete a job's row when verdicts of
the job are stored or deleted (an evaluation stored again at the same time changes no newest
time), and re-summing an hour deletes the rows of its jobs (``sql/job_hours.py``); the next
totals pass makes them again. Starts empty: until a job has a row, reports read it as before.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06 23:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpuwatch.sql.types import UtcDateTime

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

_EVENTS = ("insert", "delete")


def _triggers(dialect: str) -> list[str]:
    if dialect == "postgresql":
        # statement triggers with transition tables: one DELETE per statement, not per row
        out = []
        for event in _EVENTS:
            rows = "new_rows" if event == "insert" else "old_rows"
            out += [
                f"""CREATE OR REPLACE FUNCTION gpuwatch_job_totals_after_{event}() RETURNS trigger
                LANGUAGE plpgsql AS $$ BEGIN
                    DELETE FROM job_totals WHERE job_id IN (SELECT job_id FROM {rows});
                    RETURN NULL; END $$""",
                f"""CREATE TRIGGER verdicts_totals_{event} AFTER {event.upper()} ON verdicts
                REFERENCING {"NEW" if event == "insert" else "OLD"} TABLE AS {rows}
                FOR EACH STATEMENT EXECUTE FUNCTION gpuwatch_job_totals_after_{event}()""",
            ]
        return out
    return [
        f"""CREATE TRIGGER verdicts_totals_{event} AFTER {event.upper()} ON verdicts
        BEGIN DELETE FROM job_totals WHERE job_id = {"NEW" if event == "insert" else "OLD"}.job_id; END"""
        for event in _EVENTS
    ]


def upgrade() -> None:
    op.create_table(
        "job_totals",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("start_at", UtcDateTime, nullable=False),
        sa.Column("end_at", UtcDateTime, nullable=False),
        sa.Column("gpus", sa.Integer, nullable=False),
        sa.Column("cpus", sa.Integer, nullable=True),
        sa.Column("time_limit_s", sa.BigInteger, nullable=True),
        sa.Column("state", sa.String(32), nullable=True),
        sa.Column("billing", sa.Float(53), nullable=True),
        sa.Column("evaluated_at", UtcDateTime, nullable=True),
        sa.Column("data_from", UtcDateTime, nullable=False),
        sa.Column("data_to", UtcDateTime, nullable=False),
        sa.Column("gpu_hours", sa.Float(53), nullable=False),
        sa.Column("billing_hours", sa.Float(53), nullable=True),
        sa.Column("lead_cause", sa.String(32), nullable=True),
        sa.Column("gpu_hours_wasted", sa.Float(53), nullable=False, server_default="0"),
        sa.Column("energy_joules", sa.Float(53), nullable=True),
        sa.Column("energy_estimated_joules", sa.Float(53), nullable=True),
        sa.Column("util_sum", sa.Float(53), nullable=False, server_default="0"),
        sa.Column("util_samples", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("cpu_used_cores", sa.Float(53), nullable=False, server_default="0"),
        sa.Column("cpu_allocated_cores", sa.Float(53), nullable=False, server_default="0"),
        sa.Column("memory_ratio", sa.Float(53), nullable=True),
        sa.Column("advised_time", sa.SmallInteger, nullable=False, server_default="0"),
        sa.Column("advised_memory", sa.SmallInteger, nullable=False, server_default="0"),
        sa.Column("advised_cpus", sa.SmallInteger, nullable=False, server_default="0"),
        sa.Column("advised_gpus", sa.SmallInteger, nullable=False, server_default="0"),
        sa.Column("advised_gpu_size", sa.SmallInteger, nullable=False, server_default="0"),
        sa.Column("saving_gpu_hours", sa.Float(53), nullable=True),
    )
    op.create_index("ix_job_totals_span", "job_totals", ["data_from", "data_to"])
    for statement in _triggers(op.get_bind().dialect.name):
        op.execute(statement)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for event in _EVENTS:
        op.execute(f"DROP TRIGGER verdicts_totals_{event}" + (" ON verdicts" if postgres else ""))
        if postgres:
            op.execute(f"DROP FUNCTION gpuwatch_job_totals_after_{event}()")
    op.drop_index("ix_job_totals_span", table_name="job_totals")
    op.drop_table("job_totals")
