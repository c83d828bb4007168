"""Shared fixtures: a database per test on SQLite and on the real PostgreSQL.

PostgreSQL is the server at 127.0.0.1:5432 (user postgres, trust auth) unless
``GPUWATCH_TEST_PG`` names another admin URL. Each test that asks for it gets a fresh
throwaway database, dropped afterwards. Without a server the PostgreSQL cases skip
locally, and fail in CI (``CI=true``), where a skip would hide a broken set-up.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import pytest
import sqlalchemy as sa

from gpuwatch.sql.engine import create_engine

PG_ADMIN_URL = os.environ.get("GPUWATCH_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
IN_CI = os.environ.get("CI", "").lower() == "true"


def _pg_available() -> str | None:
    try:
        engine = sa.create_engine(PG_ADMIN_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}".splitlines()[0]
    return None


_PG_PROBLEM = _pg_available()


def missing(message: str, must_run: str) -> NoReturn:
    """Skip a test whose service or tool is missing; with ``CI=true`` fail it, since
    ``must_run`` must run there."""
    if IN_CI:
        pytest.fail(f"{message} (CI=true: {must_run} must run)")
    pytest.skip(message)


def require_postgres() -> None:
    if _PG_PROBLEM is not None:
        missing(f"PostgreSQL not reachable at {PG_ADMIN_URL}: {_PG_PROBLEM}", "PostgreSQL tests")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """URL of a fresh, empty PostgreSQL database, dropped after the test."""
    require_postgres()
    with fresh_pg_database() as url:
        yield url


@contextmanager
def fresh_pg_database() -> Iterator[str]:
    """URL of a fresh, empty PostgreSQL database, dropped on leaving."""
    name = f"gpuwatch_test_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'gpuwatch.db'}"


@pytest.fixture
def other_db_url(db_url, tmp_path) -> Iterator[str]:
    """A second fresh, empty database of ``db_url``'s kind, for a test that compares two stores."""
    if db_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'other.db'}"
        return
    with fresh_pg_database() as url:
        yield url


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def db_url(request) -> str:
    """Each test using this runs once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return request.getfixturevalue("sqlite_url")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def pg_engine(pg_url) -> Iterator[sa.Engine]:
    """A migrated engine on a fresh PostgreSQL database (tests of PostgreSQL-only paths)."""
    with migrated_engine(pg_url) as eng:
        yield eng


@pytest.fixture
def engine(db_url) -> Iterator[sa.Engine]:
    with migrated_engine(db_url) as eng:
        yield eng


@pytest.fixture
def migrated(db_url) -> Iterator[tuple[str, sa.Engine]]:
    """(URL, migrated engine) of each database, for tests that hand the URL to a process or CLI."""
    with migrated_engine(db_url) as engine:
        yield db_url, engine


@contextmanager
def migrated_engine(url: str) -> Iterator[sa.Engine]:
    """An engine on ``url`` with the schema at head, disposed on leaving."""
    from gpuwatch.sql import migrate

    eng = create_engine(url)
    migrate.upgrade(eng)
    yield eng
    eng.dispose()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
