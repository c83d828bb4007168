"""The NVML backend against the fake pynvml (real structs and exceptions), and on a real GPU."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pynvml
import pytest

from gpuwatch.collectors.gpu_backend import GpuBackendUnavailable
from gpuwatch.collectors.nvml_backend import NvmlBackend, reasons_from_mask
from gpuwatch.wire import GpuSample
from tests.gpu.fake_pynvml import CARDS, FakeNvml
from tests.gpu.fields import GPM_ACTIVITY, MIG_INSTANCE_ONLY, PAGE_RETIREMENT, ROW_REMAPPING

NoPermission = pynvml.NVMLError_NoPermission

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
NOW_US = int(NOW.timestamp() * 1e6)
GIB = 1024**3


def open_backend(fake: FakeNvml) -> NvmlBackend:
    return NvmlBackend(nvml=fake, start_poller=False, clock=fake.clock)


def first_sample(fake: FakeNvml) -> GpuSample:
    """The first card's sample 10 s after a backend opened on ``fake`` (then closed)."""
    backend = open_backend(fake)
    try:
        fake.advance(10)
        return backend.sample(NOW)[0]
    finally:
        backend.close()


@pytest.fixture
def h200() -> Iterator[tuple[FakeNvml, NvmlBackend]]:
    fake = FakeNvml(["H200"])
    gpu = fake.gpus[0]
    gpu.util_gpu, gpu.util_memory = 97, 40
    gpu.power_mw, gpu.sm_clock_mhz, gpu.temperature = 650_000, 1980, 71
    gpu.memory_used = 100 * GIB
    gpu.ecc_corrected = 3
    gpu.processes = [(4242, 99 * GIB), (4343, None)]
    gpu.gpm_rates = {
        pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: 95.0,
        pynvml.NVML_GPM_METRIC_SM_UTIL: 80.0,
        pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: 40.0,
        pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 50.0,
        pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 55.0,
        pynvml.NVML_GPM_METRIC_FP32_UTIL: 10.0,
        pynvml.NVML_GPM_METRIC_FP16_UTIL: 100.4,  # GPM can overshoot by rounding
        pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: 1000.0,
        pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: 2000.0,
        pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: 3000.0,
    }
    backend = open_backend(fake)
    yield fake, backend
    backend.close()


def test_h200_fields(h200: tuple[FakeNvml, NvmlBackend]) -> None:
    fake, backend = h200
    fake.advance(10)
    for _ in range(3):
        backend.poll()
    s = backend.sample(NOW)[0]
    assert (s.gpu_index, s.name, s.state, s.simulated) == (0, "NVIDIA H200", "ok", False)
    assert s.uuid == "GPU-00000000-0000-0000-0000-000000000000"
    assert s.pci_bus_id == "00000000:18:00.0"
    assert s.interval_s == pytest.approx(10)
    assert s.util_gpu_ratio == pytest.approx(0.97)
    assert s.util_memory_ratio == pytest.approx(0.40)
    assert s.memory_used_bytes == 100 * GIB
    assert s.memory_total_bytes == 143_771 * 1024**2
    assert s.memory_reserved_bytes == 600 * 1024**2  # only memory info v2 has it
    assert s.power_watts == pytest.approx(650.0)
    assert s.power_limit_watts == pytest.approx(700.0)
    assert s.power_default_limit_watts == pytest.approx(700.0)
    assert s.energy_joules == pytest.approx(5.0e6 + 650 * 10)
    assert s.sm_clock_hz == pytest.approx(1.98e9)
    assert s.sm_clock_max_hz == pytest.approx(1.98e9)
    assert s.memory_clock_hz == pytest.approx(2.619e9)
    assert s.temperature_celsius == 71
    assert s.throttle_reasons == []
    assert (s.ecc_corrected_errors, s.ecc_uncorrected_errors) == (3, 0)


def test_a_power_cap_is_the_enforced_limit_below_the_default() -> None:
    """nvidia-smi -pl 450 on an H200: the enforced limit follows the cap, the default stays
    700 W, and the default is read once (it is what the card boots with)."""
    fake = FakeNvml(["H200"])
    fake.gpus[0].power_cap_mw = 450_000
    backend = open_backend(fake)
    try:
        fake.advance(10)
        first = backend.sample(NOW)[0]
        fake.advance(10)
        second = backend.sample(NOW + timedelta(seconds=10))[0]
    finally:
        backend.close()
    assert (first.power_limit_watts, first.power_default_limit_watts) == (450.0, 700.0)
    assert second.power_default_limit_watts == 700.0
    assert fake.calls["nvmlDeviceGetPowerManagementDefaultLimit"] == 1
    assert fake.calls["nvmlDeviceGetEnforcedPowerLimit"] == 2


def test_gpm_two_sample_arithmetic(h200: tuple[FakeNvml, NvmlBackend]) -> None:
    fake, backend = h200
    gpu = fake.gpus[0]
    fake.advance(10)
    s = backend.sample(NOW)[0]
    assert s.sm_active_ratio == pytest.approx(0.80)
    assert s.sm_occupancy_ratio == pytest.approx(0.40)
    assert s.tensor_active_ratio == pytest.approx(0.50)
    assert s.dram_active_ratio == pytest.approx(0.55)
    assert s.fp32_active_ratio == pytest.approx(0.10)
    assert s.fp16_active_ratio == 1.0  # clamped into a ratio
    assert s.pcie_tx_bytes_per_s == pytest.approx(1000 * 1024**2)
    assert s.pcie_rx_bytes_per_s == 0.0  # no GPM metric: nvmlDeviceGetPcieThroughput instead
    assert s.nvlink_tx_bytes_per_s == pytest.approx(2000 * 1024**2)
    assert s.nvlink_rx_bytes_per_s == pytest.approx(3000 * 1024**2)
    # the next interval: 5 s at 20 % SM, and only that interval is measured
    gpu.gpm_rates[pynvml.NVML_GPM_METRIC_SM_UTIL] = 20.0
    fake.advance(5)
    assert backend.sample(NOW + timedelta(seconds=5))[0].sm_active_ratio == pytest.approx(0.20)
    # half the next interval at 100 %, half at 0 %
    gpu.gpm_rates[pynvml.NVML_GPM_METRIC_SM_UTIL] = 100.0
    fake.advance(2)
    gpu.gpm_rates[pynvml.NVML_GPM_METRIC_SM_UTIL] = 0.0
    fake.advance(2)
    assert backend.sample(NOW + timedelta(seconds=9))[0].sm_active_ratio == pytest.approx(0.50)


def test_gpm_samples_too_close_are_skipped_not_lost(h200: tuple[FakeNvml, NvmlBackend]) -> None:
    fake, backend = h200
    gpu = fake.gpus[0]
    fake.advance(0.05)
    too_soon = backend.sample(NOW)[0]
    assert too_soon.sm_active_ratio is None
    assert too_soon.pcie_tx_bytes_per_s == 0.0  # fell back to nvmlDeviceGetPcieThroughput
    gpu.gpm_rates[pynvml.NVML_GPM_METRIC_SM_UTIL] = 0.0
    fake.advance(0.95)  # the next metrics span the whole second since the first GPM sample
    assert backend.sample(NOW + timedelta(seconds=1))[0].sm_active_ratio == pytest.approx(0.04)


def test_processes_with_utilization(h200: tuple[FakeNvml, NvmlBackend]) -> None:
    fake, backend = h200
    gpu = fake.gpus[0]
    fake.advance(10)
    gpu.process_samples = [
        (NOW_US - 20_000_000, 4242, 10, 10),  # before the interval: ignored
        (NOW_US - 5_000_000, 4242, 90, 30),
        (NOW_US - 1_000_000, 4242, 70, 50),
    ]
    procs = backend.sample(NOW)[0].processes
    assert procs is not None
    assert [p.pid for p in procs] == [4242, 4343]
    assert procs[0].used_memory_bytes == 99 * GIB
    assert procs[0].sm_util_ratio == pytest.approx(0.80)
    assert procs[0].memory_util_ratio == pytest.approx(0.40)
    assert procs[1].used_memory_bytes is None
    assert procs[1].sm_util_ratio is None  # no samples for that pid
    assert fake.calls["nvmlDeviceGetProcessUtilization"] == 0  # the newer call worked


@pytest.mark.parametrize("empty_error", [0, pynvml.NVML_ERROR_NOT_FOUND])
def test_no_process_samples_is_none_not_an_error(
    h200: tuple[FakeNvml, NvmlBackend], empty_error: int, caplog: pytest.LogCaptureFixture
) -> None:
    fake, backend = h200
    fake.gpus[0].process_empty_error = empty_error
    for step in range(2):
        fake.advance(10)
        with caplog.at_level(logging.WARNING):
            procs = backend.sample(NOW + timedelta(seconds=10 * step))[0].processes
        assert procs is not None and [p.sm_util_ratio for p in procs] == [None, None]
    # "no samples" is not "unsupported": asked again every cycle, never logged
    assert fake.calls["nvmlDeviceGetProcessesUtilizationInfo"] == 2
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_throttle_reason_flags(h200: tuple[FakeNvml, NvmlBackend]) -> None:
    fake, backend = h200
    gpu = fake.gpus[0]
    gpu.reasons = pynvml.nvmlClocksEventReasonSwPowerCap
    backend.poll()
    gpu.reasons = (
        pynvml.nvmlClocksEventReasonHwThermalSlowdown | pynvml.nvmlClocksEventReasonSwThermalSlowdown
    )
    backend.poll()
    fake.advance(2)
    s = backend.sample(NOW)[0]
    assert s.throttle_reasons == ["sw_power_cap", "sw_thermal_slowdown", "hw_thermal_slowdown"]


def test_reasons_from_mask() -> None:
    assert reasons_from_mask(0) == []
    assert reasons_from_mask(pynvml.nvmlClocksEventReasonGpuIdle) == ["gpu_idle"]
    every = (
        pynvml.nvmlClocksEventReasonGpuIdle
        | pynvml.nvmlClocksEventReasonApplicationsClocksSetting
        | pynvml.nvmlClocksEventReasonSwPowerCap
        | pynvml.nvmlClocksEventReasonHwSlowdown
        | pynvml.nvmlClocksEventReasonSyncBoost
        | pynvml.nvmlClocksEventReasonSwThermalSlowdown
        | pynvml.nvmlClocksEventReasonHwThermalSlowdown
        | pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown
        | pynvml.nvmlClocksEventReasonDisplayClockSetting
    )
    assert reasons_from_mask(every) == [
        "gpu_idle",
        "applications_clocks_setting",
        "sw_power_cap",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal_slowdown",
        "hw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "display_clocks_setting",
    ]
    assert reasons_from_mask(0x1000 | 0x4) == ["sw_power_cap", "0x1000"]


def test_polls_give_idle_fraction_and_stddev() -> None:
    fake = FakeNvml(["A100"])
    backend = open_backend(fake)
    try:
        gpu = fake.gpus[0]
        for util in (0, 0, 0, 90, 90, 0, 0, 0, 90, 90):
            gpu.util_gpu = util
            backend.poll()
            fake.advance(1)
        s = backend.sample(NOW)[0]
        assert s.util_gpu_ratio == pytest.approx(0.36)
        assert s.util_gpu_idle_fraction_ratio == pytest.approx(0.6)
        assert s.util_gpu_stddev_ratio == pytest.approx(0.4409, abs=1e-3)
        # without polls in between, the sample reads once itself
        gpu.util_gpu = 50
        fake.advance(1)
        s = backend.sample(NOW + timedelta(seconds=1))[0]
        assert (s.util_gpu_ratio, s.util_gpu_idle_fraction_ratio, s.util_gpu_stddev_ratio) == (0.5, 0.0, None)
    finally:
        backend.close()


def test_a100_has_no_gpm_and_uses_pcie_throughput() -> None:
    fake = FakeNvml(["A100"])
    fake.gpus[0].pcie_tx_kib, fake.gpus[0].pcie_rx_kib = 2000, 1000
    s = first_sample(fake)
    assert s.sm_active_ratio is None and s.tensor_active_ratio is None and s.nvlink_tx_bytes_per_s is None
    assert fake.calls["nvmlGpmSampleAlloc"] == 0 and fake.calls["nvmlGpmMetricsGet"] == 0
    assert s.pcie_tx_bytes_per_s == 2000 * 1024
    assert s.pcie_rx_bytes_per_s == 1000 * 1024


def test_old_card_not_supported_is_none_and_not_retried() -> None:
    fake = FakeNvml(["K80"])
    gpu = fake.gpus[0]
    gpu.reasons = pynvml.nvmlClocksThrottleReasonGpuIdle
    gpu.memory_used = GIB
    backend = open_backend(fake)
    try:
        for step in range(3):
            backend.poll()
            fake.advance(10)
            s = backend.sample(NOW + timedelta(seconds=10 * step))[0]
            assert s.state == "ok"
            assert s.energy_joules is None  # NotSupported -> absent, not 0
            assert s.ecc_corrected_errors is None and s.ecc_uncorrected_errors is None
            assert s.pcie_tx_bytes_per_s is None
            assert s.sm_active_ratio is None
            assert s.memory_reserved_bytes is None  # v1: used includes the reserve
            assert s.memory_used_bytes == GIB
            assert s.throttle_reasons == ["gpu_idle"]  # via the older ClocksThrottle name
            assert s.power_watts is not None and s.util_gpu_ratio is not None
            assert s.processes == []
    finally:
        backend.close()
    for name in (
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetMemoryInfo_v2",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetProcessesUtilizationInfo",
        "nvmlGpmQueryDeviceSupport",
    ):
        assert fake.calls[name] == 1, name
    assert fake.calls["nvmlDeviceGetTotalEccErrors"] == 2  # corrected and uncorrected, once each
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 2
    assert fake.calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 3  # polled every time: it works


def test_gpu_lost_then_back() -> None:
    fake = FakeNvml(["H200", "H200"])
    backend = open_backend(fake)
    try:
        fake.advance(10)
        assert [s.state for s in backend.sample(NOW)] == ["ok", "ok"]
        fake.gpus[1].failure = pynvml.NVMLError_GpuIsLost
        backend.poll()  # the poller notices first and stops polling that GPU
        fake.advance(10)
        ok, lost = backend.sample(NOW + timedelta(seconds=10))
        assert ok.state == "ok" and ok.util_gpu_ratio is not None
        assert lost.state == "lost"
        assert lost.uuid == "GPU-00000000-0000-0000-0000-000000000001"  # identity kept
        assert lost.util_gpu_ratio is None and lost.memory_used_bytes is None and lost.power_watts is None
        calls = fake.calls["nvmlDeviceGetUtilizationRates"]
        backend.poll()
        assert fake.calls["nvmlDeviceGetUtilizationRates"] == calls + 1  # only the healthy GPU
        fake.gpus[1].failure = None
        fake.advance(10)
        assert [s.state for s in backend.sample(NOW + timedelta(seconds=20))] == ["ok", "ok"]
    finally:
        backend.close()


def test_unknown_error_counts_as_lost() -> None:
    fake = FakeNvml(["A100"])
    backend = open_backend(fake)
    try:
        fake.gpus[0].failure = pynvml.NVMLError_Unknown
        fake.advance(10)
        assert backend.sample(NOW)[0].state == "lost"
    finally:
        backend.close()


def test_gpu_lost_before_start() -> None:
    fake = FakeNvml(["H200", "A100"])
    fake.gpus[0].failure = pynvml.NVMLError_GpuIsLost
    backend = open_backend(fake)
    try:
        fake.advance(10)
        lost, ok = backend.sample(NOW)
        assert (lost.state, lost.uuid, ok.state) == ("lost", None, "ok")
        fake.gpus[0].failure = None
        fake.advance(10)
        again = backend.sample(NOW + timedelta(seconds=10))[0]
        assert again.state == "ok" and again.name == "NVIDIA H200"
    finally:
        backend.close()


def test_other_nvml_errors_are_none_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml(["A100"])
    fake.gpus[0].card = replace(CARDS["A100"], fails={"nvmlDeviceGetComputeRunningProcesses": NoPermission})
    backend = open_backend(fake)
    try:
        with caplog.at_level(logging.WARNING, logger="gpuwatch.collectors.nvml_backend"):
            for step in range(3):
                fake.advance(10)
                assert backend.sample(NOW + timedelta(seconds=10 * step))[0].processes is None
    finally:
        backend.close()
    assert len([r for r in caplog.records if "Insufficient Permissions" in r.getMessage()]) == 1
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 3  # may be temporary: retried


def test_init_failure_is_unavailable() -> None:
    fake = FakeNvml(["H200"], init_error=pynvml.NVMLError_LibraryNotFound)
    with pytest.raises(GpuBackendUnavailable, match="NVML Shared Library Not Found"):
        open_backend(fake)


def test_close_frees_gpm_and_shuts_down_once(h200: tuple[FakeNvml, NvmlBackend]) -> None:
    fake, backend = h200
    assert len(fake.gpm_buffers) == 2
    backend.close()
    backend.close()
    assert fake.gpm_buffers == {}
    assert fake.shutdowns == 1


def test_background_poller_polls_and_stops() -> None:
    fake = FakeNvml(["A100"])
    fake.gpus[0].util_gpu = 42
    backend = NvmlBackend(poll_interval_s=0.01, nvml=fake)
    try:
        for _ in range(500):
            if fake.calls["nvmlDeviceGetUtilizationRates"] >= 3:
                break
            threading.Event().wait(0.01)
        assert fake.calls["nvmlDeviceGetUtilizationRates"] >= 3
        assert backend.sample(NOW)[0].util_gpu_ratio == pytest.approx(0.42)
    finally:
        backend.close()
    assert not any(t.name == "gpuwatch-nvml-poll" for t in threading.enumerate())


@pytest.mark.gpu
def test_real_gpu() -> None:
    """On a machine with a GPU: every reading a current NVIDIA datacenter card has is there."""
    try:
        backend = NvmlBackend(start_poller=False)
    except GpuBackendUnavailable as exc:
        pytest.skip(f"no NVML here: {exc}")
    try:
        backend.sample(datetime.now(timezone.utc))
        for _ in range(3):
            backend.poll()
            threading.Event().wait(0.2)
        samples = backend.sample(datetime.now(timezone.utc))
    finally:
        backend.close()
    assert samples
    for s in samples:
        assert s.state == "ok" and s.uuid and s.uuid.startswith("GPU-")
        assert s.util_gpu_ratio is not None and s.memory_total_bytes and s.power_watts is not None
        assert s.memory_used_bytes <= s.memory_total_bytes
        assert s.sm_clock_max_hz and s.throttle_reasons is not None and s.processes is not None
        if s.name and ("H100" in s.name or "H200" in s.name):
            assert s.sm_active_ratio is not None and s.memory_reserved_bytes is not None


# -- every field, NVLink counters, MIG ------------------------------------------------------


def test_h200_every_field_present(h200: tuple[FakeNvml, NvmlBackend]) -> None:
    """Against the fake H200 every GpuSample field has a value: none silently dropped."""
    fake, backend = h200
    gpu = fake.gpus[0]
    gpu.reasons = pynvml.nvmlClocksEventReasonSwPowerCap
    gpu.gpm_rates[pynvml.NVML_GPM_METRIC_FP64_UTIL] = 5.0
    gpu.gpm_rates[pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC] = 500.0
    gpu.process_samples = [(NOW_US - 1_000_000, 4242, 90, 30)]
    for _ in range(2):
        backend.poll()
        fake.advance(5)
    s = backend.sample(NOW)[0]
    missing = [name for name in type(s).model_fields if getattr(s, name) is None]
    # the GPU collector adds frameworks from /proc, not the backend; a whole GPU is no MIG
    # instance; an H200 remaps rows and retires no pages (page retirement is pre-Ampere)
    assert missing == [*MIG_INSTANCE_ONLY, *PAGE_RETIREMENT, "frameworks"]
    assert s.gr_engine_active_ratio == pytest.approx(0.95)
    assert s.memory_clock_max_hz == 2619e6
    assert s.fp64_active_ratio == pytest.approx(0.05)
    assert s.xid_errors == []  # watched, nothing happened
    assert s.pcie_rx_bytes_per_s == pytest.approx(500.0 * 1024**2)
    assert fake.calls["nvmlDeviceGetFieldValues"] == 0  # GPM has NVLink on Hopper


def test_k80_fields_that_are_absent() -> None:
    """The old card: exactly the unsupported readings are None, the rest are there."""
    fake = FakeNvml(["K80"])
    s = first_sample(fake)
    none = {name for name in type(s).model_fields if getattr(s, name) is None}
    assert none == {
        "util_gpu_stddev_ratio",  # one poll only
        "memory_reserved_bytes",
        "energy_joules",
        "pcie_tx_bytes_per_s",
        "pcie_rx_bytes_per_s",
        "nvlink_tx_bytes_per_s",
        "nvlink_rx_bytes_per_s",
        "ecc_corrected_errors",
        "ecc_uncorrected_errors",
        *ROW_REMAPPING,  # Ampere and newer
        *PAGE_RETIREMENT,  # ECC off: no page is retired
        *GPM_ACTIVITY,
        "gr_engine_active_ratio",
        *MIG_INSTANCE_ONLY,
        "frameworks",  # added by the GPU collector
    }
    assert s.pcie_replay_errors == 0  # Kepler and newer
    assert fake.calls["nvmlDeviceGetFieldValues"] == 1  # every field NotSupported: not asked again


def test_nvlink_rate_from_field_value_counters() -> None:
    fake = FakeNvml(["A100"])
    gpu = fake.gpus[0]
    gpu.nvlink_tx_kib, gpu.nvlink_rx_kib = 7e9, 3e9  # counters since driver load
    gpu.nvlink_tx_kib_per_s, gpu.nvlink_rx_kib_per_s = 1_000_000, 250_000
    backend = open_backend(fake)
    try:
        fake.advance(10)
        first = backend.sample(NOW)[0]
        assert first.nvlink_tx_bytes_per_s is None  # one snapshot: no rate
        fake.advance(10)
        second = backend.sample(NOW + timedelta(seconds=10))[0]
        assert second.nvlink_tx_bytes_per_s == pytest.approx(1_000_000 * 1024)
        assert second.nvlink_rx_bytes_per_s == pytest.approx(250_000 * 1024)
        gpu.nvlink_tx_kib = 0.0  # driver reloaded: counter went back
        fake.advance(10)
        third = backend.sample(NOW + timedelta(seconds=20))[0]
        assert third.nvlink_tx_bytes_per_s is None and third.nvlink_rx_bytes_per_s is not None
    finally:
        backend.close()


def test_mig_devices_listed_and_each_sent_as_a_gpu(caplog: pytest.LogCaptureFixture) -> None:
    from tests.gpu.fake_pynvml import FakeMig

    fake = FakeNvml(["A100", "A100"])
    gpu = fake.gpus[0]
    gpu.mig_mode = (pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE)
    gpu.mig_devices = [
        FakeMig(slot=0, gpu_instance_id=1, compute_instance_id=0, memory_total=40 * GIB, memory_used=GIB),
        FakeMig(slot=2, gpu_instance_id=5, compute_instance_id=0, memory_total=10 * GIB),
    ]
    backend = open_backend(fake)
    try:
        assert backend.mig_devices() == []  # nothing sampled yet
        fake.advance(10)
        with caplog.at_level(logging.INFO, logger="gpuwatch.collectors.nvml_backend"):
            samples = backend.sample(NOW)
            fake.advance(10)
            backend.sample(NOW + timedelta(seconds=10))
        # the two cards, then the MIG-mode card's two instances under 1000 + 10 x card + slot
        assert [(s.gpu_index, s.state) for s in samples] == [(0, "ok"), (1, "ok"), (1000, "ok"), (1002, "ok")]
        migs = backend.mig_devices()
        assert [(m.gpu_index, m.mig_index, m.gpu_instance_id) for m in migs] == [(0, 0, 1), (0, 2, 5)]
        assert migs[0].uuid == "MIG-00000000-0000-0000-0000-000000000000"
        assert migs[0].parent_uuid == samples[0].uuid
        assert (migs[0].memory_used_bytes, migs[0].memory_total_bytes) == (GIB, 40 * GIB)
        assert migs[1].multiprocessor_count == 14
        # the layout is logged once, not every sample
        assert len([r for r in caplog.records if "MIG mode" in r.getMessage()]) == 1
    finally:
        backend.close()
    assert fake.calls["nvmlDeviceGetMaxMigDeviceCount"] == 1


def test_mig_mode_off_lists_nothing(h200: tuple[FakeNvml, NvmlBackend]) -> None:
    fake, backend = h200
    fake.advance(10)
    backend.sample(NOW)
    assert backend.mig_devices() == []
    assert fake.calls["nvmlDeviceGetMigDeviceHandleByIndex"] == 0


def test_mixed_node_mig_instances_carry_gpm_activity_not_utilization() -> None:
    """An H200 in MIG mode (a 1g and a 3g instance) next to a whole H200: the instances are
    samples of their own with MIG UUIDs, their card, instance ids, share of the card, memory,
    processes and GPM graphics-engine activity from nvmlGpmMigSampleGet; NVML utilization is
    None on them (NotSupported) and on the card in MIG mode, which keeps its power and
    temperature and lists no processes of its own."""
    fake = FakeNvml(["H200", "H200"])
    whole, card = fake.gpus
    whole.util_gpu = 60
    whole.processes = [(100, GIB)]
    card.power_mw, card.temperature = 300_000, 55
    small, large = card.enable_mig([1, 3])
    small.busy(80.0)
    small.memory_used, small.processes = 5 * GIB, [(200, 5 * GIB)]
    large.memory_used, large.processes = GIB, [(300, GIB)]  # holds memory, computes nothing
    backend = open_backend(fake)
    try:
        for second in range(3):
            backend.poll()
            fake.advance(10)
            samples = backend.sample(NOW + timedelta(seconds=10 * second))
    finally:
        backend.close()
    by_index = {s.gpu_index: s for s in samples}
    assert sorted(by_index) == [0, 1, 1010, 1011]
    assert by_index[0].util_gpu_ratio == pytest.approx(0.6) and by_index[0].parent_gpu_index is None
    parent = by_index[1]
    assert parent.util_gpu_ratio is None and parent.processes is None
    assert parent.power_watts == pytest.approx(300.0) and parent.temperature_celsius == 55
    one, three = by_index[1010], by_index[1011]
    assert one.uuid == small.uuid and one.uuid.startswith("MIG-")
    assert (one.parent_gpu_index, one.parent_uuid) == (1, parent.uuid)
    assert (one.mig_gpu_instance_id, one.mig_compute_instance_id) == (small.gpu_instance_id, 0)
    assert one.name == "NVIDIA H200 MIG 1g.20gb"
    assert one.card_fraction_ratio == pytest.approx(1 / 7)
    assert three.card_fraction_ratio == pytest.approx(3 / 7)
    assert one.util_gpu_ratio is None and one.power_watts is None
    assert one.gr_engine_active_ratio == pytest.approx(0.80)
    assert one.sm_active_ratio == pytest.approx(0.72)
    assert one.tensor_active_ratio == pytest.approx(0.40)
    assert three.gr_engine_active_ratio is None  # no counter advanced: GPM says not supported
    assert (one.memory_used_bytes, one.memory_total_bytes) == (5 * GIB, small.memory_total)
    assert [p.pid for p in one.processes or []] == [200]
    assert [p.pid for p in three.processes or []] == [300]
    assert fake.calls["nvmlGpmMigSampleGet"] >= 4
    assert not fake.gpm_buffers  # every buffer freed at close


def test_mig_instance_gpm_needs_two_samples() -> None:
    """The first sample of an instance only takes GPM's starting point: activity is None."""
    fake = FakeNvml(["H200"])
    (mig,) = fake.gpus[0].enable_mig([7])
    mig.busy(50.0)
    backend = open_backend(fake)
    try:
        fake.advance(10)
        first = backend.sample(NOW)
        fake.advance(10)
        second = backend.sample(NOW + timedelta(seconds=10))
    finally:
        backend.close()
    assert [s.gpu_index for s in first] == [0, 1000]
    assert first[1].gr_engine_active_ratio is None and first[1].card_fraction_ratio == 1.0
    assert second[1].gr_engine_active_ratio == pytest.approx(0.5)


def test_mig_on_a_card_without_gpm_has_no_activity_at_all() -> None:
    """An A100 in MIG mode: no GPM, so neither utilization nor graphics-engine activity."""
    fake = FakeNvml(["A100"])
    fake.gpus[0].enable_mig([2, 2])
    backend = open_backend(fake)
    try:
        for second in range(2):
            fake.advance(10)
            samples = backend.sample(NOW + timedelta(seconds=10 * second))
    finally:
        backend.close()
    instances = [s for s in samples if s.parent_gpu_index is not None]
    assert [s.gpu_index for s in instances] == [1000, 1001]
    assert all(s.util_gpu_ratio is None and s.gr_engine_active_ratio is None for s in instances)
    assert all(s.card_fraction_ratio == pytest.approx(2 / 7) for s in instances)
    assert fake.calls["nvmlGpmMigSampleGet"] == 0


# -- memory health and the PCIe link ------------------------------------------------------------


def test_row_remapping_as_nvml_reports_it(h200: tuple[FakeNvml, NvmlBackend]) -> None:
    """nvmlDeviceGetRemappedRows' four answers arrive as they are; retired pages stay None."""
    fake, backend = h200
    gpu = fake.gpus[0]
    fake.advance(10)
    healthy = backend.sample(NOW)[0]
    assert (healthy.remapped_rows_correctable, healthy.remapped_rows_uncorrectable) == (0, 0)
    assert (healthy.row_remap_pending, healthy.row_remap_failed) == (False, False)
    assert healthy.pcie_replay_errors == 0
    gpu.remapped_correctable, gpu.remapped_uncorrectable = 3, 1
    gpu.remap_pending, gpu.pcie_replays = True, 42
    fake.advance(10)
    s = backend.sample(NOW + timedelta(seconds=10))[0]
    assert (s.remapped_rows_correctable, s.remapped_rows_uncorrectable) == (3, 1)
    assert s.row_remap_pending is True and s.row_remap_failed is False
    assert s.pcie_replay_errors == 42
    gpu.remap_pending, gpu.remap_failed = False, True  # reset done; a later remap failed
    fake.advance(10)
    s = backend.sample(NOW + timedelta(seconds=20))[0]
    assert s.row_remap_pending is False and s.row_remap_failed is True
    # an H200 does not retire pages: None, never 0, and asked once per call
    assert (s.retired_pages_sbe, s.retired_pages_dbe, s.retired_pages_pending) == (None, None, None)
    assert fake.calls["nvmlDeviceGetRetiredPages"] == 2  # SBE and DBE, once each
    assert fake.calls["nvmlDeviceGetRetiredPagesPendingStatus"] == 1
    assert fake.calls["nvmlDeviceGetRemappedRows"] == 3  # once per sample


def test_retired_pages_on_a_card_before_ampere() -> None:
    """A V100 retires pages (counted by cause, from the address lists) and has no row remapper."""
    fake = FakeNvml(["V100"])
    gpu = fake.gpus[0]
    gpu.retired_sbe, gpu.retired_dbe, gpu.retired_pending = [0x1000, 0x2000, 0x3000], [0x9000], True
    s = first_sample(fake)
    assert (s.retired_pages_sbe, s.retired_pages_dbe, s.retired_pages_pending) == (3, 1, True)
    for name in ROW_REMAPPING:
        assert getattr(s, name) is None, name
    assert s.ecc_corrected_errors == 0  # ECC on
    gpu.retired_sbe, gpu.retired_dbe, gpu.retired_pending = [], [], False
    assert (first_sample(fake).retired_pages_sbe, first_sample(fake).retired_pages_pending) == (0, False)


def test_remapped_rows_of_a_card_in_mig_mode_and_none_on_its_instances() -> None:
    """NVML refuses remapped rows on a card in MIG mode with instances: None while they exist,
    asked again every sample (not forgotten as unsupported), read again once they are gone.
    The instances never carry the card's memory health."""
    fake = FakeNvml(["A100"])
    gpu = fake.gpus[0]
    gpu.remapped_uncorrectable, gpu.pcie_replays = 2, 9
    gpu.enable_mig([3, 4])
    backend = open_backend(fake)
    try:
        fake.advance(10)
        card, *instances = backend.sample(NOW)
        assert card.parent_gpu_index is None and len(instances) == 2
        assert card.remapped_rows_uncorrectable is None and card.row_remap_pending is None
        assert card.pcie_replay_errors == 9
        for instance in instances:
            for name in (*ROW_REMAPPING, *PAGE_RETIREMENT, "pcie_replay_errors"):
                assert getattr(instance, name) is None, name
        gpu.mig_devices = []  # instances destroyed, MIG mode still on
        fake.advance(10)
        card = backend.sample(NOW + timedelta(seconds=10))[0]
        assert card.remapped_rows_uncorrectable == 2 and card.row_remap_pending is False
        assert fake.calls["nvmlDeviceGetRemappedRows"] == 2
    finally:
        backend.close()


def test_a_count_no_card_can_have_is_none_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml(["H200"])
    fake.gpus[0].remapped_correctable = 0xFFFFFFFF  # a driver answering nonsense
    backend = open_backend(fake)
    try:
        with caplog.at_level(logging.WARNING):
            for step in range(2):
                fake.advance(10)
                s = backend.sample(NOW + timedelta(seconds=10 * step))[0]
                assert s.remapped_rows_correctable is None and s.remapped_rows_uncorrectable == 0
    finally:
        backend.close()
    assert sum("not a count" in r.message for r in caplog.records) == 1
