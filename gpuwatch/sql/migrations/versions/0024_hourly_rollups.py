"""gpu_hours and node_hours: the minute rollups folded per hour, kept where the minutes are not

Per-minute rollups were kept 400 days: ~2.4 TiB of the 2.6 TiB a 1,000-node cluster stored
(``bench/storage.py``). Minutes are now kept ``retention.minute_days`` (14) and each hour of
them is folded into a row per GPU-hour and node-hour (``sql/hours.py``), kept 400 days. The
tables have the minute tables' columns as they are at this revision (read from the database),
keyed by ``hour``, plus ``minutes``, the minute rows folded in. Filled from the minutes already
stored, up to the hour the minute rollup has reached, so retention's first pass loses no history.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-07 10:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpuwatch.sql.buckets import floor_hour
from gpuwatch.sql.folding import fold_select, hourly_columns
from gpuwatch.sql.types import UtcDateTime

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

#: each hourly table and the minute table it folds
_TWINS = {"gpu_hours": "gpu_minutes", "node_hours": "node_minutes"}
_STATES = ("hours", "minutes_from")


def upgrade() -> None:
    bind = op.get_bind()
    metadata = sa.MetaData()
    state = sa.table("rollup_state", sa.column("name", sa.String), sa.column("done_until", UtcDateTime))
    done = bind.execute(sa.select(state.c.done_until).where(state.c.name == "minutes")).scalar()
    until = None if done is None else floor_hour(UtcDateTime().process_result_value(done, bind.dialect))
    for name, source in _TWINS.items():
        minutes = sa.Table(source, metadata, autoload_with=bind)
        hourly = sa.Table(name, metadata, *hourly_columns(minutes))
        hourly.create(bind)
        op.create_index(f"ix_{name}_hour", name, ["hour"])
        if until is not None:
            query = fold_select(bind, minutes, end=until)
            bind.execute(hourly.insert().from_select([c.name for c in query.selected_columns], query))
    if until is not None:
        bind.execute(state.insert().values(name="hours", done_until=until))


def downgrade() -> None:
    state = sa.table("rollup_state", sa.column("name", sa.String))
    op.execute(state.delete().where(state.c.name.in_(_STATES)))
    for name in _TWINS:
        op.drop_index(f"ix_{name}_hour", table_name=name)
        op.drop_table(name)
