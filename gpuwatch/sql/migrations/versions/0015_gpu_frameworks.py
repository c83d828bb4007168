"""gpu_samples.frameworks and gpu_minutes.frameworks: the deep-learning frameworks on a GPU

The agent reads which frameworks (PyTorch, JAX, TensorFlow...) a GPU's compute processes have
mapped from ``/proc/<pid>/maps`` and sends them with each GPU sample, ``[]`` when none of the
processes runs one. The per-minute rollup keeps the minute's distinct lists as text (like
``xid_codes``), so the classifier can tell a deep-learning job, whose idle tensor cores mean
"use mixed precision", from an HPC code that has no tensor-core path to switch on. Samples and
minutes from before this revision have NULL (not inspected).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06 03:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    json = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
    op.add_column("gpu_samples", sa.Column("frameworks", json, nullable=True))
    op.add_column("gpu_minutes", sa.Column("frameworks", sa.Text, nullable=True))


def downgrade() -> None:
    for table in ("gpu_minutes", "gpu_samples"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("frameworks")
