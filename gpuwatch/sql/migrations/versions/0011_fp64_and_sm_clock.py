"""gpu_minutes: FP64 pipe activity and the SM clock as a share of its maximum

Two signals the samples carry that the classifier needs per window: FP64 pipe activity (GPM
``NVML_GPM_METRIC_FP64_UTIL``; Hopper and newer), which tells a double-precision HPC code
from a deep-learning job that left its tensor cores idle, and the SM clock over the card's
maximum SM clock (``nvmlDeviceGetClockInfo`` / ``nvmlDeviceGetMaxClockInfo``), which measures
what a throttled GPU lost. Each is kept as ``<name>_sum`` + ``<name>_n`` like the other
means. Minutes rolled up before this revision have n = 0 (the signal reads as missing):
re-roll them to fill it in.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-05 16:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_NAMES = ("fp64_active_ratio", "sm_clock_ratio")


def upgrade() -> None:
    double = sa.Float(precision=53).with_variant(sa.DOUBLE_PRECISION(), "postgresql")
    for name in _NAMES:
        op.add_column("gpu_minutes", sa.Column(f"{name}_sum", double, nullable=True))
        op.add_column("gpu_minutes", sa.Column(f"{name}_n", sa.Integer, nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("gpu_minutes") as batch:
        for name in reversed(_NAMES):
            batch.drop_column(f"{name}_n")
            batch.drop_column(f"{name}_sum")
