"""gpu_minutes and gpu_hours count memory repairs: pending a GPU reset, or failed

A card's memory health (``gpu_sample_packs``, revision 0027) is read per sample; the node
list, the overview, the node page and the job page read rolled-up minutes and hours. Each
minute counts the samples whose card had a row remap or a page retirement waiting for a GPU
reset (``reset_pending_samples``) and those whose card had a row remap fail
(``remap_failed_samples``); an hour sums its minutes'. Both are faults, so the partial index of
faulted GPU-minutes (revision 0028) takes them in. Minutes rolled up before this read 0: the
samples of the days before carried no memory health.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-07 17:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

_COLUMNS = ("reset_pending_samples", "remap_failed_samples")
_BEFORE = "xid_samples > 0 OR lost_samples > 0"
_AFTER = f"{_BEFORE} OR reset_pending_samples > 0 OR remap_failed_samples > 0"


def _faulted_index(predicate: str) -> None:
    op.drop_index("ix_gpu_minutes_faulted", table_name="gpu_minutes")
    where = sa.text(predicate)
    op.create_index(
        "ix_gpu_minutes_faulted", "gpu_minutes", ["minute"], postgresql_where=where, sqlite_where=where
    )


def upgrade() -> None:
    for table in ("gpu_minutes", "gpu_hours"):
        for name in _COLUMNS:
            op.add_column(table, sa.Column(name, sa.Integer, nullable=False, server_default="0"))
    _faulted_index(_AFTER)


def downgrade() -> None:
    _faulted_index(_BEFORE)
    for table in ("gpu_minutes", "gpu_hours"):
        with op.batch_alter_table(table) as batch:
            for name in _COLUMNS:
                batch.drop_column(name)
