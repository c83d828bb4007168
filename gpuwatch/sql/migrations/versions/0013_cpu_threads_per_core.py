"""cpu_samples and node_minutes: threads_per_core, the node's SMT siblings per core

Slurm allocates logical CPUs, and with SMT on two of them share one core: a job running one
busy process per core uses half of its allocation by the cgroup's count while it has no core
to spare. The agent reads the topology (``thread_siblings_list``) and sends it with each CPU
sample; the per-minute rollup keeps it so the classifier judges a job's CPU use against its
physical cores. Samples and minutes from before this revision have NULL (judged over logical
CPUs, as before).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    for table in ("cpu_samples", "node_minutes"):
        op.add_column(table, sa.Column("threads_per_core", sa.SmallInteger, nullable=True))


def downgrade() -> None:
    for table in ("node_minutes", "cpu_samples"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("threads_per_core")
