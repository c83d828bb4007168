"""gpu_samples and gpu_minutes: power_default_limit_watts, the limit the card boots with

A GPU at full load runs at its enforced power limit and reports the power limiter
(``sw_power_cap``) in nearly every sample; that is the card at work when the limit is its
default (``nvmlDeviceGetPowerManagementDefaultLimit``, nvidia-smi ``power.default_limit``),
and a site power cap when the enforced limit is below it. The agent sends the default with
each GPU sample and the per-minute rollup keeps it, so the classifier can tell the two
apart. Samples and minutes from before this revision have NULL (power caps not judged).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06 02:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_TABLES = ("gpu_samples", "gpu_minutes")


def upgrade() -> None:
    double = sa.Float(precision=53).with_variant(sa.DOUBLE_PRECISION(), "postgresql")
    for table in _TABLES:
        op.add_column(table, sa.Column("power_default_limit_watts", double, nullable=True))


def downgrade() -> None:
    for table in reversed(_TABLES):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("power_default_limit_watts")
