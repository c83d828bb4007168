"""verdict_hours on PostgreSQL: kept by statement-level triggers, each (job, hour, cause) written once

Revision 0019's row triggers ran an upsert on ``verdict_hours`` for every verdict naming waste
that was stored: 504,038 calls for a 600,000-row history and six passes of 20,000 jobs, the largest
trigger time of a pass once 0026 made ``newest_evaluations``' triggers statement-level. On
PostgreSQL the triggers are now statement-level, with transition tables, as 0026's are; the
table holds the same rows after any statement:

- after an insert, the statement's rows that name waste are taken per (job, hour, cause) first
  (the latest whole-job row, the recent or segment row with the most wasted GPU-hours; the
  newest row, the highest id, on ties, as 0019's picks), then merged into the stored row: a
  pick replaces the stored one only where it beats it, and a row whose picks both stay is not
  written (the upsert's ``DO UPDATE ... WHERE``);
- after a delete, only the (job, hour, cause) rows one of whose picks the statement deleted are
  taken again from the verdicts left (none left: the row goes), each once.

Both picks are maxima under a total order (the id breaks ties), so taking a statement's rows
together gives what taking them one after the other did. The triggers and their functions keep
0019's names: PostgreSQL fires the statement triggers of one event in name order, and
``verdicts_hours_*`` come before 0026's ``verdicts_latest_*``, 0025's ``verdicts_shown_*`` and
0021's ``verdicts_totals_*``; none of those reads ``verdict_hours`` (``tests/sql`` checks the
catalog). SQLite has no statement triggers; it keeps 0019's row triggers.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-07 18:00:00
"""

from __future__ import annotations

from alembic import op

from gpuwatch.sql.migrate import earlier_revision

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

_WASTED = "{row}.cause <> 'healthy' AND {row}.gpu_hours_wasted > 0"
_HOUR = "date_trunc('hour', {at} AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
_COLUMNS = "job_id, hour, cause, whole_at, whole_id, whole_wasted, recent_id, recent_wasted"


def _beats(part: str, order: str) -> str:
    """The statement's pick beats the stored one (or there is none): by ``order``, then id."""
    new = f"(EXCLUDED.{order}, EXCLUDED.{part}_id)"
    old = f"(h.{order}, h.{part}_id)"
    return f"(EXCLUDED.{part}_id IS NOT NULL AND (h.{part}_id IS NULL OR {new} > {old}))"


def _pick(kind: str, order: str) -> str:
    """The best of the statement's wasted rows per (job, hour, cause): whole-job or the others."""
    return f"""SELECT DISTINCT ON (job_id, hour, cause)
                job_id, hour, cause, evaluated_at, id, gpu_hours_wasted
            FROM wasted WHERE window_kind {kind} 'job'
            ORDER BY job_id, hour, cause, {order} DESC, id DESC"""


_WHOLE, _RECENT = _beats("whole", "whole_at"), _beats("recent", "recent_wasted")
_PG_FUNCTIONS = [
    f"""CREATE OR REPLACE FUNCTION gpuwatch_verdict_hours_after_insert() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        WITH wasted AS (
            SELECT job_id, {_HOUR.format(at="evaluated_at")} AS hour, cause, evaluated_at, id,
                   gpu_hours_wasted, window_kind
            FROM added a WHERE {_WASTED.format(row="a")}
        ), w AS ({_pick("=", "evaluated_at")}
        ), r AS ({_pick("<>", "gpu_hours_wasted")})
        INSERT INTO verdict_hours AS h ({_COLUMNS})
        SELECT job_id, hour, cause, w.evaluated_at, w.id, w.gpu_hours_wasted, r.id, r.gpu_hours_wasted
        FROM w FULL JOIN r USING (job_id, hour, cause)
        ON CONFLICT (job_id, hour, cause) DO UPDATE SET
            whole_at = CASE WHEN {_WHOLE} THEN EXCLUDED.whole_at ELSE h.whole_at END,
            whole_id = CASE WHEN {_WHOLE} THEN EXCLUDED.whole_id ELSE h.whole_id END,
            whole_wasted = CASE WHEN {_WHOLE} THEN EXCLUDED.whole_wasted ELSE h.whole_wasted END,
            recent_id = CASE WHEN {_RECENT} THEN EXCLUDED.recent_id ELSE h.recent_id END,
            recent_wasted = CASE WHEN {_RECENT} THEN EXCLUDED.recent_wasted ELSE h.recent_wasted END
        WHERE {_WHOLE} OR {_RECENT};
        RETURN NULL;
    END $$""",
    f"""CREATE OR REPLACE FUNCTION gpuwatch_verdict_hours_after_delete() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        WITH hit AS (
            SELECT DISTINCT h.job_id, h.hour, h.cause
            FROM removed o JOIN verdict_hours h
              ON h.job_id = o.job_id AND h.cause = o.cause
             AND h.hour = {_HOUR.format(at="o.evaluated_at")} AND o.id IN (h.whole_id, h.recent_id)
            WHERE {_WASTED.format(row="o")}
        ), picks AS (
            SELECT g.job_id, g.hour, g.cause, w.evaluated_at AS whole_at, w.id AS whole_id,
                   w.gpu_hours_wasted AS whole_wasted, r.id AS recent_id, r.gpu_hours_wasted AS recent_wasted
            FROM hit g
            LEFT JOIN LATERAL (
                SELECT v.evaluated_at, v.id, v.gpu_hours_wasted FROM verdicts v
                WHERE v.job_id = g.job_id AND v.cause = g.cause AND v.gpu_hours_wasted > 0
                  AND v.evaluated_at >= g.hour AND v.evaluated_at < g.hour + interval '1 hour'
                  AND v.window_kind = 'job'
                ORDER BY v.evaluated_at DESC, v.id DESC LIMIT 1
            ) w ON true
            LEFT JOIN LATERAL (
                SELECT v.id, v.gpu_hours_wasted FROM verdicts v
                WHERE v.job_id = g.job_id AND v.cause = g.cause AND v.gpu_hours_wasted > 0
                  AND v.evaluated_at >= g.hour AND v.evaluated_at < g.hour + interval '1 hour'
                  AND v.window_kind <> 'job'
                ORDER BY v.gpu_hours_wasted DESC, v.id DESC LIMIT 1
            ) r ON true
        ), gone AS (
            DELETE FROM verdict_hours h USING picks p
            WHERE h.job_id = p.job_id AND h.hour = p.hour AND h.cause = p.cause
              AND p.whole_id IS NULL AND p.recent_id IS NULL
        )
        UPDATE verdict_hours h SET whole_at = p.whole_at, whole_id = p.whole_id,
            whole_wasted = p.whole_wasted, recent_id = p.recent_id, recent_wasted = p.recent_wasted
        FROM picks p
        WHERE h.job_id = p.job_id AND h.hour = p.hour AND h.cause = p.cause
          AND (p.whole_id IS NOT NULL OR p.recent_id IS NOT NULL);
        RETURN NULL;
    END $$""",
]
#: PostgreSQL fires the statement triggers of one event in the order of their names: these come
#: first on ``verdicts``; no other trigger there reads ``verdict_hours``
_PG_TRIGGERS = {
    "verdicts_hours_insert": "AFTER INSERT ON verdicts REFERENCING NEW TABLE AS added "
    "FOR EACH STATEMENT EXECUTE FUNCTION gpuwatch_verdict_hours_after_insert()",
    "verdicts_hours_delete": "AFTER DELETE ON verdicts REFERENCING OLD TABLE AS removed "
    "FOR EACH STATEMENT EXECUTE FUNCTION gpuwatch_verdict_hours_after_delete()",
}


def _postgres() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade() -> None:
    if not _postgres():
        return
    for name in _PG_TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON verdicts")
    for statement in _PG_FUNCTIONS:
        op.execute(statement)
    for name, when in _PG_TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} {when}")


def downgrade() -> None:
    """Back to revision 0019's row triggers and their functions, as 0019 writes them."""
    if not _postgres():
        return
    for name in _PG_TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON verdicts")
    for statement in earlier_revision("0019_verdict_hours.py")._triggers("postgresql"):
        op.execute(statement)
