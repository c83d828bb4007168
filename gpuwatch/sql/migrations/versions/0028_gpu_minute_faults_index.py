"""ix_gpu_minutes_faulted: the GPU-minutes with an XID or a lost sample, by minute

The node list (``gpuwatch nodes``, ``/api/v1/nodes``) names each GPU that faulted in its
window. Through the minute index alone that reads every GPU-minute of the window to keep the
few with a fault (480,000 rows for an hour of 1,000 eight-GPU nodes); a partial index holds
only the faulted ones.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-07 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    faulted = sa.text("xid_samples > 0 OR lost_samples > 0")
    op.create_index(
        "ix_gpu_minutes_faulted", "gpu_minutes", ["minute"], postgresql_where=faulted, sqlite_where=faulted
    )


def downgrade() -> None:
    op.drop_index("ix_gpu_minutes_faulted", table_name="gpu_minutes")
