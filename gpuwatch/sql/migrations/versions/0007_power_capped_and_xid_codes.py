"""gpu_minutes: power_capped_samples (the power limiter alone) and xid_codes (which XIDs)

A GPU at full load at its power limit reports ``sw_power_cap`` in nearly every sample (an
H200 training at its default 700 W did), so the throttled rule counts only the samples held
down by something else; and who owns a fault (the program or the node) depends on its XID
codes, not on their count. Minutes rolled up before this revision count 0 power-capped
samples and have no codes (their faults are taken as the node's).

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
    op.add_column("gpu_minutes", sa.Column("xid_codes", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gpu_minutes") as batch:
        batch.drop_column("xid_codes")
        batch.drop_column("power_capped_samples")
