"""Make the real database refuse a batch: a trigger on ``ingested_batches`` that raises.

A batch can pass every check the daemon makes and still be refused by the database (a
constraint added by an admin, a schema a replica does not know). These triggers make that
happen on purpose, on SQLite and on PostgreSQL, through the driver's own error.
"""

from __future__ import annotations

import sqlalchemy as sa


def refuse_seq(engine: sa.Engine, seq: int) -> None:
    """Every batch with this ``seq`` is refused (a constraint violation), every time."""
    with engine.begin() as conn:
        if conn.dialect.name == "sqlite":
            conn.execute(
                sa.text(
                    f"CREATE TRIGGER refuse BEFORE INSERT ON ingested_batches WHEN NEW.seq = {seq} "
                    f"BEGIN SELECT RAISE(ABORT, 'poison batch seq {seq}'); END"
                )
            )
            return
        _pg_trigger(conn, f"NEW.seq = {seq}")


def refuse_first_insert(engine: sa.Engine) -> None:
    """PostgreSQL only: the first batch insert fails, later ones pass (a transient race).

    ``nextval('refusals')`` counts the tries.
    """
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE SEQUENCE refusals"))
        _pg_trigger(conn, "nextval('refusals') = 1")


def _pg_trigger(conn: sa.Connection, condition: str) -> None:
    conn.execute(
        sa.text(
            f"""CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
              IF {condition} THEN
                RAISE EXCEPTION 'poison batch seq %', NEW.seq USING ERRCODE = 'check_violation';
              END IF;
              RETURN NEW;
            END $$"""
        )
    )
    conn.execute(
        sa.text(
            "CREATE TRIGGER refuse BEFORE INSERT ON ingested_batches FOR EACH ROW EXECUTE FUNCTION refuse()"
        )
    )
