"""Shared set-up: a few labelled corpus cases stored, rolled up and classified.

The cases come from the classifier's corpus generator (``tests/classify/corpus.py``), so
the causes they get are the ones the corpus tests pin. Job 1 of them is moved to user
``bob`` / account ``chem`` / partition ``big`` for the filter tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
import sqlalchemy as sa

from gpuwatch.classify.runner import evaluate_jobs
from gpuwatch.sql import migrate
from gpuwatch.sql.engine import create_engine
from gpuwatch.sql.rollups import Rollup
from gpuwatch.sql.schema import slurm_jobs
from tests.classify import corpus

#: case name -> the cause its recent and whole-job windows lead with
CASES = {
    "idle-all-4-h200": "idle_allocation",
    "input-cpu-saturated": "input_bound",
    "noamp-h200-1": "no_mixed_precision",
    "healthy-training-h200": "healthy",
}


def built_cases(names=tuple(CASES)) -> list[corpus.Built]:
    index = {c.name: i for i, c in enumerate(corpus.cases())}
    return [corpus.build(corpus.cases()[index[n]], index[n]) for n in names]


def job_of(built: list[corpus.Built], name: str) -> str:
    return next(b.job_id for b in built if b.case.name == name)


@pytest.fixture
def classified(db_url) -> Iterator[tuple[str, list[corpus.Built]]]:
    """(database URL, the built cases), every case evaluated at its own ``now``."""
    built = built_cases()
    engine = create_engine(db_url)
    try:
        migrate.upgrade(engine)
        corpus.load(engine, tuple(built))
        last = max(b.case.now for b in built)
        Rollup(engine).roll(corpus.T0 - timedelta(minutes=1), last + timedelta(minutes=1))
        for b in built:
            evaluate_jobs(engine, [b.job_id], b.case.now)
        with engine.begin() as conn:
            conn.execute(
                slurm_jobs.update()
                .where(slurm_jobs.c.job_id == job_of(built, "input-cpu-saturated"))
                .values(user_name="bob", account="chem", partition="big")
            )
            assert conn.execute(sa.select(sa.func.count()).select_from(slurm_jobs)).scalar() == len(built)
    finally:
        engine.dispose()
    yield db_url, built
