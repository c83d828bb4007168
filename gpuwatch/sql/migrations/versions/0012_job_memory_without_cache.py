"""job_minutes: memory_anon_bytes_max, a job's memory without its page cache

A job cgroup's memory counts the page cache of every file it read. The kernel reclaims that
cache before anything else, so a job that streams a dataset sits at its limit without being
short of memory; what it cannot give back is the rest (anonymous memory, kernel memory). The
classifier judges a job "at its limit" on this column. Minutes rolled up before this revision
have NULL here and are judged on memory used, cache included, as before.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-05 17:35:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("job_minutes", sa.Column("memory_anon_bytes_max", sa.BigInteger, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_minutes") as batch:
        batch.drop_column("memory_anon_bytes_max")
