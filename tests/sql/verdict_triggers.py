"""What the tests of the statement-level triggers on ``verdicts`` share (migrations 0026, 0030):
the catalog queries that say which triggers fire and how they read, and a classifier pass."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import datetime, timedelta

from gpuwatch.classify.verdict import Cause, Verdict

WINDOWS = ("job", "segment", "recent")

#: the triggers of each (event, level) on ``verdicts``, in the order PostgreSQL fires them (that
#: of their names); tgtype bit 0: row-level, bit 2: insert, bit 3: delete
TRIGGERS = """SELECT tgname FROM pg_trigger
    WHERE tgrelid = 'verdicts'::regclass AND NOT tgisinternal
      AND (tgtype & 1 <> 0) = :row AND tgtype & :event <> 0
    ORDER BY tgname"""
INSERT, DELETE = 4, 8


def definitions(prefix: str) -> str:
    """How the triggers on ``verdicts`` named ``prefix``… and their functions read in the catalog."""
    return f"""SELECT t.tgname, pg_get_triggerdef(t.oid), pg_get_functiondef(t.tgfoid)
    FROM pg_trigger t WHERE t.tgrelid = 'verdicts'::regclass AND t.tgname LIKE '{prefix}%'
    ORDER BY t.tgname"""


def classifier_pass(
    at: datetime,
    jobs: range,
    seed: int,
    *,
    causes: Sequence[Cause] = (Cause.HEALTHY, Cause.IDLE_ALLOCATION, Cause.INPUT_BOUND),
    confidences: Sequence[float] = (0.9,),
    wasted: Sequence[float | None] = (None, 1.0),
) -> dict[str, tuple[datetime, list[Verdict]]]:
    """A pass as ``store_evaluations`` takes it: 3 verdicts a job (one per window), each cause,
    confidence and wasted GPU-hours drawn from the given choices (repeat one to weight it)."""
    rnd = random.Random(seed)

    def verdict(job: str, window: str) -> Verdict:
        cause = rnd.choice(causes)
        return Verdict(
            job_id=job, window_kind=window, window_start=at - timedelta(hours=1), window_end=at,
            cause=cause, confidence=rnd.choice(confidences), summary=f"{job} {cause.value}", fix="f",
            evidence={}, gpus=2, gpu_hours=2.0, gpu_hours_wasted=rnd.choice(wasted), mean_util_ratio=0.1,
        )  # fmt: skip

    return {f"j{n}": (at, [verdict(f"j{n}", w) for w in WINDOWS]) for n in jobs}
