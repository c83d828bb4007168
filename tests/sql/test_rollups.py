"""Per-minute rollups on both databases: exact sums, histograms, late data, idempotency."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from gpuwatch import wire
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql.gpu_readings import read_gpu_samples
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.rollups import Rollup, framework_names, xid_codes
from gpuwatch.sql.schema import gpu_minutes, job_minutes, node_minutes
from tests import factories

M0 = factories.T0.replace(hour=12, minute=0, second=0)  # 12:00:00 UTC


def _node(engine, name="node001") -> int:
    create_token(engine, name)
    with engine.connect() as conn:
        return get_node(conn, name).id


def _minute_batch(node: str, minute_start, utils: list[float], gpm: bool = True) -> wire.Batch:
    """Six samples 10 s apart in one minute, GPU 0 with the given utils; GPM fields optional."""
    samples: list = []
    for k, util in enumerate(utils):
        ts = minute_start + timedelta(seconds=10 * k)
        extra = {} if gpm else {"sm_active_ratio": None, "tensor_active_ratio": None}
        samples.append(
            factories.gpu_sample(
                ts, 0, util=util, throttle_reasons=["gpu_idle"] if util == 0 else [], **extra
            )
        )
        samples.append(
            wire.JobSample(
                ts=ts, job_id="123", cpu_used_cores=2.0 + k, cpu_allocated_cores=8, memory_used_bytes=k
            )
        )
        samples.append(
            wire.CpuSample(
                ts=ts, cores=8, busy_ratio=0.5, user_ratio=0.4, system_ratio=0.1, iowait_ratio=0.25
            )
        )
        samples.append(
            wire.NicSample(
                ts=ts,
                device="eth0",
                rx_bytes_per_s=100,
                tx_bytes_per_s=50,
                rx_packets_per_s=1,
                tx_packets_per_s=1,
            )
        )
        samples.append(
            wire.NicSample(
                ts=ts,
                device="eth1",
                rx_bytes_per_s=10,
                tx_bytes_per_s=40,
                rx_packets_per_s=1,
                tx_packets_per_s=1,
            )
        )
    return wire.Batch(node=node, agent_version="t", samples=samples)


def test_minute_sums_histogram_and_missing_gpm(engine):
    node_id = _node(engine)
    store = BatchStore(engine)
    store.store(node_id, _minute_batch("node001", M0, [0.0, 0.0, 0.05, 0.5, 0.95, 1.0]))
    store.store(node_id, _minute_batch("node001", M0 + timedelta(minutes=1), [0.2] * 6, gpm=False))
    report = Rollup(engine).run_once(now=M0 + timedelta(minutes=5))
    assert report.minutes_rolled == 3 and report.done_until == M0 + timedelta(minutes=3)
    with engine.connect() as conn:
        rows = conn.execute(sa.select(gpu_minutes).order_by(gpu_minutes.c.minute)).mappings().all()
        assert [r["minute"] for r in rows] == [M0, M0 + timedelta(minutes=1)]
        first, second = rows
        assert first["samples"] == 6
        assert abs(first["util_gpu_ratio_sum"] - 2.5) < 1e-9 and first["util_gpu_ratio_n"] == 6
        assert first["util_gpu_ratio_max"] == 1.0
        bins = [first[f"util_bin_{k}"] for k in range(11)]
        assert bins == [2, 1, 0, 0, 0, 1, 0, 0, 0, 0, 2]
        assert first["throttled_samples"] == 0  # only "gpu_idle", which is not throttling
        assert first["sm_active_ratio_n"] == 6
        assert second["sm_active_ratio_n"] == 0 and second["sm_active_ratio_sum"] is None  # absent, not 0
        assert second["util_bin_2"] == 6
        assert first["simulated"] is True or first["simulated"] == 1
        job = conn.execute(sa.select(job_minutes).order_by(job_minutes.c.minute)).mappings().first()
        assert job["job_id"] == "123" and job["cpu_used_cores_sum"] == sum(2.0 + k for k in range(6))
        assert job["cpu_allocated_cores"] == 8 and job["memory_used_bytes_max"] == 5
        node = conn.execute(sa.select(node_minutes).order_by(node_minutes.c.minute)).mappings().first()
        assert node["iowait_ratio_sum"] == 1.5 and node["iowait_ratio_n"] == 6
        assert node["nic_bytes_per_s_sum"] == 6 * 200 and node["nic_bytes_per_s_n"] == 6  # mean 200 B/s


def test_late_batch_is_rolled_into_its_old_minute(engine):
    node_id = _node(engine)
    store = BatchStore(engine)
    rollup = Rollup(engine)
    store.store(node_id, _minute_batch("node001", M0, [0.5] * 6))
    rollup.run_once(now=M0 + timedelta(minutes=10))
    # a second GPU's samples for the same old minute arrive late (spool replay)
    late = _minute_batch("node001", M0, [1.0] * 6)
    late = late.model_copy(
        update={"samples": [s.model_copy(update={"gpu_index": 1}) for s in late.samples if s.kind == "gpu"]}
    )
    store.store(node_id, late)
    report = rollup.run_once(now=M0 + timedelta(minutes=11))
    assert report.late_ranges == 1
    with engine.connect() as conn:
        rows = conn.execute(sa.select(gpu_minutes.c.gpu_index, gpu_minutes.c.util_gpu_ratio_sum)).all()
    assert sorted(rows) == [(0, 3.0), (1, 6.0)]


def test_rolling_twice_changes_nothing(engine):
    node_id = _node(engine)
    BatchStore(engine).store(node_id, _minute_batch("node001", M0, [0.3] * 6))
    rollup = Rollup(engine)
    rollup.roll(M0, M0 + timedelta(minutes=1))
    with engine.connect() as conn:
        once = conn.execute(sa.select(gpu_minutes)).mappings().all()
    rollup.roll(M0, M0 + timedelta(minutes=1))
    with engine.connect() as conn:
        twice = conn.execute(sa.select(gpu_minutes)).mappings().all()
    assert [dict(r) for r in once] == [dict(r) for r in twice] and len(once) == 1


def test_lost_gpu_is_not_counted_as_throttled_or_xid(engine):
    """A lost GPU reports no throttle reasons and no XIDs: absent, stored as SQL NULL on every
    path (the JSON text 'null' once made lost samples count as throttled and as XIDs)."""
    node_id = _node(engine)
    lost = [
        wire.GpuSample(ts=M0 + timedelta(seconds=10 * k), gpu_index=0, state="lost", simulated=True)
        for k in range(6)
    ]
    BatchStore(engine).store(node_id, wire.Batch(node="node001", agent_version="t", samples=lost))
    Rollup(engine).roll(M0, M0 + timedelta(minutes=1))
    with engine.connect() as conn:
        nulls = sum(r.throttle_reasons is None and r.xid_errors is None for r in read_gpu_samples(conn))
        row = conn.execute(sa.select(gpu_minutes)).mappings().one()
    assert nulls == 6
    assert row["lost_samples"] == 6 and row["throttled_samples"] == 0 and row["xid_samples"] == 0


def test_power_limiter_alone_and_xid_codes_are_counted_apart(engine):
    """sw_power_cap alone (a GPU at its power limit) is counted apart from other throttling, and
    the minute keeps which XIDs it saw, on both databases."""
    node_id = _node(engine)
    reasons = [
        ["sw_power_cap"],
        ["gpu_idle", "sw_power_cap"],
        ["sw_power_cap", "hw_slowdown"],
        ["hw_thermal_slowdown"],
        [],
        ["0x800"],  # an unknown bit: not the power limiter
    ]
    xids = [[], [31], [31, 43], None, [79], []]
    samples = [
        factories.gpu_sample(M0 + timedelta(seconds=10 * k), 0, util=0.9, throttle_reasons=r, xid_errors=x)
        for k, (r, x) in enumerate(zip(reasons, xids, strict=True))
    ]
    BatchStore(engine).store(node_id, wire.Batch(node="node001", agent_version="t", samples=samples))
    Rollup(engine).run_once(now=M0 + timedelta(minutes=5))
    with engine.connect() as conn:
        row = conn.execute(sa.select(gpu_minutes)).mappings().one()
    assert row["throttled_samples"] == 5
    assert row["power_capped_samples"] == 2
    assert row["xid_samples"] == 3
    assert xid_codes(row["xid_codes"]) == (31, 43, 79)


def test_fp64_activity_and_the_sm_clock_share_of_its_max(engine):
    """FP64 pipe activity and SM clock / max SM clock are summed per minute with their own
    counts: a sample without a clock, or without a max clock, does not count."""
    node_id = _node(engine)
    full, half, three_quarters = (1980e6, 1980e6), (990e6, 1980e6), (1485e6, 1980e6)
    clocks = [full, half, three_quarters, (None, 1980e6), (1000e6, None), (500e6, 0.0)]
    fp64 = [0.4, 0.5, None, 0.6, 0.0, 0.1]
    samples = [
        factories.gpu_sample(
            M0 + timedelta(seconds=10 * k), 0, util=0.9, sm_clock_hz=c, sm_clock_max_hz=m, fp64_active_ratio=f
        )
        for k, ((c, m), f) in enumerate(zip(clocks, fp64, strict=True))
    ]
    BatchStore(engine).store(node_id, wire.Batch(node="node001", agent_version="t", samples=samples))
    Rollup(engine).run_once(now=M0 + timedelta(minutes=5))
    with engine.connect() as conn:
        row = conn.execute(sa.select(gpu_minutes)).mappings().one()
    assert row["sm_clock_ratio_n"] == 3 and row["sm_clock_ratio_sum"] == pytest.approx(1.0 + 0.5 + 0.75)
    assert row["fp64_active_ratio_n"] == 5 and row["fp64_active_ratio_sum"] == pytest.approx(1.6)


def test_the_enforced_and_the_default_power_limit(engine):
    """Both limits are kept per minute (the largest of the minute), so a window can tell a power
    cap from the card's default; a sample from an agent that does not send the default leaves it
    NULL, not 0."""
    node_id = _node(engine)
    limits = [(450.0, 700.0), (450.0, None), (500.0, 700.0)]
    samples = [
        factories.gpu_sample(
            M0 + timedelta(seconds=10 * k), 0, util=0.9, power_limit_watts=lim, power_default_limit_watts=d
        )
        for k, (lim, d) in enumerate(limits)
    ] + [factories.gpu_sample(M0 + timedelta(minutes=1), 0, util=0.9, power_limit_watts=700.0)]
    BatchStore(engine).store(node_id, wire.Batch(node="node001", agent_version="t", samples=samples))
    Rollup(engine).run_once(now=M0 + timedelta(minutes=5))
    with engine.connect() as conn:
        rows = conn.execute(sa.select(gpu_minutes).order_by(gpu_minutes.c.minute)).mappings().all()
    assert [(r["power_limit_watts"], r["power_default_limit_watts"]) for r in rows] == [
        (500.0, 700.0),
        (700.0, None),
    ]


def test_the_frameworks_of_a_minute(engine):
    """A minute keeps its samples' distinct framework lists; [] (inspected, none) is kept apart
    from a minute no sample of which was inspected (NULL)."""
    node_id = _node(engine)
    lists = [["pytorch"], [], None, ["jax", "pytorch"]]
    samples = [
        factories.gpu_sample(M0 + timedelta(seconds=10 * k), 0, util=0.9, frameworks=f)
        for k, f in enumerate(lists)
    ]
    samples += [factories.gpu_sample(M0 + timedelta(minutes=1), 0, util=0.9)]
    samples += [factories.gpu_sample(M0 + timedelta(minutes=2), 0, util=0.9, frameworks=[])]
    BatchStore(engine).store(node_id, wire.Batch(node="node001", agent_version="t", samples=samples))
    Rollup(engine).run_once(now=M0 + timedelta(minutes=5))
    with engine.connect() as conn:
        texts = (
            conn.execute(sa.select(gpu_minutes.c.frameworks).order_by(gpu_minutes.c.minute)).scalars().all()
        )
    assert [framework_names(t) for t in texts] == [("jax", "pytorch"), None, ()]


def test_job_memory_without_page_cache(engine):
    """memory_anon_bytes_max is the largest (used - cache) of the minute's samples; a sample
    without a cache figure counts whole."""
    node_id = _node(engine)
    used_cache = [(60, 50), (70, 40), (55, None), (40, 0)]
    samples = [
        wire.JobSample(
            ts=M0 + timedelta(seconds=10 * k), job_id="7", memory_used_bytes=u, memory_cache_bytes=c
        )
        for k, (u, c) in enumerate(used_cache)
    ]
    BatchStore(engine).store(node_id, wire.Batch(node="node001", agent_version="t", samples=samples))
    Rollup(engine).run_once(now=M0 + timedelta(minutes=5))
    with engine.connect() as conn:
        row = conn.execute(sa.select(job_minutes)).mappings().one()
    assert row["memory_used_bytes_max"] == 70 and row["memory_cache_bytes_max"] == 50
    assert row["memory_anon_bytes_max"] == 55


def test_a_minute_without_xids_has_no_codes(engine):
    node_id = _node(engine)
    BatchStore(engine).store(node_id, _minute_batch("node001", M0, [0.5] * 6))
    Rollup(engine).run_once(now=M0 + timedelta(minutes=5))
    with engine.connect() as conn:
        row = conn.execute(sa.select(gpu_minutes)).mappings().one()
    assert row["xid_codes"] is None and xid_codes(row["xid_codes"]) == ()


def _energy_by_gpu_minute(engine) -> dict:
    with engine.connect() as conn:
        rows = conn.execute(
            sa.select(
                gpu_minutes.c.gpu_index,
                gpu_minutes.c.minute,
                gpu_minutes.c.energy_joules,
                gpu_minutes.c.energy_power_samples,
            )
        ).all()
    return {(r.gpu_index, r.minute.minute): (r.energy_joules, r.energy_power_samples) for r in rows}


def test_energy_from_the_counter_with_a_reset_a_gap_and_a_lost_gpu(engine):
    """GPU 0: the counter rises 3,000 J per 10 s sample; at 12:01:10 it resets (a driver
    reload), and 12:01:50 comes 40 s after the sample before it (the agent was away): those two
    count power x interval (350.5 W x 10 s) instead, and say so. GPU 1 has no counter: power x
    interval throughout. GPU 2 is lost (no power, no counter): no energy. 11:59:50 has no sample
    before it: power x interval for its own minute, and the counter's starting point for 12:00."""
    node_id = _node(engine)
    samples: list = []
    counter = 100_000.0
    offsets = [-10, 0, 10, 20, 30, 40, 50, 60, 70, 110]
    for offset in offsets:
        ts = M0 + timedelta(seconds=offset)
        counter = 500.0 if offset == 70 else counter + 3000.0
        samples.append(factories.gpu_sample(ts, 0, energy_joules=counter))
        samples.append(factories.gpu_sample(ts, 1, energy_joules=None, power_watts=200.0))
        samples.append(wire.GpuSample(ts=ts, gpu_index=2, state="lost", simulated=True))
    BatchStore(engine).store(node_id, wire.Batch(node="node001", agent_version="t", samples=samples))
    Rollup(engine).run_once(now=M0 + timedelta(minutes=5))
    got = _energy_by_gpu_minute(engine)
    power_j = 350.5 * 10
    assert got[(0, 59)] == (power_j, 1)
    assert got[(0, 0)] == (6 * 3000.0, 0)  # six rises, the first from 11:59:50
    assert got[(0, 1)] == (3000.0 + power_j + power_j, 2)  # 12:01:00 rise; :10 reset; :50 after 40 s
    assert got[(1, 0)] == (6 * 200.0 * 10, 6) and got[(1, 1)] == (3 * 200.0 * 10, 3)
    assert got[(2, 0)] == (None, 0)


def test_node_minutes_sum_the_nodes_gpus(engine):
    """The overview reads each node's GPUs per minute from node_minutes: the sums of its GPUs'
    minutes, how many reported, simulated or not; a late GPU's minute re-rolls them."""
    node_id = _node(engine)
    store, rollup = BatchStore(engine), Rollup(engine)
    store.store(node_id, _minute_batch("node001", M0, [0.5] * 6))
    lost = wire.GpuSample(ts=M0 + timedelta(minutes=1), gpu_index=0, state="lost", simulated=True)
    store.store(node_id, wire.Batch(node="node001", agent_version="t", samples=[lost]))
    rollup.run_once(now=M0 + timedelta(minutes=10))
    late = _minute_batch("node001", M0, [1.0] * 6)
    late = late.model_copy(
        update={"samples": [s.model_copy(update={"gpu_index": 1}) for s in late.samples if s.kind == "gpu"]}
    )
    store.store(node_id, late)
    rollup.run_once(now=M0 + timedelta(minutes=11))
    with engine.connect() as conn:
        rows = conn.execute(sa.select(node_minutes).order_by(node_minutes.c.minute)).mappings().all()
    first, second = rows
    assert first["minute"] == M0 and first["gpus_reporting"] == 2 and bool(first["gpu_simulated"])
    assert first["gpu_util_ratio_sum"] == 9.0 and first["gpu_util_ratio_n"] == 12
    assert first["busy_ratio_n"] == 6  # the host's columns still there
    # a minute of a lost GPU only: a node-minute row, no GPU reporting, no host data
    assert second["gpus_reporting"] == 0 and second["gpu_util_ratio_n"] == 0
    assert second["gpu_util_ratio_sum"] is None and second["busy_ratio_n"] == 0


def test_a_mig_instance_minute_reads_graphics_engine_activity_as_utilization(engine):
    """A MIG instance has no NVML utilization: its GPM graphics-engine activity fills the
    utilization sums and histogram; a whole GPU's own utilization wins over its GPM activity.
    The instance's card, instance ids and share of the card are stored in ``gpus``."""
    from gpuwatch.sql.schema import gpus

    node_id = _node(engine)
    mig = {
        "uuid": "MIG-00000000-0000-0000-0001-000000000000",
        "name": "NVIDIA H200 MIG 1g.20gb",
        "parent_gpu_index": 1,
        "parent_uuid": "GPU-00000001-aaaa-bbbb-cccc-000000000000",
        "mig_gpu_instance_id": 1,
        "mig_compute_instance_id": 0,
        "card_fraction_ratio": 1 / 7,
        "power_watts": None,
        "power_limit_watts": None,
        "energy_joules": None,
        "util_gpu_ratio": None,  # NVML: not supported on a MIG device
        "util_memory_ratio": None,
    }
    samples = []
    for k, gr in enumerate([0.0, 0.0, 0.5, 0.7, None, 0.0]):
        ts = M0 + timedelta(seconds=10 * k)
        samples.append(factories.gpu_sample(ts, 1010, gr_engine_active_ratio=gr, **mig))
        samples.append(factories.gpu_sample(ts, 0, util=0.25, gr_engine_active_ratio=0.9))
    BatchStore(engine).store(node_id, wire.Batch(node="node001", agent_version="t", samples=samples))
    Rollup(engine).run_once(now=M0 + timedelta(minutes=5))
    with engine.connect() as conn:
        rows = {r["gpu_index"]: r for r in conn.execute(sa.select(gpu_minutes)).mappings()}
        identity = conn.execute(sa.select(gpus).where(gpus.c.gpu_index == 1010)).mappings().one()
    instance, whole = rows[1010], rows[0]
    assert instance["util_gpu_ratio_n"] == 5 and instance["util_gpu_ratio_sum"] == pytest.approx(1.2)
    assert instance["util_bin_0"] == 3 and instance["util_bin_5"] == 1 and instance["util_bin_7"] == 1
    assert whole["util_gpu_ratio_n"] == 6 and whole["util_gpu_ratio_sum"] == pytest.approx(1.5)
    assert (identity["parent_gpu_index"], identity["parent_uuid"]) == (1, mig["parent_uuid"])
    assert (identity["mig_gpu_instance_id"], identity["mig_compute_instance_id"]) == (1, 0)
    assert identity["card_fraction_ratio"] == pytest.approx(1 / 7)
    assert identity["uuid"] == mig["uuid"]
