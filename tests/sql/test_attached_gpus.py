"""A job Slurm gave no GPU map (a MIG instance: its GRES names no card) gets the GPUs the agents
attributed to it in ``job_gpus`` from the rollup pass, so its hours are summed and the report
weighs the instance as its share of the card; Slurm's map, when it comes, replaces them; the
classifier and the job list still tell Slurm's GPUs from the agents'. Both databases."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from gpuwatch import wire
from gpuwatch.classify.features import load_scope
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql.jobs import replace_job_gpus
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.rollups import Rollup
from gpuwatch.sql.schema import job_gpus, job_hours, slurm_jobs
from gpuwatch.views import GroupBy, usage_report
from gpuwatch.views.job import job_view
from tests import factories

M0 = factories.T0.replace(hour=12, minute=0, second=0)
HOUR = timedelta(hours=1)


def _job(job_id: str, user: str) -> dict:
    return {
        "job_id": job_id, "source": "test", "user_name": user, "account": "lab", "partition": "gpu",
        "state": "RUNNING", "start_at": M0, "end_at": None, "gpus": 1, "first_seen_at": M0, "updated_at": M0,
    }  # fmt: skip


def _hour_of_samples() -> wire.Batch:
    """An hour, a sample a minute: whole GPU 0 held by "whole" (Slurm's map), a 2g instance of
    seven on card 1 held by "mig" (attributed by the prolog's MIG file only), and one stray
    attribution of "whole" to GPU 3, which Slurm's map overrides."""
    samples: list = []
    for k in range(60):
        ts = M0 + timedelta(minutes=k, seconds=5)
        samples.append(factories.gpu_sample(ts, 0, util=0.9, processes=[]))
        mig = {"uuid": "MIG-00000000-1111-2222-3333-444444444444", "parent_gpu_index": 1,
               "card_fraction_ratio": 2 / 7, "gr_engine_active_ratio": 0.0}  # fmt: skip
        samples.append(
            factories.gpu_sample(
                ts, 1011, util=0.0, util_gpu_ratio=None, util_memory_ratio=None, processes=[], **mig
            )
        )
        samples += [
            wire.AttributionSample(ts=ts, gpu_index=0, job_id="whole", source="prolog"),
            wire.AttributionSample(ts=ts, gpu_index=1011, job_id="mig", source="prolog"),
            wire.AttributionSample(ts=ts, gpu_index=3, job_id="whole", source="process"),
        ]
    return wire.Batch(node="n1", agent_version="t", samples=samples)


def _rows(engine: sa.Engine) -> set[tuple]:
    with engine.connect() as conn:
        return {tuple(r) for r in conn.execute(sa.select(job_gpus)).all()}


def test_the_rollup_attaches_attributed_gpus_to_jobs_slurm_gave_none(engine) -> None:  # type: ignore[no-untyped-def]
    create_token(engine, "n1")
    with engine.connect() as conn:
        node_id = get_node(conn, "n1").id
    with engine.begin() as conn:
        conn.execute(slurm_jobs.insert(), [_job("mig", "mia"), _job("whole", "wes")])
        replace_job_gpus(conn, {"whole": {"n1": [0]}})
    BatchStore(engine).store(node_id, _hour_of_samples())
    Rollup(engine).run_once(now=M0 + HOUR + timedelta(minutes=15))

    assert _rows(engine) == {("mig", "n1", 1011, "agent"), ("whole", "n1", 0, "slurm")}
    with engine.connect() as conn:
        summed = dict(conn.execute(sa.select(job_hours.c.job_id, job_hours.c.gpu_minutes)).all())
        # the classifier reads Slurm's GPUs, else the attribution, as before
        assert load_scope(conn, "mig").gpu_source == "attribution"
        assert load_scope(conn, "whole").gpu_source == "job_gpus"
    assert summed == {"mig": 60, "whole": 60}
    held = {r.group: r for r in usage_report(engine, GroupBy.USER, M0, M0 + HOUR)}
    assert round(held["mia"].gpu_hours, 4) == round(2 / 7, 4) and held["wes"].gpu_hours == 1.0
    assert held["mia"].energy_kwh > 0  # its instance's minutes are the job's now
    # the job summary counts the instance as its share of the card too: 1 h held, 2/7 GPU-hour
    usage = job_view(engine, "mig", M0 + HOUR).usage
    assert usage.gpus == 1 and round(usage.gpu_hours_allocated, 4) == round(2 / 7, 4)
    assert job_view(engine, "whole", M0 + HOUR).usage.gpu_hours_allocated == 1.0

    Rollup(engine).roll(M0, M0 + HOUR)  # rolling again adds nothing twice
    assert len(_rows(engine)) == 2
    with engine.begin() as conn:  # Slurm's map comes: it replaces the agents' rows
        replace_job_gpus(conn, {"mig": {"n1": [1011]}})
    assert _rows(engine) == {("mig", "n1", 1011, "slurm"), ("whole", "n1", 0, "slurm")}
