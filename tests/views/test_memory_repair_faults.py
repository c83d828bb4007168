"""A card's memory repairs (a row remap or page retirement waiting for a GPU reset; a row remap
that failed) are rolled up per minute and folded per hour, and shown as faults in the node
page's words on every surface that lists faults: the node list, the overview, the node page and
the job page, on both databases."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import sqlalchemy as sa

from gpuwatch import wire
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql import hours
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.rollups import Rollup
from gpuwatch.sql.schema import gpu_hours, gpu_minutes
from gpuwatch.views import cluster_overview, node_summaries, node_view
from tests.factories import gpu_sample

START = datetime(2026, 12, 6, 10, 0, tzinfo=timezone.utc)
NOW = START + timedelta(minutes=5)
PENDING = "memory repair pending a GPU reset"
FAILED = "row remapping failed"


def _health(index: int, minute: int) -> dict:
    """gpu0 healthy; gpu1 a remap pending from minute 2 on; gpu2 a failed remap all along; gpu3 a
    pre-Ampere card with a page retirement pending; gpu4 a card that does not report it (None)."""
    if index == 4:
        return {}
    return {
        "row_remap_pending": index == 1 and minute >= 2,
        "row_remap_failed": index == 2,
        "retired_pages_pending": index == 3,
        "remapped_rows_uncorrectable": 1 if index in (1, 2) else 0,
    }


def _load(engine: sa.Engine) -> None:
    create_token(engine, "n1")
    with engine.connect() as conn:
        node_id = get_node(conn, "n1").id
    stamps = [START + timedelta(seconds=10 * k) for k in range(1, 5 * 6)]
    samples = [
        gpu_sample(ts, i, util=0.6, **_health(i, int((ts - START).total_seconds() // 60)))
        for ts in stamps
        for i in range(5)
    ]
    BatchStore(engine).store(node_id, wire.Batch(node="n1", agent_version="test", seq=0, samples=samples))
    Rollup(engine, lag=timedelta(0)).run_once(now=NOW)


def test_minutes_count_the_samples_of_each_repair(engine) -> None:
    _load(engine)
    g = gpu_minutes.c
    with engine.connect() as conn:
        sums = {
            r.gpu_index: (r.pending, r.failed)
            for r in conn.execute(
                sa.select(g.gpu_index, sa.func.sum(g.reset_pending_samples).label("pending"),
                          sa.func.sum(g.remap_failed_samples).label("failed")).group_by(g.gpu_index)
            )
        }  # fmt: skip
    # minute 0 holds 5 stamps (10 s .. 50 s), minutes 1-4 six each: 29 samples per GPU
    assert sums == {0: (0, 0), 1: (18, 0), 2: (0, 29), 3: (29, 0), 4: (0, 0)}


def test_every_surface_that_lists_faults_names_them(engine) -> None:
    _load(engine)
    (summary,) = node_summaries(engine, timedelta(hours=1), now=NOW)
    faults = {f.gpu_index: f for f in summary.faults}
    assert sorted(faults) == [1, 2, 3]  # the healthy card and the one that does not say are not faults
    assert faults[1].fault == f"{PENDING} (18 sample(s)); admin"
    assert faults[2].fault.startswith(f"{FAILED} (29 sample(s)): the GPU needs service")
    assert faults[3].as_json()["reset_pending_samples"] == 29
    overview = cluster_overview(engine, NOW)
    assert {f.gpu_index for f in overview.faults["n1"]} == {1, 2, 3}
    page = node_view(engine, "n1", NOW, hours=1)
    assert {g.index: g.fault for g in page.gpus if g.fault} == {i: f.fault for i, f in faults.items()}


def test_hours_fold_the_minutes_sums(engine) -> None:
    _load(engine)
    with engine.begin() as conn:
        assert hours.fold(conn, START, START + timedelta(hours=1)) == 1
        h = gpu_hours.c
        folded = dict(conn.execute(sa.select(h.gpu_index, h.reset_pending_samples)).all())
    assert folded[1] == 18 and folded[3] == 29 and folded[0] == 0


def test_a_simulated_cards_pending_remap_reaches_the_node_list(engine) -> None:
    """The device model's 'remap' GPU, sampled as the agent samples it, stored, rolled up: the
    node list names XID 63 and the repair pending a reset on that GPU alone."""
    from gpuwatch.collectors.sim_backend import SimulatedBackend, parse_scenario_spec

    default, overrides = parse_scenario_spec("training,gpu1=remap")
    backend = SimulatedBackend(default, gpus=2, start=START, overrides=overrides)
    create_token(engine, "sim1")
    with engine.connect() as conn:
        node_id = get_node(conn, "sim1").id
    samples = [s for k in range(1, 5 * 6) for s in backend.sample(START + timedelta(seconds=10 * k))]
    BatchStore(engine).store(node_id, wire.Batch(node="sim1", agent_version="test", seq=0, samples=samples))
    Rollup(engine, lag=timedelta(0)).run_once(now=NOW)
    (summary,) = [n for n in node_summaries(engine, timedelta(hours=1), now=NOW) if n.name == "sim1"]
    (gpu1,) = summary.faults
    assert gpu1.gpu_index == 1 and gpu1.xid_codes == (63,)
    assert gpu1.reset_pending_samples == 5 * 6 - 18 and gpu1.remap_failed_samples == 0  # from 180 s on
    assert "memory repair pending a GPU reset (12 sample(s)); admin" in gpu1.fault
