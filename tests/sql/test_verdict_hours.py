"""Each hour's verdict picks (``verdict_hours``), kept by triggers on ``verdicts`` on both
databases, and the waste of a period read through them: equal to picking over the verdicts
themselves, for periods on and off the hour, after inserts in any order, ties, deletes of
picked rows and evaluations stored anew, and after each statement of any shape the same rows as
the picks computed in Python from the verdicts; filled from stored verdicts by the migration."""

from __future__ import annotations

import random
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.schema import verdict_hours, verdicts
from gpuwatch.views import waste_in_period

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
CAUSES = ("healthy", "idle_allocation", "input_bound", "small_work")
KINDS = ("job", "recent", "segment")


def _verdict(job: str, at: datetime, kind: str, cause: str, wasted: float | None, fix: str = "f") -> dict:
    return {
        "job_id": job, "evaluated_at": at, "window_kind": kind,
        "window_start": at - timedelta(minutes=10), "window_end": at, "cause": cause, "confidence": 0.8,
        "gpu_hours_wasted": wasted, "summary": "s", "fix": fix, "evidence": {}, "rules_version": "t",
    }  # fmt: skip


def _random_verdicts(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        at = T0 + timedelta(minutes=rng.randrange(0, 5 * 60, 2))  # five hours, every 2 minutes
        wasted = rng.choice([None, 0.0, 0.25, 0.5, 0.5, 1.0, rng.random()])  # ties on purpose
        rows.append(
            _verdict(f"j{rng.randrange(6)}", at, rng.choice(KINDS), rng.choice(CAUSES), wasted, f"fix {i}")
        )
    return rows


def _expected(rows: list[dict], start: datetime, end: datetime, job_ids: set[str] | None = None) -> dict:
    """The rule, over the verdicts: per (job, cause) the latest whole-job verdict of the period,
    else the recent/segment one with most waste; the newest row (highest id) on ties."""
    best: dict[tuple[str, str], tuple] = {}
    for r in rows:
        if (
            not (start <= r["evaluated_at"] < end)
            or r["cause"] == "healthy"
            or not (r["gpu_hours_wasted"] or 0) > 0
        ):
            continue
        if job_ids is not None and r["job_id"] not in job_ids:
            continue
        whole = r["window_kind"] == "job"
        rank = (whole, (r["evaluated_at"] if whole else r["gpu_hours_wasted"]), r["id"])
        key = (r["job_id"], r["cause"])
        if key not in best or rank > best[key][0]:
            best[key] = (rank, r["gpu_hours_wasted"], r["fix"])
    return {key: (wasted, fix) for key, (_, wasted, fix) in best.items()}


def _got(engine: sa.Engine, start: datetime, end: datetime, job_ids: list[str] | None = None) -> dict:
    return {
        (w.job_id, w.cause): (w.gpu_hours_wasted, w.fix) for w in waste_in_period(engine, start, end, job_ids)
    }


def picks_by_rule(rows: Iterable) -> dict[tuple, tuple]:
    """The rows ``verdict_hours`` holds by 0019's rule, computed from the verdicts: per (job, UTC
    hour, cause) of the verdicts naming waste, the latest whole-job one and the recent/segment
    one with the most wasted GPU-hours, the highest id on ties (whole_at, whole_id,
    whole_wasted, recent_id, recent_wasted)."""
    picks: dict[tuple, list] = {}
    for r in rows:
        if r["cause"] == "healthy" or not (r["gpu_hours_wasted"] or 0) > 0:
            continue
        at, wasted = r["evaluated_at"], r["gpu_hours_wasted"]
        hour = at.astimezone(timezone.utc).replace(minute=0, second=0, microsecond=0)
        key = (r["job_id"], hour, r["cause"])
        pick = picks.setdefault(key, [None] * 5)
        if r["window_kind"] == "job":
            if pick[1] is None or (at, r["id"]) > (pick[0], pick[1]):
                pick[0:3] = [at, r["id"], wasted]
        elif pick[3] is None or (wasted, r["id"]) > (pick[4], pick[3]):
            pick[3:5] = [r["id"], wasted]
    return {key: tuple(pick) for key, pick in picks.items()}


def stored_picks(conn: sa.Connection) -> dict[tuple, tuple]:
    """``verdict_hours`` as :func:`picks_by_rule` writes it."""
    return {
        (r.job_id, r.hour, r.cause): (r.whole_at, r.whole_id, r.whole_wasted, r.recent_id, r.recent_wasted)
        for r in conn.execute(sa.select(verdict_hours))
    }


def rule_over_verdicts(conn: sa.Connection) -> dict[tuple, tuple]:
    return picks_by_rule(conn.execute(sa.select(verdicts)).mappings())


def _stored(engine: sa.Engine) -> list[dict]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(sa.select(verdicts).order_by(verdicts.c.id)).mappings()]


def _periods(rng: random.Random) -> list[tuple[datetime, datetime]]:
    on_hour = [(T0, T0 + timedelta(hours=5)), (T0 + timedelta(hours=1), T0 + timedelta(hours=3))]
    inside = [(T0 + timedelta(minutes=10), T0 + timedelta(minutes=50))]
    ragged = []
    for _ in range(8):
        a, b = sorted(rng.sample(range(0, 5 * 60 + 1), 2))
        ragged.append((T0 + timedelta(minutes=a), T0 + timedelta(minutes=b)))
    return on_hour + inside + ragged


def test_periods_read_through_the_hours_equal_the_pick_over_the_verdicts(engine) -> None:  # type: ignore[no-untyped-def]
    rng = random.Random(19)
    rows = _random_verdicts(rng, 400)
    with engine.begin() as conn:
        for i in range(0, len(rows), 50):  # batches in random time order, as import and the classifier write
            conn.execute(verdicts.insert(), rows[i : i + 50])
    stored = _stored(engine)
    assert len(stored) == 400
    for start, end in _periods(rng):
        assert _got(engine, start, end) == _expected(stored, start, end), (start, end)
    some = {"j1", "j4"}
    assert _got(engine, T0 + timedelta(minutes=30), T0 + timedelta(hours=4), sorted(some)) == _expected(
        stored, T0 + timedelta(minutes=30), T0 + timedelta(hours=4), some
    )

    with engine.begin() as conn:  # delete picked rows (and others): the hours pick again
        picked = conn.execute(sa.select(verdict_hours.c.whole_id, verdict_hours.c.recent_id)).all()
        gone = {i for pair in picked for i in pair if i is not None and rng.random() < 0.5}
        gone |= {r["id"] for r in stored if rng.random() < 0.2}
        conn.execute(verdicts.delete().where(verdicts.c.id.in_(sorted(gone))))
        # an evaluation stored anew: its rows deleted and written again (new ids), as the runner does
        again = stored[-1]
        conn.execute(
            verdicts.delete().where(
                verdicts.c.job_id == again["job_id"], verdicts.c.evaluated_at == again["evaluated_at"]
            )
        )
        conn.execute(
            verdicts.insert(), [_verdict(again["job_id"], again["evaluated_at"], "job", "input_bound", 9.0)]
        )
        conn.execute(verdicts.delete().where(verdicts.c.job_id == "j0"))  # a whole job's verdicts
    stored = _stored(engine)
    assert not any(r["job_id"] == "j0" for r in stored)
    for start, end in _periods(rng):
        assert _got(engine, start, end) == _expected(stored, start, end), (start, end)


def test_healthy_and_wasteless_verdicts_leave_no_row(engine) -> None:  # type: ignore[no-untyped-def]
    with engine.begin() as conn:
        conn.execute(
            verdicts.insert(),
            [
                _verdict("a", T0, "job", "healthy", 2.0),
                _verdict("a", T0, "recent", "input_bound", 0.0),
                _verdict("a", T0, "recent", "small_work", None),
            ],
        )
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(verdict_hours)).scalar_one() == 0


def test_the_hours_hold_utc_hours_whatever_the_session_time_zone(pg_url) -> None:  # type: ignore[no-untyped-def]
    """A verdict at 12:40 UTC belongs to the 12:00 UTC hour even where the session's zone is 30
    minutes off UTC (PostgreSQL truncates ``timestamptz`` in the session's zone)."""
    engine = create_engine(pg_url + "?options=-c%20timezone%3DAsia%2FKolkata")
    try:
        migrate.upgrade(engine)
        with engine.begin() as conn:
            conn.execute(
                verdicts.insert(), [_verdict("a", T0 + timedelta(minutes=40), "recent", "input_bound", 1.0)]
            )
        with engine.connect() as conn:
            assert conn.execute(sa.select(verdict_hours.c.hour)).scalar_one() == T0
    finally:
        engine.dispose()


def test_the_migration_fills_it_from_stored_verdicts(db_url) -> None:  # type: ignore[no-untyped-def]
    engine = create_engine(db_url)
    try:
        migrate.upgrade(engine)
        rng = random.Random(7)
        with engine.begin() as conn:
            conn.execute(verdicts.insert(), _random_verdicts(rng, 200))
        with engine.connect() as conn:
            kept = sorted(tuple(r) for r in conn.execute(sa.select(verdict_hours)).all())
        migrate.downgrade(engine, "0018")
        assert "verdict_hours" not in sa.inspect(engine).get_table_names()
        migrate.upgrade(engine)  # filled again from the verdicts: the same rows the triggers kept
        with engine.connect() as conn:
            assert sorted(tuple(r) for r in conn.execute(sa.select(verdict_hours)).all()) == kept
        stored = _stored(engine)
        start, end = T0 + timedelta(minutes=17), T0 + timedelta(hours=4, minutes=3)
        assert _got(engine, start, end) == _expected(stored, start, end)
    finally:
        engine.dispose()


def test_a_period_that_ends_now_reads_its_last_hour_through_the_picks(engine, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A report that ends now (no verdict at or after its end) takes the current hour's picks whole;
    a verdict at its very end, or one stored at or after it while the picks are read, is left out
    as the pick over the verdicts leaves it out."""
    from gpuwatch.views import waste

    rng = random.Random(23)
    now = T0 + timedelta(hours=4, minutes=37)
    rows = [r for r in _random_verdicts(rng, 400) if r["evaluated_at"] < now]
    with engine.begin() as conn:
        conn.execute(verdicts.insert(), rows)
    reads = []
    monkeypatch.setattr(waste, "_verdict_picks", _counted(waste._verdict_picks, reads))
    stored = _stored(engine)
    for start in (T0, T0 + timedelta(hours=2), T0 + timedelta(minutes=10)):
        assert _got(engine, start, now) == _expected(stored, start, now), start
    assert [(s, e) for s, e in reads if e == now] == []  # the last hour came from the picks
    # the largest waste of all, at the period's end: not in it
    with engine.begin() as conn:
        conn.execute(verdicts.insert(), [_verdict("j1", now, "job", "input_bound", 50.0)])
        conn.execute(verdicts.insert(), [_verdict("j2", now, "recent", "input_bound", 50.0)])
    stored = _stored(engine)
    assert _got(engine, T0, now) == _expected(stored, T0, now)
    assert ("j1", "input_bound") not in _expected(stored, now - timedelta(minutes=1), now)

    # stored while the hours are read: at the next check the edge is read from the verdicts instead
    with engine.begin() as conn:
        conn.execute(verdicts.delete().where(verdicts.c.evaluated_at >= now))
    stored = _stored(engine)
    hour_picks = waste._hour_picks

    def meanwhile(conn, first, last, job_ids):  # type: ignore[no-untyped-def]
        with engine.begin() as other:
            other.execute(
                verdicts.insert(), [_verdict("j3", now + timedelta(minutes=1), "job", "small_work", 50.0)]
            )
        return hour_picks(conn, first, last, job_ids)

    monkeypatch.setattr(waste, "_hour_picks", meanwhile)
    assert _got(engine, T0, now) == _expected(stored, T0, now)


def _counted(fn, reads: list) -> object:  # type: ignore[no-untyped-def]
    def read(conn, start, end, job_ids):  # type: ignore[no-untyped-def]
        reads.append((start, end))
        return fn(conn, start, end, job_ids)

    return read


def _mixed_rows(rng: random.Random, n: int) -> list[dict]:
    """``n`` verdicts of a few jobs over three hours, on few times and amounts: ties on both picks."""
    rows = []
    for _ in range(n):
        at = T0 + timedelta(minutes=rng.choice((0, 2, 30, 58, 60, 61, 90, 119, 120, 150)))
        wasted = rng.choice((None, 0.0, 0.5, 0.5, 1.0, 2.0))
        rows.append(_verdict(f"j{rng.randrange(4)}", at, rng.choice(KINDS), rng.choice(CAUSES), wasted))
    return rows


def random_statement(conn: sa.Connection, rng: random.Random) -> str:
    """One statement on ``verdicts`` of a random shape; returns its shape."""
    ids = conn.execute(sa.select(verdicts.c.id)).scalars().all()
    h = verdict_hours.c
    picked = {i for pair in conn.execute(sa.select(h.whole_id, h.recent_id)) for i in pair if i is not None}
    shape = rng.choice(("insert", "insert", "insert", "delete picked", "delete unpicked", "delete mixed",
                        "delete evaluation", "delete job hour"))  # fmt: skip
    if shape == "insert" or not ids:
        conn.execute(verdicts.insert().values(_mixed_rows(rng, rng.choice((1, 3, 12, 40)))))
        return "insert"
    if shape == "delete evaluation":  # an evaluation stored anew first drops its rows, all windows
        job, at = conn.execute(sa.select(verdicts.c.job_id, verdicts.c.evaluated_at).where(
            verdicts.c.id == rng.choice(ids))).one()  # fmt: skip
        gone = verdicts.delete().where(verdicts.c.job_id == job, verdicts.c.evaluated_at == at)
    elif shape == "delete job hour":
        job, start = f"j{rng.randrange(4)}", T0 + timedelta(hours=rng.randrange(3))
        when, end = verdicts.c.evaluated_at, start + timedelta(hours=1)
        gone = verdicts.delete().where(verdicts.c.job_id == job, when >= start, when < end)
    else:
        pools = {"delete picked": picked, "delete unpicked": set(ids) - picked, "delete mixed": set(ids)}
        pool = pools[shape]
        chosen = sorted(i for i in pool if rng.random() < 0.3)
        gone = verdicts.delete().where(verdicts.c.id.in_(chosen))
    conn.execute(gone)
    return shape


def test_after_each_statement_the_hours_hold_the_picks_computed_from_the_verdicts(engine) -> None:  # type: ignore[no-untyped-def]
    """Statements of mixed shapes, one at a time and several to a transaction: multi-row inserts
    of several jobs, hours and causes with ties, deletes of picked and unpicked rows, of an
    evaluation's rows, of a job's hour. After each, ``verdict_hours`` holds exactly the rule's
    rows (PostgreSQL: statement triggers since 0030; SQLite: row triggers)."""
    rng = random.Random(30)
    shapes: set[str] = set()
    for _ in range(60):
        with engine.begin() as conn:
            for _ in range(rng.choice((1, 1, 3))):
                shapes.add(random_statement(conn, rng))
                assert stored_picks(conn) == rule_over_verdicts(conn), shapes
    assert len(shapes) == 6
    with engine.connect() as conn:
        assert len(stored_picks(conn)) > 10
