"""Binary COPY from columns (``daemon/store/pg_copy.py``): values arrive as an INSERT would store them."""

from __future__ import annotations

from datetime import datetime, timezone

import psycopg
import pytest
import sqlalchemy as sa

from gpuwatch.daemon.store import pg_arrays, pg_copy
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.types import Double, Json, UtcDateTime

metadata = sa.MetaData()
probe = sa.Table(
    "copy_probe",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("ts", UtcDateTime, nullable=True),
    sa.Column("ratio", Double, nullable=True),
    sa.Column("name", sa.String(8), nullable=True),
    sa.Column("doc", Json, nullable=True),
)

T = datetime(2026, 12, 4, 5, 0, tzinfo=timezone.utc)
DOCS = [[1], [1.0], [True], ["a", "b"], ["a", "b"], None, {"nvml": "lost"}, [[1, 2]], []]


@pytest.fixture
def pg(pg_url):
    engine = create_engine(pg_url)
    metadata.create_all(engine)
    yield engine
    engine.dispose()


@pytest.mark.postgres
def test_columns_copied_are_the_values_sent(pg):
    n = len(DOCS)
    columns = [list(range(n)), [T] * (n - 1) + [None], [0.5 * i for i in range(n)], ["ok"] * n, DOCS]
    with pg.begin() as conn, conn.connection.dbapi_connection.cursor() as cur:
        pg_copy.copy_columns(cur, probe, columns)
    with pg.connect() as conn:
        rows = conn.execute(sa.select(probe).order_by(probe.c.id)).all()
        texts = conn.execute(sa.text("SELECT doc::text FROM copy_probe ORDER BY id")).scalars().all()
    assert [r.id for r in rows] == list(range(n))
    assert [r.ts for r in rows] == columns[1]
    assert [r.ratio for r in rows] == columns[2]
    assert [r.doc for r in rows] == DOCS
    # equal keys in Python, three JSON texts: the memo keeps them apart
    assert texts[:3] == ["[1]", "[1.0]", "[true]"]


@pytest.mark.postgres
def test_a_refused_row_fails_the_copy(pg):
    """An over-long string is refused by the column's own input function, never truncated."""
    refused = pytest.raises(psycopg.errors.StringDataRightTruncation)
    with refused, pg.begin() as conn, conn.connection.dbapi_connection.cursor() as cur:
        pg_copy.copy_columns(cur, probe, [[1], [T], [0.1], ["x" * 9], [None]])
    with pg.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(probe)).scalar() == 0


def test_json_list_key():
    assert pg_arrays.json_list_key([1]) != pg_arrays.json_list_key([True])
    assert pg_arrays.json_list_key([1]) != pg_arrays.json_list_key([1.0])
    assert pg_arrays.json_list_key(["a"]) == pg_arrays.json_list_key(["a"])
    assert pg_arrays.json_list_key([[1]]) is None  # unhashable content: encoded each time
    assert pg_arrays.json_list_key({"a": 1}) is None
