"""The ``gpu`` collector and the factory's choice of backend."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from datetime import datetime, timezone

import pynvml
import pytest

from gpuwatch.collectors import gpu, nvml_backend
from gpuwatch.collectors.base import REGISTRY, run_collector
from gpuwatch.collectors.gpu import GpuCollector
from gpuwatch.collectors.gpu_backend import GpuBackendUnavailable, order_reasons, util_stats
from gpuwatch.collectors.nvml_backend import NvmlBackend
from gpuwatch.collectors.sim_backend import SimulatedBackend
from gpuwatch.config import Settings
from tests.gpu.fake_pynvml import FakeNvml

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def settings(**gpu_options: object) -> Settings:
    return Settings(gpu=gpu_options)


@pytest.fixture(autouse=True)
def _fresh_auto_log(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sees the 'GPU collector disabled' line as if the agent just started, on a
    host without amdsmi (``auto`` tries it after NVML; tests/gpu/test_amdsmi_backend.py)."""
    monkeypatch.setattr(gpu, "_auto_disabled_logged", False)
    monkeypatch.setitem(sys.modules, "amdsmi", None)


@pytest.fixture
def no_driver(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNvml]:
    fake = FakeNvml(["H200"], init_error=pynvml.NVMLError_DriverNotLoaded)
    monkeypatch.setattr(nvml_backend, "pynvml", fake)
    yield fake


def test_registered_under_gpu() -> None:
    assert REGISTRY["gpu"] is gpu.gpu_collector


def test_none_disables() -> None:
    assert gpu.gpu_collector(settings(backend="none")) is None


def test_sim_backend_from_config() -> None:
    collector = gpu.gpu_collector(
        settings(backend="sim", sim_scenario="training,gpu1=idle", sim_gpus=2, sim_seed=5, sim_model="A100")
    )
    assert isinstance(collector, GpuCollector) and collector.name == "gpu"
    backend = collector.backend
    assert isinstance(backend, SimulatedBackend) and backend.simulated and backend.seed == 5
    run = run_collector(collector, NOW)
    assert run.error is None
    assert [s.gpu_index for s in run.samples] == [0, 1]
    assert run.samples[0].name == "NVIDIA A100-SXM4-80GB"
    assert run.samples[0].interval_s == pytest.approx(Settings().agent.interval_s)
    assert run.samples[1].util_gpu_ratio == 0.0
    collector.close()


def test_auto_without_nvml_library_disables_and_logs_once(caplog: pytest.LogCaptureFixture) -> None:
    """This machine has pynvml but no libnvidia-ml: nvmlInit raises LibraryNotFound."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("NVML works on this machine")
    with caplog.at_level(logging.INFO, logger="gpuwatch.collectors.gpu"):
        assert gpu.gpu_collector(settings(backend="auto")) is None
        assert gpu.gpu_collector(settings(backend="auto")) is None
    lines = [r for r in caplog.records if "GPU collector disabled" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].levelno == logging.INFO
    assert lines[0].getMessage().startswith("no NVIDIA GPU/driver (")


def test_auto_with_driver_not_loaded(no_driver: FakeNvml, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="gpuwatch.collectors.gpu"):
        assert gpu.gpu_collector(settings(backend="auto")) is None
        assert gpu.gpu_collector(settings(backend="auto")) is None
    messages = [r.getMessage() for r in caplog.records if "GPU collector disabled" in r.getMessage()]
    assert messages == [
        "no NVIDIA GPU/driver (Driver Not Loaded) nor AMD GPU "
        "(amdsmi is not installed (pip install 'gpuwatch[amd]')); GPU collector disabled"
    ]


def test_nvml_required_but_missing_is_an_error(no_driver: FakeNvml) -> None:
    with pytest.raises(GpuBackendUnavailable, match=r"gpu\.backend = 'nvml'.*Driver Not Loaded"):
        gpu.gpu_collector(settings(backend="nvml"))


def test_auto_with_no_devices(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml([])
    monkeypatch.setattr(nvml_backend, "pynvml", fake)
    with caplog.at_level(logging.INFO, logger="gpuwatch.collectors.gpu"):
        assert gpu.gpu_collector(settings(backend="auto")) is None
    assert "NVML reports no devices" in caplog.text
    assert fake.shutdowns == 1


def test_auto_with_nvml_uses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml(["H200", "H200"])
    monkeypatch.setattr(nvml_backend, "pynvml", fake)
    collector = gpu.gpu_collector(settings(backend="auto"))
    assert isinstance(collector, GpuCollector)
    try:
        assert isinstance(collector.backend, NvmlBackend) and not collector.backend.simulated
        samples = collector.collect(NOW)
        assert [s.gpu_index for s in samples] == [0, 1]
        assert not any(s.simulated for s in samples)
    finally:
        collector.close()
    assert fake.shutdowns == 1


def test_util_stats() -> None:
    stats = util_stats([0.0, 1.0, 0.0, 1.0])
    assert (stats.mean, stats.idle_fraction, stats.stddev) == (0.5, 0.5, 0.5)
    assert util_stats([]).mean is None
    assert util_stats([0.3]).stddev is None


def test_order_reasons() -> None:
    assert order_reasons(["hw_slowdown", "gpu_idle", "hw_slowdown", "0x800"]) == [
        "gpu_idle",
        "hw_slowdown",
        "0x800",
    ]


def test_replay_kind_builds_a_replay_backend(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``gpu.backend = "replay"`` plays ``gpu.replay_file`` back."""
    from gpuwatch.collectors.recording import ReplayBackend, make_recording

    path = tmp_path / "rec.jsonl"
    recorder = make_recording(SimulatedBackend("idle", gpus=1, start=NOW), path)
    recorder.sample(NOW)
    recorder.close()
    config = settings(backend="replay", replay_file=str(path), replay_loop=True).gpu
    backend = gpu.make_backend(config, interval_s=10)
    assert isinstance(backend, ReplayBackend) and backend.loop
    with pytest.raises(GpuBackendUnavailable, match="replay_file"):
        gpu.make_backend(settings(backend="replay").gpu, interval_s=10)


def test_collect_publishes_processes_for_attribution():
    """The GPU collector hands each cycle's pids to the attribution collector, which runs after it."""
    from datetime import datetime, timezone

    from gpuwatch.collectors.gpu import GpuCollector
    from gpuwatch.collectors.gpu_processes import GPU_PROCESSES
    from gpuwatch.collectors.sim_backend import SimulatedBackend

    now = datetime(2026, 12, 2, 12, 0, tzinfo=timezone.utc)
    GPU_PROCESSES.clear()
    samples = GpuCollector(SimulatedBackend("training", gpus=2, seed=1)).collect(now)
    seen = GPU_PROCESSES.latest(now, max_age_s=60)
    assert seen is not None and set(seen) == {0, 1}
    for s in samples:
        assert seen[s.gpu_index].pids == tuple(sorted(p.pid for p in s.processes or ()))
    GPU_PROCESSES.clear()
