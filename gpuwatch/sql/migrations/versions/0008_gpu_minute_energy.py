"""gpu_minutes: energy_joules (what the GPU used in the minute) and energy_power_samples

Energy comes from the driver's monotonic total-energy counter (NVML
``nvmlDeviceGetTotalEnergyConsumption``, amdsmi's energy accumulator): the difference between a
sample and the one before it. Where the counter cannot say — absent, reset (a driver reload),
or the sample before it too far back — the sample's mean power times its interval stands in,
and ``energy_power_samples`` counts those samples so reports can say how much was estimated.
Minutes rolled up before this revision have no energy (NULL): re-roll them to fill it in.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05 08:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    double = sa.Float(precision=53).with_variant(sa.DOUBLE_PRECISION(), "postgresql")
    op.add_column("gpu_minutes", sa.Column("energy_joules", double, nullable=True))
    op.add_column(
        "gpu_minutes",
        sa.Column("energy_power_samples", sa.Integer, nullable=False, server_default="0"),
    )


def downgrade() -> None:
    with op.batch_alter_table("gpu_minutes") as batch:
        batch.drop_column("energy_power_samples")
        batch.drop_column("energy_joules")
