"""AMD GPUs end to end: the fake amdsmi behind the real backend, agent -> HTTP -> daemon
(SQLite) -> rollups -> classifier, and what the verdict says it could not see.

An MI300X-like card runs a job that keeps the GFX engine 35 % busy at a fifth of its power cap
in 10 GB of its 192 GB: small work. amdsmi has no SM-activity or tensor counters, so the verdict
must say it judged without SM activity and that the mixed-precision rule was not checked.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuwatch.collectors.amdsmi_backend import AmdSmiBackend
from tests.gpu.fake_amdsmi import FakeAmdSmi, FakeProcess

pytestmark = pytest.mark.slow

MINUTES = 6
INTERVAL_S = 10.0


def _small_work_card() -> FakeAmdSmi:
    fake = FakeAmdSmi(["MI300X"])
    g = fake.gpus[0]
    g.gfx_activity, g.umc_activity = 35, 10
    g.socket_power_w, g.gfx_clk_mhz, g.hotspot_c = 150, 2100, 52
    g.vram_used_mb = 10_240
    g.processes = [FakeProcess(31337, 10 * 1024**3, gfx_busy=0.35)]
    return fake


def test_amd_job_gets_a_verdict_that_names_the_missing_signals(tmp_path: Path) -> None:
    from gpuwatch.agent import Agent, Pusher, Spool
    from gpuwatch.collectors.gpu import GpuCollector
    from gpuwatch.config import AgentConfig, Settings
    from gpuwatch.daemon.server import BackgroundServer
    from gpuwatch.sql.nodes import create_token
    from gpuwatch.sql.rollups import floor_minute
    from gpuwatch.workload.validate import ScenarioOutcome, classify_run, validate_thresholds

    fake = _small_work_card()
    backend = AmdSmiBackend(amdsmi=fake, start_poller=False, clock=fake.clock)
    settings = Settings().with_overrides(
        database={"url": f"sqlite:///{tmp_path / 'amd.db'}"}, daemon={"listen": "127.0.0.1:0"}
    )
    start = floor_minute(datetime.now(timezone.utc)) - timedelta(minutes=MINUTES + 5)
    cycles = int(MINUTES * 60 / INTERVAL_S)
    end = start + timedelta(seconds=cycles * INTERVAL_S)
    outcome = ScenarioOutcome("amd-small-work", "small_work", "job")
    with BackgroundServer(settings) as server:
        server.scheduler.pause()  # the test rolls up and classifies itself
        node = "mi300x-node01"
        token = create_token(server.engine, node)
        spool_dir = Path(tempfile.mkdtemp(prefix="spool-", dir=tmp_path))
        config = AgentConfig(node=node, daemon_url=server.url, token=token, spool_dir=spool_dir)
        clock = {"now": start}
        agent = Agent(
            config,
            [GpuCollector(backend)],
            Spool(spool_dir, config.spool_max_bytes),
            Pusher(server.url, node, token, config.push_timeout_s),
            now=lambda: clock["now"],
        )
        agent.start_sender()
        drained = False
        try:
            for k in range(cycles + 1):
                for _ in range(2):  # two 1 s-style polls per interval
                    fake.advance(INTERVAL_S / 2)
                    backend.poll()
                clock["now"] = start + timedelta(seconds=k * INTERVAL_S)
                agent.cycle()
        finally:
            drained = agent.drain(60)
            agent.close()
        assert drained, "the daemon did not take every batch"
        classify_run(
            server.engine,
            validate_thresholds(MINUTES),
            outcome,
            job_id=f"amd-{os.getpid()}",
            node=node,
            gpus=[0],
            cpus=8,
            start=start,
            end=end,
        )
    assert outcome.error is None, outcome.verdicts
    job = next(v for v in outcome.verdicts if v["window"] == "job")
    assert job["cause"] == "small_work", outcome.verdicts
    evidence = job["evidence"]
    assert evidence["gpm"] is False and evidence["models"] == ["AMD Instinct MI300X"]
    gpm_like = {"sm_active", "sm_occupancy", "tensor_active", "dram_active", "fp32_active", "fp16_active"}
    assert gpm_like <= set(evidence["window_missing"])
    assert "sm_active" in evidence["missing"]
    assert "no GPM: judged on utilization, power and memory alone" in evidence["notes"]
    not_checked = {entry["cause"]: entry["reason"] for entry in evidence["not_checked"]}
    assert not_checked["no_mixed_precision"] == "tensor activity not measured (no GPM on AMD Instinct MI300X)"
    features = outcome.features["job"]
    assert features["util_mean"] == pytest.approx(0.35, abs=0.01)
    assert features["power_ratio"] == pytest.approx(150 / 750, abs=0.01)
    assert features["sm_active"] is None and features["tensor_active"] is None
