"""A MIG-split card counts once on the overview, the node page and the node list, on both databases.

Node ``mig01``: card 0 a whole H200 at 80 %; card 1 in MIG mode, its own row carrying power and
a card-wide GPM reading (50 %) that must not count, and three instances — 1010 (1g, 1/7 of the
card, 90 % busy), 1011 (1g, idle) and 1012 (2g, idle). Node ``gpu01``: two whole cards at 50 %
and 0 %. So the cluster has four cards reporting, and 2 + 1/7 of them busy.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest
import sqlalchemy as sa

from gpuwatch import wire
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.rollups import Rollup
from gpuwatch.sql.schema import node_minutes
from gpuwatch.views import cluster_overview, node_summaries, node_view
from gpuwatch.views.overview import cards_held
from gpuwatch.web.node_page import node_body

START = datetime(2026, 12, 6, 10, 0, tzinfo=timezone.utc)
MINUTES = 5
NOW = START + timedelta(minutes=MINUTES)


def _gpu(ts: datetime, index: int, **fields: object) -> wire.GpuSample:
    return wire.GpuSample(
        ts=ts, gpu_index=index, uuid=f"GPU-{index}", name="NVIDIA H200", interval_s=10.0, **fields
    )


def _mig(ts: datetime, card: int, slot: int, slices: int, active: float) -> wire.GpuSample:
    index = 1000 + 10 * card + slot
    return wire.GpuSample(
        ts=ts,
        gpu_index=index,
        uuid=f"MIG-{index}",
        name=f"NVIDIA H200 MIG {slices}g.{18 * slices}gb",
        interval_s=10.0,
        parent_gpu_index=card,
        parent_uuid=f"GPU-{card}",
        mig_gpu_instance_id=slot + 1,
        mig_compute_instance_id=0,
        card_fraction_ratio=slices / 7,
        gr_engine_active_ratio=active,
        memory_total_bytes=slices * 18 * 2**30,
    )


def _samples(node: str, ts: datetime) -> list[wire.GpuSample]:
    if node == "gpu01":
        return [
            _gpu(ts, 0, util_gpu_ratio=0.5, power_watts=400.0),
            _gpu(ts, 1, util_gpu_ratio=0.0, power_watts=90.0),
        ]
    return [
        _gpu(ts, 0, util_gpu_ratio=0.8, power_watts=500.0),
        _gpu(ts, 1, gr_engine_active_ratio=0.5, power_watts=250.0, temperature_celsius=50.0),
        _mig(ts, 1, 0, 1, 0.9),
        _mig(ts, 1, 1, 1, 0.0),
        _mig(ts, 1, 2, 2, 0.0),
    ]


@pytest.fixture
def loaded(engine) -> sa.Engine:
    store = BatchStore(engine)
    for node in ("mig01", "gpu01"):
        create_token(engine, node)
        with engine.connect() as conn:
            node_id = get_node(conn, node).id
        stamps = [START + timedelta(seconds=10 * k) for k in range(1, MINUTES * 6)]
        samples = [s for ts in stamps for s in _samples(node, ts)]
        store.store(node_id, wire.Batch(node=node, agent_version="test", seq=0, samples=samples))
    Rollup(engine, lag=timedelta(0)).run_once(now=NOW)
    return engine


def test_overview_counts_a_split_card_once(loaded) -> None:
    ov = cluster_overview(loaded, NOW)
    assert ov.gpus_reporting == 4  # 2 + 2 cards, not 2 + 1 + 3 instances
    assert ov.gpus_busy == pytest.approx(2 + 1 / 7)  # gpu01/0, mig01/0 and 1/7 of mig01/1
    assert ov.gpus_idle == pytest.approx(4 - 2 - 1 / 7)
    row = ov.rows.index("mig01")
    cells = [v for (r, _), v in ov.cells.items() if r == row]
    # card 0 at 0.8 and card 1 as its instances' activity by share (0.9 / 7), the card's own 0.5 out
    assert cells and all(v == pytest.approx((0.8 + 0.9 / 7) / 2) for v in cells)
    whole = [v for (r, _), v in ov.cells.items() if r == ov.rows.index("gpu01")]
    assert all(v == pytest.approx(0.25) for v in whole)
    with loaded.connect() as conn:
        reporting = conn.execute(
            sa.select(sa.func.max(node_minutes.c.gpus_reporting)).where(
                node_minutes.c.node_id == get_node(conn, "mig01").id
            )
        ).scalar_one()
    assert reporting == 2


def test_node_page_lists_the_card_once_with_its_instances(loaded) -> None:
    view = node_view(loaded, "mig01", NOW, hours=1)
    assert view is not None
    assert [g.index for g in view.gpus] == [0, 1, 1010, 1011, 1012]  # each card, then its instances
    assert (view.cards, view.mig_instances) == (2, 3)
    card = view.gpus[1]
    assert card.split and card.util_mean is None and card.power_mean_watts == pytest.approx(250.0)
    instances = view.gpus[2:]
    assert [g.parent_index for g in instances] == [1, 1, 1]
    assert [g.card_fraction for g in instances] == pytest.approx([1 / 7, 1 / 7, 2 / 7])
    assert instances[0].util_mean == pytest.approx(0.9) and instances[0].power_mean_watts is None
    assert not view.gpus[0].split and view.gpus[0].util_mean == pytest.approx(0.8)
    assert sorted(view.util) == [0, 1010, 1011, 1012]  # no line for the split card
    html = node_body(view)
    assert "2 (3 MIG instances)" in html and "in its MIG instances" in html and "2/7 of gpu1" in html


def test_node_list_counts_cards_and_instances(loaded) -> None:
    rows = {n.name: n for n in node_summaries(loaded, now=NOW)}
    assert (rows["mig01"].gpus, rows["mig01"].mig_instances) == (2, 3)
    assert (rows["gpu01"].gpus, rows["gpu01"].mig_instances) == (2, 0)


def test_wasted_cards_count_an_instance_by_its_share() -> None:
    def job(gpus: int, evidence: dict) -> SimpleNamespace:
        return SimpleNamespace(gpus=gpus, verdict=SimpleNamespace(evidence=evidence))

    assert cards_held(job(4, {})) == 4.0
    mig = {"instances": [1012], "card_fraction": {"1012": 2 / 7}, "cards": round(2 / 7, 4)}
    assert cards_held(job(1, {"mig": mig})) == pytest.approx(2 / 7, abs=1e-4)
    assert cards_held(job(2, {"mig": mig})) == pytest.approx(1 + 2 / 7, abs=1e-4)
