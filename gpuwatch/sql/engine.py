"""Engines for PostgreSQL (psycopg 3) and SQLite from one URL."""

from __future__ import annotations

from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.engine import make_url

#: seconds libpq may take to open a connection (TCP and the server's first answer)
CONNECT_TIMEOUT_S = 10


def create_engine(url: str, *, echo: bool = False) -> sa.Engine:
    """An engine with the settings each backend needs to be a sane place for samples.

    SQLite: the parent directory is created, WAL journaling (readers never block the
    ingest writer), ``synchronous=NORMAL`` (durable across process crashes; a power cut
    may lose the last commits, never corrupt), foreign keys on, and a busy timeout so the
    CLI reading while the daemon writes waits instead of failing.
    PostgreSQL: ``pool_pre_ping`` so a restarted server costs one failed request, not a
    pool of dead connections; and libpq's ``connect_timeout`` (:data:`CONNECT_TIMEOUT_S`, unless
    the URL sets its own), because libpq has none: a database host that drops packets, or a
    server that accepts and never answers, would hold a writer thread (and every request
    waiting on it) for minutes instead of becoming a 503 the agents retry.
    """
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database
        if database and database != ":memory:":
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(url, echo=echo, connect_args={"timeout": 30})

        @sa.event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
            cursor = dbapi_conn.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

        return engine
    connect_args = {} if "connect_timeout" in parsed.query else {"connect_timeout": CONNECT_TIMEOUT_S}
    return sa.create_engine(
        url, echo=echo, pool_pre_ping=True, pool_size=10, max_overflow=10, connect_args=connect_args
    )


def missing_sqlite_file(url: str) -> Path | None:
    """The path of a SQLite URL's file when it does not exist yet; None for PostgreSQL, memory
    or an existing file."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    path = Path(parsed.database).expanduser()
    return None if path.exists() else path


def is_postgres(engine: sa.Engine | sa.Connection) -> bool:
    return engine.dialect.name == "postgresql"
