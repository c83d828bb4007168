"""Schema migrations through Alembic, driven from code (``gpuwatch db upgrade``).

The Alembic environment lives in ``gpuwatch/sql/migrations``; no ``alembic.ini`` is
needed at run time, so an installed wheel can migrate its own database. Every CLI command
checks that the schema is current before it reads: that check reads the revisions from the
migration files and the database's ``alembic_version`` row itself, because importing Alembic
costs a tenth of a second of each command's start.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import sqlalchemy as sa

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
#: ``revision = "0016"`` and ``down_revision = "0015"`` lines of a migration file
_REVISION_LINE = re.compile(r'^(revision|down_revision)\s*=\s*"([^"]+)"', re.MULTILINE)

#: daily partitions (``<table>_pYYYYMMDD``) are made at run time, never by migrations
_PARTITION = re.compile(r"_p\d{8}")


def earlier_revision(file: str) -> ModuleType:
    """The migration in ``versions/file``, loaded as a module: a later migration that replaces
    an earlier one's statements (triggers, functions) reads them from there, so each text lives
    in one file and a downgrade restores it as written."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        f"gpuwatch_migration_{file[:4]}", MIGRATIONS_DIR / "versions" / file
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def include_name(name: str | None, type_: str, parent_names: object) -> bool:
    """Alembic filter: leave run-time partitions (and their indexes) out of comparisons."""
    return not (name and type_ in {"table", "index"} and _PARTITION.search(name))


def alembic_config(engine: sa.Engine) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["engine"] = engine
    return cfg


def upgrade(engine: sa.Engine, revision: str = "head") -> None:
    from alembic import command

    command.upgrade(alembic_config(engine), revision)


def downgrade(engine: sa.Engine, revision: str) -> None:
    from alembic import command

    command.downgrade(alembic_config(engine), revision)


def current_revision(engine: sa.Engine) -> str | None:
    """The database's revision (``alembic_version``), None before the first migration."""
    with engine.connect() as conn:
        if not sa.inspect(conn).has_table("alembic_version"):
            return None
        return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


def head_revision(engine: sa.Engine | None = None) -> str:
    """The newest revision: the one no migration file names as its ``down_revision``."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (MIGRATIONS_DIR / "versions").glob("*.py"):
        for kind, value in _REVISION_LINE.findall(path.read_text(encoding="utf-8")):
            (revisions if kind == "revision" else parents).add(value)
    heads = revisions - parents
    if len(heads) != 1:
        raise RuntimeError(f"migrations have {len(heads)} heads, not one: {sorted(heads)}")
    return heads.pop()


def is_up_to_date(engine: sa.Engine) -> bool:
    return current_revision(engine) == head_revision()
