"""Schema migrations through Alembic, driven from code (``gpuwatch db upgrade``).

The Alembic environment lives in ``gpuwatch/sql/migrations``; no ``alembic.ini`` is
needed at run time, so an installed wheel can migrate its own database.
"""

from __future__ import annotations

import re
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

MIGRATIONS_DIR = Path(__file__).parent / "migrations"

#: daily partitions (``<table>_pYYYYMMDD``) are made at run time, never by migrations
_PARTITION = re.compile(r"_p\d{8}")


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Alembic filter: leave run-time partitions (and their indexes) out of comparisons."""
    return not (name and type_ in {"table", "index"} and _PARTITION.search(name))


def alembic_config(engine: sa.Engine) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    command.upgrade(alembic_config(engine), revision)


def downgrade(engine: sa.Engine, revision: str) -> None:
    command.downgrade(alembic_config(engine), revision)


def current_revision(engine: sa.Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision(engine: sa.Engine) -> str | None:
    return ScriptDirectory.from_config(alembic_config(engine)).get_current_head()


def is_up_to_date(engine: sa.Engine) -> bool:
    return current_revision(engine) == head_revision(engine)
