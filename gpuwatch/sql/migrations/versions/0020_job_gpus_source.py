"""job_gpus.source: whether Slurm gave the job the GPU, or the agents saw the job on it

``job_gpus`` held the GPUs of Slurm's allocation only. A job Slurm gave no GPU map (a MIG
instance, whose GRES index names no card; a job that ran while the daemon was away) then had
no per-hour sums, no energy and no card share in reports, although the agents had attributed
its GPUs all along. The rollup pass now adds the GPUs the agents attributed to such a job
(``agent``); Slurm's allocation, when it comes, replaces them (``slurm``, the rows stored
before).

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-06 21:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("job_gpus", sa.Column("source", sa.String(8), nullable=False, server_default="slurm"))


def downgrade() -> None:
    op.execute("DELETE FROM job_gpus WHERE source <> 'slurm'")
    with op.batch_alter_table("job_gpus") as batch:
        batch.drop_column("source")
