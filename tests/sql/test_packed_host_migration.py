"""Migration 0023 carries the host kinds' rows into ONE pack table (a row per node and hour holding
every kind) and back, on both databases, with real rows of every kind: every field, NULLs, JSON,
two devices and GPUs per stamp, over an hour, a kind missing from one hour."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.readings import read_samples
from gpuwatch.sql.schema import HOST_SAMPLES
from tests.sql.test_readings import _odd_host_samples

BEFORE = "0022"
#: four cycles 30 s apart, 09:59:10 .. 10:00:40: over an hour boundary
T0 = datetime(2026, 12, 1, 9, 59, 10, tzinfo=timezone.utc)


def _rows() -> dict[str, list[dict]]:
    """Table name -> its rows, two nodes' worth."""
    out: dict[str, list[dict]] = {}
    for node in (1, 2):
        for k in range(4):
            for sample in _odd_host_samples(T0 + timedelta(seconds=30 * k)):
                if sample.kind == "job" and k >= 2:  # a kind an hour's pack lacks: empty arrays
                    continue
                values = {name: getattr(sample, name) for name in type(sample).model_fields if name != "kind"}
                out.setdefault(f"{sample.kind}_samples", []).append({"node_id": node, **values})
    return out


def _key(spec, row: dict) -> tuple:
    return (row["node_id"], *(row[k.name] for k in spec.keys), row["ts"])


def _utc(ts: datetime) -> datetime:
    """A reflected SQLite DATETIME comes back naive, in UTC."""
    return ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)


def _partition(conn: sa.Connection, table: str) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(
            sa.text(
                f'CREATE TABLE "{table}_p20261201" PARTITION OF "{table}" '
                "FOR VALUES FROM ('2026-12-01 00:00:00+00') TO ('2026-12-02 00:00:00+00')"
            )
        )


def test_host_rows_become_packs_and_packs_rows_again(db_url):
    engine = create_engine(db_url)
    rows = _rows()
    try:
        migrate.upgrade(engine, BEFORE)
        with engine.begin() as conn:
            for name, table_rows in rows.items():
                table = sa.Table(name, sa.MetaData(), autoload_with=conn)
                _partition(conn, name)
                conn.execute(table.insert(), table_rows)
        migrate.upgrade(engine)
        with engine.connect() as conn:
            for spec in HOST_SAMPLES:
                sent = {_key(spec, row): row for row in rows[spec.readings]}
                got = {_key(spec, r._asdict()): r._asdict() for r in read_samples(conn, spec.kind)}
                assert got == sent, spec.kind
            table = HOST_SAMPLES[0].table
            packs = conn.execute(
                sa.select(table.c.node_id, table.c.ts, table.c.ts_last, table.c.job_job_id)
            ).all()
            # a pack per node and UTC hour holding every kind: 09:59:10-09:59:40, 10:00:10-10:00:40
            assert sorted(packs) == [
                (node, T0 + timedelta(seconds=first), T0 + timedelta(seconds=last), jobs)
                for node in (1, 2)
                for first, last, jobs in ((0, 30, ["7_1", "7_1"]), (60, 90, []))
            ]

        migrate.downgrade(engine, BEFORE)
        with engine.connect() as conn:
            for spec in HOST_SAMPLES:
                table = sa.Table(spec.readings, sa.MetaData(), autoload_with=conn)
                back = {}
                for r in conn.execute(sa.select(table)):
                    found = r._asdict() | {"ts": _utc(r.ts)}
                    back[_key(spec, found)] = found
                assert back == {_key(spec, row): row for row in rows[spec.readings]}, spec.kind
    finally:
        engine.dispose()
