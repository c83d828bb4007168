"""job_hours: each Slurm job's GPU- and cgroup-minutes summed per hour, for reports over weeks

A month of a 1,000-node cluster is 345 million GPU-minutes; ``gpuwatch report`` reads whole
hours from this table instead (a row per job-hour) and only the hours not summed yet from the
minute tables. Filled by the rollup pass (``sql/job_hours.py``); rollups made before this
revision are summed when re-rolled (``gpuwatch db`` does not backfill them).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-05 12:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from gpuwatch.sql.types import UtcDateTime

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    double = sa.Float(precision=53).with_variant(sa.DOUBLE_PRECISION(), "postgresql")

    def zero(name: str) -> sa.Column:
        return sa.Column(name, sa.Integer, nullable=False, server_default="0")

    op.create_table(
        "job_hours",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("hour", UtcDateTime(timezone=True), primary_key=True),
        zero("gpu_minutes"),
        sa.Column("util_gpu_ratio_sum", double, nullable=True),
        zero("util_gpu_ratio_n"),
        sa.Column("energy_joules", double, nullable=True),
        zero("energy_power_samples"),
        zero("energy_samples"),
        sa.Column("cpu_used_cores", double, nullable=True),
        sa.Column("cpu_allocated_cores", double, nullable=True),
        sa.Column("memory_used_bytes_max", sa.BigInteger, nullable=True),
        sa.Column("memory_limit_bytes", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_job_hours_hour", "job_hours", ["hour"])


def downgrade() -> None:
    op.drop_index("ix_job_hours_hour", table_name="job_hours")
    op.drop_table("job_hours")
