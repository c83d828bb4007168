"""Energy from the NVML counter, end to end: the NVML backend over the fake pynvml (its
``nvmlDeviceGetTotalEnergyConsumption`` integrates power over the fake clock), the store, the
rollups and ``views/energy.py``; a driver reload resets the counter and a GPU falls off the bus."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pynvml
import pytest

from gpuwatch import wire
from gpuwatch.collectors.nvml_backend import NvmlBackend
from gpuwatch.daemon.store.batch_store import BatchStore
from gpuwatch.sql.nodes import create_token, get_node
from gpuwatch.sql.rollups import Rollup
from gpuwatch.views.energy import gpus_energy
from tests.gpu.fake_pynvml import FakeNvml

T0 = datetime(2026, 12, 5, 9, 0, tzinfo=timezone.utc)


def test_counter_energy_with_a_driver_reload_and_a_lost_gpu(engine) -> None:
    """GPU 0 draws 500 W, GPU 1 300 W, twelve 10 s samples. Hand-computed: GPU 0's counter rises
    5,000 J a sample; its first sample (nothing before it) and the one after the reload (the
    counter went back) count power x interval, the same 5,000 J: 60,000 J, 2 of 12 estimated.
    GPU 1 answers 8 samples (3,000 J each, the first estimated), then is lost: 24,000 J."""
    fake = FakeNvml(["H200", "H200"])
    fake.gpus[0].power_mw, fake.gpus[1].power_mw = 500_000, 300_000
    backend = NvmlBackend(nvml=fake, start_poller=False, clock=fake.clock)
    samples: list = []
    try:
        for k in range(12):
            if k == 5:
                fake.gpus[0].energy_mj = 1_000.0  # driver reload: the counter starts again
            if k == 8:
                fake.gpus[1].failure = pynvml.NVMLError_GpuIsLost
            fake.advance(10)
            backend.poll()
            samples += backend.sample(T0 + timedelta(seconds=10 * (k + 1)))
    finally:
        backend.close()
    assert [s.state for s in samples if s.gpu_index == 1].count("lost") == 4
    create_token(engine, "nvml-n1")
    with engine.connect() as conn:
        node_id = get_node(conn, "nvml-n1").id
    BatchStore(engine).store(node_id, wire.Batch(node="nvml-n1", agent_version="t", samples=samples))
    Rollup(engine).run_once(now=T0 + timedelta(minutes=10))
    with engine.connect() as conn:
        gpu0 = gpus_energy(conn, [(node_id, 0)], "j", T0, T0 + timedelta(minutes=5))
        gpu1 = gpus_energy(conn, [(node_id, 1)], "j", T0, T0 + timedelta(minutes=5))
        both = gpus_energy(conn, [(node_id, 0), (node_id, 1)], "j", T0, T0 + timedelta(minutes=5))
    assert gpu0.joules == pytest.approx(60_000.0) and gpu0.estimated_share == pytest.approx(2 / 12)
    assert gpu1.joules == pytest.approx(24_000.0) and gpu1.estimated_share == pytest.approx(1 / 8)
    assert both.kwh == pytest.approx(84_000.0 / 3.6e6)
