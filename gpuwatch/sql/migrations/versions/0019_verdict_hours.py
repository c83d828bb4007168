"""verdict_hours: per (job, hour, cause) the verdicts a period's waste count picks, kept by triggers

A report's wasted GPU-hours come from the verdicts evaluated in its period: per (job, cause) the
latest whole-job verdict, else the recent or segment verdict with the most wasted GPU-hours. The
classifier stores rows for every running job every few minutes, so over a month of a large
cluster that is tens of millions of rows to read. Both picks are maxima, so they can be taken
per hour first and then over the hours: this table holds each hour's two picks (with the ids,
the newest row winning ties, as the pick over the verdicts does). Triggers keep it, so every
writer of verdicts (the classifier, ``gpuwatch import``, a bulk COPY) does: an insert replaces
a pick it beats; a delete of a picked row takes the hour's picks again from what is left. Only
verdicts that name waste (not healthy, more than 0 GPU-hours wasted) are counted. Filled from
the verdicts already stored.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-06 20:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpuwatch.sql.types import UtcDateTime

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_WASTED = "{row}.cause <> 'healthy' AND {row}.gpu_hours_wasted > 0"
_HOUR = {
    "postgresql": "date_trunc('hour', {at} AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'",
    "sqlite": "strftime('%Y-%m-%d %H:00:00.000000', {at})",
}
_NEXT_HOUR = {
    "postgresql": "(date_trunc('hour', {at} AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') + interval '1 hour'",
    "sqlite": "strftime('%Y-%m-%d %H:00:00.000000', {at}, '+1 hour')",
}


def _better(part: str, order: str) -> str:
    """The new row's pick beats the stored one (or there is none): compared by ``order``, then id."""
    new = f"(excluded.{order}, excluded.{part}_id)"
    old = f"(verdict_hours.{order}, verdict_hours.{part}_id)"
    return f"excluded.{part}_id IS NOT NULL AND (verdict_hours.{part}_id IS NULL OR {new} > {old})"


def _upsert(dialect: str) -> str:
    """Take NEW into its hour's picks."""
    hour = _HOUR[dialect].format(at="NEW.evaluated_at")
    whole, recent = _better("whole", "whole_at"), _better("recent", "recent_wasted")
    return f"""INSERT INTO verdict_hours
            (job_id, hour, cause, whole_at, whole_id, whole_wasted, recent_id, recent_wasted)
        VALUES (NEW.job_id, {hour}, NEW.cause,
            CASE WHEN NEW.window_kind = 'job' THEN NEW.evaluated_at END,
            CASE WHEN NEW.window_kind = 'job' THEN NEW.id END,
            CASE WHEN NEW.window_kind = 'job' THEN NEW.gpu_hours_wasted END,
            CASE WHEN NEW.window_kind <> 'job' THEN NEW.id END,
            CASE WHEN NEW.window_kind <> 'job' THEN NEW.gpu_hours_wasted END)
        ON CONFLICT (job_id, hour, cause) DO UPDATE SET
            whole_at = CASE WHEN {whole} THEN excluded.whole_at ELSE verdict_hours.whole_at END,
            whole_id = CASE WHEN {whole} THEN excluded.whole_id ELSE verdict_hours.whole_id END,
            whole_wasted = CASE WHEN {whole} THEN excluded.whole_wasted ELSE verdict_hours.whole_wasted END,
            recent_id = CASE WHEN {recent} THEN excluded.recent_id ELSE verdict_hours.recent_id END,
            recent_wasted = CASE WHEN {recent}
                THEN excluded.recent_wasted ELSE verdict_hours.recent_wasted END"""


def _repick(dialect: str) -> list[str]:
    """After OLD is deleted: if it was one of its hour's picks, take the hour's picks again from the
    verdicts left (none left: no row)."""
    hour = _HOUR[dialect].format(at="OLD.evaluated_at")
    next_hour = _NEXT_HOUR[dialect].format(at="OLD.evaluated_at")
    key = f"job_id = OLD.job_id AND hour = {hour} AND cause = OLD.cause"
    same = (
        f"job_id = OLD.job_id AND cause = OLD.cause AND gpu_hours_wasted > 0 "
        f"AND evaluated_at >= {hour} AND evaluated_at < {next_hour}"
    )
    return [
        f"DELETE FROM verdict_hours WHERE {key} AND OLD.id IN (whole_id, recent_id)",
        f"""INSERT INTO verdict_hours
            (job_id, hour, cause, whole_at, whole_id, whole_wasted, recent_id, recent_wasted)
        SELECT OLD.job_id, {hour}, OLD.cause,
            w.evaluated_at, w.id, w.gpu_hours_wasted, r.id, r.gpu_hours_wasted
        FROM (SELECT
                (SELECT id FROM verdicts WHERE {same} AND window_kind = 'job'
                 ORDER BY evaluated_at DESC, id DESC LIMIT 1) AS wid,
                (SELECT id FROM verdicts WHERE {same} AND window_kind <> 'job'
                 ORDER BY gpu_hours_wasted DESC, id DESC LIMIT 1) AS rid) AS p
        LEFT JOIN verdicts w ON w.id = p.wid
        LEFT JOIN verdicts r ON r.id = p.rid
        WHERE (p.wid IS NOT NULL OR p.rid IS NOT NULL)
          AND NOT EXISTS (SELECT 1 FROM verdict_hours WHERE {key})""",
    ]


def _triggers(dialect: str) -> list[str]:
    if dialect == "postgresql":
        repick = ";\n".join(_repick(dialect))
        return [
            f"""CREATE OR REPLACE FUNCTION gpuwatch_verdict_hours_after_insert() RETURNS trigger
            LANGUAGE plpgsql AS $$ BEGIN {_upsert(dialect)}; RETURN NULL; END $$""",
            f"""CREATE OR REPLACE FUNCTION gpuwatch_verdict_hours_after_delete() RETURNS trigger
            LANGUAGE plpgsql AS $$ BEGIN {repick}; RETURN NULL; END $$""",
            f"""CREATE TRIGGER verdicts_hours_insert AFTER INSERT ON verdicts FOR EACH ROW
            WHEN ({_WASTED.format(row="NEW")}) EXECUTE FUNCTION gpuwatch_verdict_hours_after_insert()""",
            f"""CREATE TRIGGER verdicts_hours_delete AFTER DELETE ON verdicts FOR EACH ROW
            WHEN ({_WASTED.format(row="OLD")}) EXECUTE FUNCTION gpuwatch_verdict_hours_after_delete()""",
        ]
    repick = ";\n".join(_repick(dialect))
    return [
        f"""CREATE TRIGGER verdicts_hours_insert AFTER INSERT ON verdicts
        WHEN {_WASTED.format(row="NEW")} BEGIN {_upsert(dialect)}; END""",
        f"""CREATE TRIGGER verdicts_hours_delete AFTER DELETE ON verdicts
        WHEN {_WASTED.format(row="OLD")} BEGIN {repick}; END""",
    ]


def _fill(dialect: str) -> list[str]:
    """Each hour's picks from the verdicts stored: the whole-job pick, then the recent one."""
    hour = _HOUR[dialect].format(at="evaluated_at")
    ranked = (
        "SELECT job_id, {hour} AS hour, cause, evaluated_at, id, gpu_hours_wasted, row_number() OVER "
        "(PARTITION BY job_id, {hour}, cause ORDER BY {order} DESC, id DESC) AS n "
        "FROM verdicts WHERE {wasted} AND window_kind {kind} 'job'"
    )
    wasted = _WASTED.format(row="verdicts")
    whole = ranked.format(hour=hour, order="evaluated_at", wasted=wasted, kind="=")
    recent = ranked.format(hour=hour, order="gpu_hours_wasted", wasted=wasted, kind="<>")
    return [
        f"""INSERT INTO verdict_hours (job_id, hour, cause, whole_at, whole_id, whole_wasted)
        SELECT job_id, hour, cause, evaluated_at, id, gpu_hours_wasted FROM ({whole}) AS t WHERE n = 1""",
        f"""INSERT INTO verdict_hours (job_id, hour, cause, recent_id, recent_wasted)
        SELECT job_id, hour, cause, id, gpu_hours_wasted FROM ({recent}) AS t WHERE n = 1
        ON CONFLICT (job_id, hour, cause) DO UPDATE SET
            recent_id = excluded.recent_id, recent_wasted = excluded.recent_wasted""",
    ]


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.create_table(
        "verdict_hours",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("hour", UtcDateTime, primary_key=True),
        sa.Column("cause", sa.String(32), primary_key=True),
        sa.Column("whole_at", UtcDateTime, nullable=True),
        sa.Column("whole_id", sa.BigInteger, nullable=True),
        sa.Column("whole_wasted", sa.Float(53), nullable=True),
        sa.Column("recent_id", sa.BigInteger, nullable=True),
        sa.Column("recent_wasted", sa.Float(53), nullable=True),
    )
    op.create_index("ix_verdict_hours_hour", "verdict_hours", ["hour"])
    for statement in _fill(dialect) + _triggers(dialect):
        op.execute(statement)


def downgrade() -> None:
    for name in ("verdicts_hours_insert", "verdicts_hours_delete"):
        op.execute(f"DROP TRIGGER {name} ON verdicts" if _postgres() else f"DROP TRIGGER {name}")
    if _postgres():
        for name in ("gpuwatch_verdict_hours_after_insert", "gpuwatch_verdict_hours_after_delete"):
            op.execute(f"DROP FUNCTION {name}()")
    op.drop_index("ix_verdict_hours_hour", table_name="verdict_hours")
    op.drop_table("verdict_hours")


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"
