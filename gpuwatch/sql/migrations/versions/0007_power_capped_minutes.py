"""gpu_minutes.power_capped_samples: throttling by the power limiter alone, counted apart

A GPU at full load at its power limit reports ``sw_power_cap`` in nearly every sample (an
H200 training at its default 700 W did), so the throttled rule counts only the samples held
down by something else. Minutes rolled up before this revision count 0 such samples.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-04 17:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "gpu_minutes",
        sa.Column("power_capped_samples", sa.Integer, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    with op.batch_alter_table("gpu_minutes") as batch:
        batch.drop_column("power_capped_samples")
