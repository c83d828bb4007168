"""AMD GPUs end to end: the fake amdsmi behind the real backend, agent -> HTTP -> daemon
(SQLite) -> rollups -> classifier, and what the verdict says it could not see.

An MI300X-like card runs a job that keeps the GFX engine 35 % busy at a fifth of its power cap
in 10 GB of its 192 GB: small work. amdsmi has no SM-activity or tensor counters, so the verdict
must say it judged without SM activity and that the mixed-precision rule was not checked.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuwatch.collectors.amdsmi_backend import AmdSmiBackend
from tests.gpu.fake_amdsmi import FakeAmdSmi, FakeProcess
from tests.live_daemon import paused_daemon, recent_span, run_agent

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
    from gpuwatch.collectors.gpu import GpuCollector
    from gpuwatch.workload.validate import ScenarioOutcome, classify_run, validate_thresholds

    fake = _small_work_card()
    backend = AmdSmiBackend(amdsmi=fake, start_poller=False, clock=fake.clock)
    span = recent_span(MINUTES, INTERVAL_S)
    outcome = ScenarioOutcome("amd-small-work", "small_work", "job")

    def poll() -> None:
        for _ in range(2):  # two 1 s-style polls per interval
            fake.advance(INTERVAL_S / 2)
            backend.poll()

    with paused_daemon(f"sqlite:///{tmp_path / 'amd.db'}") as server:
        node = "mi300x-node01"
        run_agent(server, node, [GpuCollector(backend)], span, tmp_path, poll)
        classify_run(
            server.engine,
            validate_thresholds(MINUTES),
            outcome,
            job_id=f"amd-{os.getpid()}",
            node=node,
            gpus=[0],
            cpus=8,
            start=span.start,
            end=span.end,
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
