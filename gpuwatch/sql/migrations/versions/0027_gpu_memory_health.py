"""GPU memory health: row remapping, retired pages and the PCIe replay counter per GPU sample

Eight arrays on ``gpu_sample_packs``, one element per reading as every other field: remapped
rows (correctable, uncorrectable; SMALLINT: NVML documents at most 512 remaps a card), the
remap pending and failure flags, retired pages by cause (SMALLINT: at most 64) and their
pending flag, and the PCIe replay counter (BIGINT: NVML's unsigned int). Packs stored before
hold NULL for each of their readings (not read then), so every array of a pack keeps the
pack's length. The downgrade drops the arrays.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-07 17:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

_TABLE = "gpu_sample_packs"
#: (column, element type, PostgreSQL element type), frozen as of this revision
_COLUMNS = (
    ("remapped_rows_correctable", sa.SmallInteger(), "smallint"),
    ("remapped_rows_uncorrectable", sa.SmallInteger(), "smallint"),
    ("row_remap_pending", sa.Boolean(), "boolean"),
    ("row_remap_failed", sa.Boolean(), "boolean"),
    ("retired_pages_sbe", sa.SmallInteger(), "smallint"),
    ("retired_pages_dbe", sa.SmallInteger(), "smallint"),
    ("retired_pages_pending", sa.Boolean(), "boolean"),
    ("pcie_replay_errors", sa.BigInteger(), "bigint"),
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        # on the partitioned parent: every partition gets the column
        for name, element, _ in _COLUMNS:
            op.add_column(_TABLE, sa.Column(name, postgresql.ARRAY(element, dimensions=1), nullable=True))
        nulls = ", ".join(
            f"{name} = array_fill(NULL::{pg_type}, ARRAY[cardinality(sample_ts)])"
            for name, _, pg_type in _COLUMNS
        )
        op.execute(f"UPDATE {_TABLE} SET {nulls}")
        for name, _, _ in _COLUMNS:
            op.alter_column(_TABLE, name, nullable=False)
        return
    # SQLite: a JSON list; a NOT NULL column added needs a default, which then fills each
    # pack with a NULL per reading
    for name, _, _ in _COLUMNS:
        op.execute(f"ALTER TABLE {_TABLE} ADD COLUMN {name} JSON NOT NULL DEFAULT '[]'")
    nulls = ", ".join(
        f"{name} = (SELECT json_group_array(NULL) FROM json_each({_TABLE}.sample_ts))"
        for name, _, _ in _COLUMNS
    )
    op.execute(f"UPDATE {_TABLE} SET {nulls}")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for name, _, _ in reversed(_COLUMNS):
            op.drop_column(_TABLE, name)
        return
    for name, _, _ in reversed(_COLUMNS):
        op.execute(f"ALTER TABLE {_TABLE} DROP COLUMN {name}")
