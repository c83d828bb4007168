"""MIG instances: their card and share of it in ``gpus``, graphics-engine activity per sample

A MIG instance is stored as a GPU of its own (its wire ``gpu_index`` is 1000 + 10 x card index
+ MIG slot): ``gpus`` says which card it lives on (``parent_gpu_index``, ``parent_uuid``), its
GPU and compute instance ids, and its share of the card (``card_fraction_ratio``: 1/7 for a 1g
slice; NULL for a whole GPU, which counts 1). NVML's utilization is not supported on a MIG
instance, so ``gpu_samples`` gains the GPM graphics-engine activity that stands in for it
(``gr_engine_active_ratio``, from ``nvmlGpmMigSampleGet``). Rows stored before are whole GPUs:
NULL is right for them.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-06 16:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_GPUS = (
    "parent_gpu_index",
    "parent_uuid",
    "mig_gpu_instance_id",
    "mig_compute_instance_id",
    "card_fraction_ratio",
)


def _double() -> sa.types.TypeEngine:
    return sa.Float(precision=53).with_variant(sa.DOUBLE_PRECISION(), "postgresql")


def upgrade() -> None:
    op.add_column("gpus", sa.Column("parent_gpu_index", sa.SmallInteger, nullable=True))
    op.add_column("gpus", sa.Column("parent_uuid", sa.String(96), nullable=True))
    op.add_column("gpus", sa.Column("mig_gpu_instance_id", sa.SmallInteger, nullable=True))
    op.add_column("gpus", sa.Column("mig_compute_instance_id", sa.SmallInteger, nullable=True))
    op.add_column("gpus", sa.Column("card_fraction_ratio", _double(), nullable=True))
    # on PostgreSQL a column added to the partitioned parent reaches every partition
    op.add_column("gpu_samples", sa.Column("gr_engine_active_ratio", _double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gpu_samples") as batch:
        batch.drop_column("gr_engine_active_ratio")
    with op.batch_alter_table("gpus") as batch:
        for name in reversed(_GPUS):
            batch.drop_column(name)
