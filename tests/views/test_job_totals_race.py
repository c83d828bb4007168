"""A job's hours summed again while the totals pass reads them (a node's late batch re-rolled an
hour): the pass does not store the row it computed from the old sums (the re-sum deleted the
job's row before this one existed, so nothing else would); the next pass stores the new one."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from gpuwatch.sql import job_hours
from gpuwatch.sql.schema import gpu_minutes, job_totals
from gpuwatch.views import job_totals as totals_module
from gpuwatch.views.job_totals import store_job_totals
from tests.views.test_job_gpus_replaced import NOW, OLD, T0, _fill


def _util_samples(engine: sa.Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.select(job_totals.c.job_id, job_totals.c.util_samples)).all())


def test_totals_read_before_a_re_sum_are_not_stored(engine, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    _fill(engine, OLD)  # job 7 on GPUs 0 and 1, job 9 on GPU 3; hours summed to 05:00
    real = totals_module.job_advice
    late = []

    def advice_while_a_late_batch_lands(*args, **kwargs):  # type: ignore[no-untyped-def]
        if not late:  # another process, between this pass's read and its write
            late.append(True)
            g = gpu_minutes.c
            hour = (g.minute >= T0 + timedelta(hours=1), g.minute < T0 + timedelta(hours=2))
            with engine.begin() as other:
                other.execute(gpu_minutes.update().where(g.gpu_index == 0, *hour).values(util_gpu_ratio_n=7))
                job_hours.sum_hours(other, T0 + timedelta(hours=1), T0 + timedelta(hours=2))
        return real(*args, **kwargs)

    monkeypatch.setattr(totals_module, "job_advice", advice_while_a_late_batch_lands)
    assert store_job_totals(engine, now=NOW) == 1
    assert set(_util_samples(engine)) == {"9"}, "job 7's row rested on the hour before its re-sum"
    # the next pass stores job 7 from its new sums: one more sample in each of GPU 0's 60 minutes
    assert store_job_totals(engine, now=NOW) == 1
    stored = _util_samples(engine)["7"]
    with engine.begin() as conn:  # against the totals of a pass that never raced
        conn.execute(job_totals.delete())
    monkeypatch.setattr(totals_module, "job_advice", real)
    assert store_job_totals(engine, now=NOW) == 2
    fresh = _util_samples(engine)
    assert stored == fresh["7"] == (160 * 2) * 6 + 60  # 2 GPUs x 160 minutes x 6 samples, + the late ones
