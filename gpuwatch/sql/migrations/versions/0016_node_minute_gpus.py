"""node_minutes: the node's GPUs per minute (utilization sums, GPUs reporting, simulated)

The web overview shows every node's last hour and counts the GPUs reporting now. Read from
``gpu_minutes`` that is a row per GPU-minute (480,000 for an hour of 1,000 eight-GPU nodes);
summed per node-minute by the rollup pass it is a row per node-minute, eight times fewer, and
grouped already. Filled from the ``gpu_minutes`` rows already stored, adding a node-minute row
where a node had GPU minutes and no host samples.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-06 06:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_COLUMNS = ("gpu_util_ratio_sum", "gpu_util_ratio_n", "gpus_reporting", "gpu_simulated")

#: the node's GPUs per minute, as the rollup pass sums them (sql/rollups.py)
_PER_NODE_MINUTE = """
    SELECT node_id, minute, sum(util_gpu_ratio_sum) AS gpu_util_ratio_sum,
           sum(util_gpu_ratio_n) AS gpu_util_ratio_n,
           sum(CASE WHEN util_gpu_ratio_n > 0 THEN 1 ELSE 0 END) AS gpus_reporting,
           max(CASE WHEN simulated THEN 1 ELSE 0 END) > 0 AS gpu_simulated
    FROM gpu_minutes GROUP BY node_id, minute
"""


def upgrade() -> None:
    double = sa.Float(precision=53).with_variant(sa.DOUBLE_PRECISION(), "postgresql")
    for column in (
        sa.Column("gpu_util_ratio_sum", double, nullable=True),
        sa.Column("gpu_util_ratio_n", sa.Integer, nullable=False, server_default="0"),
        sa.Column("gpus_reporting", sa.SmallInteger, nullable=False, server_default="0"),
        sa.Column("gpu_simulated", sa.Boolean, nullable=False, server_default=sa.false()),
    ):
        op.add_column("node_minutes", column)
    assignments = ", ".join(f"{c} = g.{c}" for c in _COLUMNS)
    op.execute(
        f"UPDATE node_minutes SET {assignments} FROM ({_PER_NODE_MINUTE}) AS g "
        "WHERE node_minutes.node_id = g.node_id AND node_minutes.minute = g.minute"
    )
    columns = ", ".join(_COLUMNS)
    op.execute(
        f"INSERT INTO node_minutes (node_id, minute, {columns}) "
        f"SELECT g.node_id, g.minute, {', '.join(f'g.{c}' for c in _COLUMNS)} FROM ({_PER_NODE_MINUTE}) AS g "
        "WHERE NOT EXISTS (SELECT 1 FROM node_minutes n WHERE n.node_id = g.node_id AND n.minute = g.minute)"
    )


#: a node-minute row the upgrade added: nothing but its GPU columns
_GPU_ONLY = (
    "busy_ratio_n = 0 AND iowait_ratio_n = 0 AND swap_in_bytes_per_s_n = 0 AND swap_out_bytes_per_s_n = 0 "
    "AND nic_bytes_per_s_n = 0 AND ib_bytes_per_s_n = 0 AND available_bytes_min IS NULL "
    "AND total_bytes IS NULL AND threads_per_core IS NULL"
)


def downgrade() -> None:
    op.execute(f"DELETE FROM node_minutes WHERE {_GPU_ONLY}")
    with op.batch_alter_table("node_minutes") as batch:
        for column in reversed(_COLUMNS):
            batch.drop_column(column)
