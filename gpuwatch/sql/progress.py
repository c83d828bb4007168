"""How far each rollup pass has got: the ``rollup_state`` rows (a name and a time), read and
written here only.

The rows: 'minutes' (minutes rolled up to, exclusive) and 'late_scan' (``sql/rollups.py``),
'job_hours' (hours summed into ``job_hours``, ``sql/job_hours.py``), 'hours' (hours folded into
``gpu_hours`` / ``node_hours``, ``sql/hours.py``) and :data:`MINUTES_FROM` (set by retention).
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa

from gpuwatch.sql.schema import rollup_state

#: set by retention: the minute tables hold every minute from here on (``sql/resolution.py``)
MINUTES_FROM = "minutes_from"


def done_until(conn: sa.Connection, name: str) -> datetime | None:
    """The time of row ``name`` as the database returns it; None before it was first set."""
    return conn.execute(sa.select(rollup_state.c.done_until).where(rollup_state.c.name == name)).scalar()


def set_done_until(conn: sa.Connection, name: str, value: datetime) -> None:
    """Set row ``name`` to ``value``, making it the first time."""
    updated = conn.execute(rollup_state.update().where(rollup_state.c.name == name).values(done_until=value))
    if not updated.rowcount:
        conn.execute(rollup_state.insert().values(name=name, done_until=value))
