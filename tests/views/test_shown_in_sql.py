"""The verdict the database picks per job (stored, or per cause in the listing's SQL) is the one
:class:`Evaluation` picks, and the listing pages like a list."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch.classify.verdict import Cause
from gpuwatch.sql.schema import shown_verdicts, slurm_jobs, verdicts
from gpuwatch.views import LowUtilFilters, low_util_jobs, low_util_page
from gpuwatch.views.evaluations import VerdictRow, group_evaluations, latest_select, shown_select, verdicts_of

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=timezone.utc)
CAUSES = [c.value for c in Cause]
WINDOWS = ("job", "segment", "recent")


def _random_verdicts(seed: int, jobs: int) -> list[dict]:
    """Jobs with 1-6 verdicts over random windows, causes and tied confidences, some evaluated
    twice (only the newest evaluation counts)."""
    rnd = random.Random(seed)
    rows = []
    for n in range(jobs):
        for age in range(rnd.choice((1, 1, 2))):
            at = T0 - timedelta(hours=age)
            for _ in range(rnd.randint(1, 6)):
                window = rnd.choice(WINDOWS)
                rows.append(
                    {
                        "job_id": str(1000 + n),
                        "evaluated_at": at,
                        "window_kind": window,
                        "window_start": at - timedelta(minutes=60 if window == "job" else 10),
                        "window_end": at,
                        "cause": rnd.choice(CAUSES + ["healthy"] * 3),
                        "confidence": rnd.choice((0.5, 0.7, 0.9)),
                        "gpus": 4,
                        "gpu_hours": 4.0,
                        "gpu_hours_wasted": rnd.choice((0.0, 0.5, 1.5, 3.0)),
                        "mean_util_ratio": rnd.choice((None, 0.05, 0.2)),
                        "summary": "s",
                        "fix": None,
                        "evidence": {},
                        "rules_version": "t",
                    }
                )
    rnd.shuffle(rows)  # stored order (the id) is not the window order
    return rows


def _stored_picks(conn: sa.Connection) -> dict[str, VerdictRow]:
    return {v.job_id: v for v in verdicts_of(conn.execute(sa.select(shown_verdicts)))}


def _expected_picks(conn: sa.Connection) -> dict[str, VerdictRow]:
    evaluations = group_evaluations(verdicts_of(conn.execute(latest_select())))
    shown = {job: e.shown for job, e in evaluations.items()}
    return {job: replace(v, stored_evidence=None) for job, v in shown.items() if v is not None}


def test_the_stored_pick_is_what_evaluation_picks(engine) -> None:
    """``shown_verdicts`` (kept by triggers) through inserts of many statements, older
    evaluations stored after newer ones, and deletes."""
    rows = _random_verdicts(seed=7, jobs=150)
    rnd = random.Random(7)
    with engine.begin() as conn:
        while rows:
            size = rnd.choice((1, 1, 3, 40))
            conn.execute(verdicts.insert(), rows[:size])
            rows = rows[size:]
    with engine.connect() as conn:
        expected = _expected_picks(conn)
        assert _stored_picks(conn) == expected
        assert 20 < len(expected) < 150  # the data holds both wasting and healthy jobs
    with engine.begin() as conn:
        ids = conn.execute(sa.select(verdicts.c.id)).scalars().all()
        gone = rnd.sample(ids, len(ids) // 3)
        conn.execute(verdicts.delete().where(verdicts.c.id.in_(gone[:5])))
        for i in range(5, len(gone), 25):
            conn.execute(verdicts.delete().where(verdicts.c.id.in_(gone[i : i + 25])))
    with engine.connect() as conn:
        assert _stored_picks(conn) == _expected_picks(conn)


def test_shown_select_picks_what_evaluation_picks_per_cause(engine) -> None:
    with engine.begin() as conn:
        conn.execute(verdicts.insert(), _random_verdicts(seed=7, jobs=150))
    with engine.connect() as conn:
        evaluations = group_evaluations(verdicts_of(conn.execute(latest_select())))
        for cause in CAUSES:
            want = {
                job: found.verdict_id
                for job, e in evaluations.items()
                if (found := e.of_cause(cause)) is not None and found.is_waste
            }
            got = {r["job_id"]: r["id"] for r in conn.execute(shown_select(cause=cause)).mappings()}
            assert got == want, cause


def _random_slurm_jobs(seed: int, jobs: int) -> list[dict]:
    """Slurm facts for most of the jobs: running, ended, ended after ``T0``, starting after
    ``T0`` or never started, with ties in start time."""
    rnd = random.Random(seed)
    rows = []
    for n in range(jobs):
        if rnd.random() < 0.15:
            continue  # known only from its verdicts
        start = None if rnd.random() < 0.1 else T0 + timedelta(minutes=rnd.choice((-600, -300, -90, -90, 5)))
        state = rnd.choice(("RUNNING", "COMPLETED", "FAILED", None))
        end = (
            None
            if start is None or state in ("RUNNING", None)
            else start + timedelta(minutes=rnd.choice((30, 700)))
        )
        rows.append(
            {
                "job_id": str(1000 + n),
                "source": "squeue",
                "state": state,
                "start_at": start,
                "end_at": end,
                "first_seen_at": T0,
                "updated_at": T0,
            }
        )
    return rows


#: the order each sort promises, in Python over what the listing returns (ties by job id)
PROMISED = {
    "wasted": lambda j: (-(j.gpu_hours_wasted or 0.0), j.raw_job_id),
    "util": lambda j: (j.mean_util_ratio is None, j.mean_util_ratio or 0.0, j.raw_job_id),
    "duration": lambda j: (-(j.duration_s or 0), j.raw_job_id),
    "start": lambda j: (j.start_at is None, -(j.start_at.timestamp() if j.start_at else 0), j.raw_job_id),
}


def test_pages_are_slices_of_the_whole_listing(engine) -> None:
    with engine.begin() as conn:
        conn.execute(verdicts.insert(), _random_verdicts(seed=11, jobs=40))
        conn.execute(slurm_jobs.insert(), _random_slurm_jobs(seed=11, jobs=40))
    for sort in ("wasted", "util", "duration", "start"):
        whole = low_util_jobs(engine, LowUtilFilters(sort=sort, limit=None), now=T0)
        assert len({j.raw_job_id for j in whole}) == len(whole) > 7
        assert whole == sorted(whole, key=PROMISED[sort]), sort
        assert len({j.duration_s for j in whole}) > 3 and any(j.start_at is None for j in whole)
        for offset in (0, 3, len(whole) - 2):
            page = low_util_page(engine, LowUtilFilters(sort=sort, limit=5), now=T0, offset=offset)
            assert page.total == len(whole)
            assert [j.raw_job_id for j in page.jobs] == [j.raw_job_id for j in whole[offset : offset + 5]]
        beyond = low_util_page(engine, LowUtilFilters(sort=sort, limit=5), now=T0, offset=len(whole) + 10)
        assert (beyond.jobs, beyond.total) == ([], len(whole))
    empty = low_util_page(engine, LowUtilFilters(user="nobody", limit=5), now=T0)
    assert (empty.jobs, empty.total) == ([], 0)


def test_evidence_and_other_causes_only_when_asked(engine) -> None:
    with engine.begin() as conn:
        conn.execute(verdicts.insert(), _random_verdicts(seed=3, jobs=30))
        evaluations = group_evaluations(verdicts_of(conn.execute(latest_select())))
    plain = low_util_jobs(engine, LowUtilFilters(limit=None), now=T0)
    full = low_util_jobs(engine, LowUtilFilters(limit=None), now=T0, evidence=True)
    assert [j.raw_job_id for j in plain] == [j.raw_job_id for j in full]
    assert all(j.others == () for j in plain)
    for job in full:
        want = evaluations[job.raw_job_id].waste
        assert (job.verdict, *job.others) == want
    assert any(j.others for j in full)
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(verdicts)).scalar_one() > 30


def test_a_classifier_pass_stores_its_verdicts_in_a_few_statements(engine) -> None:
    """``store_evaluations`` writes a pass's verdicts with one DELETE and one INSERT per 2,000
    rows, whatever the number of jobs: each statement on ``verdicts`` runs the PostgreSQL
    statement triggers that keep ``shown_verdicts``, planned afresh each time, so a statement per
    job made a pass 8-36 ms a job. The stored picks are the same as row by row, and a pass
    stored again for the same time replaces its verdicts."""
    from gpuwatch.classify.runner import store_evaluations
    from gpuwatch.classify.verdict import Verdict

    def verdict(job: str, window: str, cause: str, confidence: float) -> Verdict:
        return Verdict(
            job_id=job,
            window_kind=window,
            window_start=T0 - timedelta(hours=1),
            window_end=T0,
            cause=Cause(cause),
            confidence=confidence,
            summary=f"job {job}: {cause}",
            fix="f",
            evidence={},
            gpus=2,
            gpu_hours=2.0,
            gpu_hours_wasted=1.0,
            mean_util_ratio=0.1,
        )

    pass_ = {
        str(n): (T0, [verdict(str(n), "job", "idle_allocation" if n % 3 else "healthy", 0.9),
                      verdict(str(n), "recent", "input_bound", 0.7)])
        for n in range(300)
    }  # fmt: skip
    statements: list[str] = []

    def seen(conn, cursor, statement, *args) -> None:
        if "verdicts" in statement and not statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement.split()[0].upper())

    sa.event.listen(engine, "before_cursor_execute", seen)
    try:
        store_evaluations(engine, pass_)
        store_evaluations(engine, pass_)  # the same pass again: replaced, not doubled
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
    assert statements == ["DELETE", "INSERT"] * 2
    with engine.connect() as conn:
        assert conn.execute(sa.select(sa.func.count()).select_from(verdicts)).scalar_one() == 600
        picks = _stored_picks(conn)
        assert picks == _expected_picks(conn) and len(picks) == 300
        assert {v.cause for v in picks.values()} == {"idle_allocation", "input_bound"}
