"""Alembic environment: the engine comes from ``gpuwatch.sql.migrate`` via config attributes."""

from __future__ import annotations

from alembic import context

from gpuwatch.sql.migrate import include_name
from gpuwatch.sql.schema import metadata

engine = context.config.attributes["engine"]

with engine.begin() as connection:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_name=include_name,
    )
    context.run_migrations()
