"""The amdsmi backend against the fake amdsmi (documented dict shapes, "N/A", status codes)."""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from gpuwatch import wire
from gpuwatch.collectors import gpu
from gpuwatch.collectors.amdsmi_backend import AmdSmiBackend, first_number, number
from gpuwatch.collectors.base import run_collector
from gpuwatch.collectors.gpu import GpuCollector
from gpuwatch.collectors.gpu_backend import GpuBackendUnavailable
from gpuwatch.config import Settings
from gpuwatch.wire import GpuSample
from gpuwatch.wire import v2 as wire_v2
from tests.gpu.fake_amdsmi import CARDS, NA, STATUS, FakeAmdSmi, FakeProcess
from tests.gpu.fields import GPM_ACTIVITY, MIG_INSTANCE_ONLY, PAGE_RETIREMENT, ROW_REMAPPING

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
MIB = 1024**2
GIB = 1024**3
#: wire fields amdsmi has no source for, on every card
NEVER_ON_AMD = {
    "memory_reserved_bytes",
    *GPM_ACTIVITY,
    "gr_engine_active_ratio",
    "xid_errors",
    "frameworks",  # the GPU collector adds it from /proc, not the backend
    *MIG_INSTANCE_ONLY,  # compute partitions are not read
    # NVIDIA's row remapping and page retirement counts: amdsmi has no equivalent
    *ROW_REMAPPING,
    *PAGE_RETIREMENT,
}


def open_backend(fake: FakeAmdSmi, **options: object) -> AmdSmiBackend:
    return AmdSmiBackend(amdsmi=fake, start_poller=False, clock=fake.clock, **options)  # type: ignore[arg-type]


def cycle(fake: FakeAmdSmi, backend: AmdSmiBackend, polls: int = 1, seconds: float = 10.0) -> list[GpuSample]:
    """``seconds`` pass with ``polls`` 1 s polls in them, then one sample."""
    for _ in range(polls):
        fake.advance(seconds / polls)
        backend.poll()
    return backend.sample(NOW)


def none_fields(sample: GpuSample) -> set[str]:
    return {name for name, value in sample.model_dump().items() if value is None}


@pytest.fixture
def mi300x() -> Iterator[tuple[FakeAmdSmi, AmdSmiBackend]]:
    fake = FakeAmdSmi(["MI300X"])
    g = fake.gpus[0]
    g.gfx_activity, g.umc_activity = 97, 40
    g.socket_power_w, g.gfx_clk_mhz, g.mem_clk_mhz, g.hotspot_c = 700, 2100, 1300, 81
    g.vram_used_mb = 150_000
    g.ecc_correctable, g.ecc_uncorrectable = 3, 1
    g.pcie_replays = 17
    g.xgmi_read_kb_per_s, g.xgmi_write_kb_per_s = 2.0e6, 1.0e6
    g.processes = [FakeProcess(4242, 140 * GIB, gfx_busy=0.75), FakeProcess(4343, 2 * GIB)]
    backend = open_backend(fake)
    yield fake, backend
    backend.close()


def test_mi300x_fields(mi300x: tuple[FakeAmdSmi, AmdSmiBackend]) -> None:
    fake, backend = mi300x
    energy_before = fake.gpus[0].energy_uj
    cycle(fake, backend, polls=3)  # counters (XGMI, GFX ns) need a first reading
    s = cycle(fake, backend, polls=3)[0]
    assert (s.gpu_index, s.name, s.state, s.simulated) == (0, "AMD Instinct MI300X", "ok", False)
    assert s.uuid == fake.gpus[0].uuid
    assert s.pci_bus_id == "0000:0c:00.0"
    assert s.interval_s == pytest.approx(10)
    assert s.util_gpu_ratio == pytest.approx(0.97)  # gfx_activity %
    assert s.util_memory_ratio == pytest.approx(0.40)  # umc_activity %
    assert (s.util_gpu_idle_fraction_ratio, s.util_gpu_stddev_ratio) == (0.0, 0.0)
    assert s.memory_used_bytes == 150_000 * MIB  # vram_used, MiB
    assert s.memory_total_bytes == 196_592 * MIB
    assert s.power_watts == pytest.approx(700.0)  # current_socket_power, W
    assert s.power_limit_watts == pytest.approx(750.0)  # power_cap, µW
    assert s.power_default_limit_watts == pytest.approx(750.0)  # default_power_cap, µW
    # energy_accumulator * counter_resolution, µJ; the fake's counter truncates to whole counts
    assert s.energy_joules == pytest.approx((energy_before + 700 * 20 * 1e6) / 1e6, abs=1e-4)
    assert s.sm_clock_hz == pytest.approx(2.1e9)  # GFX clk, MHz
    assert s.sm_clock_max_hz == pytest.approx(2.1e9)
    assert s.memory_clock_hz == pytest.approx(1.3e9)
    assert s.memory_clock_max_hz == pytest.approx(1.3e9)
    assert s.temperature_celsius == 81  # hotspot
    assert s.throttle_reasons == []
    assert (s.ecc_corrected_errors, s.ecc_uncorrected_errors) == (3, 1)
    assert s.pcie_replay_errors == 17  # amdsmi_get_gpu_pci_replay_counter
    # xgmi_write_data_acc is what this GPU sent, xgmi_read_data_acc what it received (KB)
    assert s.nvlink_tx_bytes_per_s == pytest.approx(1.0e9)
    assert s.nvlink_rx_bytes_per_s == pytest.approx(2.0e9)
    assert s.pcie_tx_bytes_per_s is None and s.pcie_rx_bytes_per_s is None  # pcie_throughput off
    assert s.processes is not None
    assert [(p.pid, p.used_memory_bytes) for p in s.processes] == [(4242, 140 * GIB), (4343, 2 * GIB)]
    assert s.processes[0].sm_util_ratio == pytest.approx(0.75)  # GFX ns / interval
    assert s.processes[1].sm_util_ratio == 0.0
    assert s.processes[0].memory_util_ratio is None
    assert none_fields(s) == NEVER_ON_AMD | {"pcie_tx_bytes_per_s", "pcie_rx_bytes_per_s"}


def test_a_power_cap_below_the_default(mi300x: tuple[FakeAmdSmi, AmdSmiBackend]) -> None:
    """amd-smi set --power-cap 500: power_cap follows, default_power_cap stays 750 W."""
    fake, backend = mi300x
    fake.gpus[0].power_cap_uw = 500_000_000
    s = cycle(fake, backend, polls=2)[0]
    assert (s.power_limit_watts, s.power_default_limit_watts) == (500.0, 750.0)


def test_mi250x_fields_that_are_absent() -> None:
    """gpu_metrics 1.3: no XGMI data counters, no violation status; PCIe when asked for."""
    fake = FakeAmdSmi(["MI250X"])
    g = fake.gpus[0]
    g.socket_power_w, g.pcie_sent, g.pcie_received = 420, 3_000_000, 5_000_000
    backend = open_backend(fake, pcie_throughput=True)
    try:
        cycle(fake, backend, polls=2)
        s = cycle(fake, backend, polls=2)[0]
    finally:
        backend.close()
    assert s.name == "AMD Instinct MI250X"
    assert s.power_watts == pytest.approx(420.0)  # average_socket_power: current is "N/A"
    assert s.power_limit_watts == pytest.approx(560.0)
    assert (s.pcie_tx_bytes_per_s, s.pcie_rx_bytes_per_s) == (3_000_000, 5_000_000)
    assert s.throttle_reasons == []  # from gpu_metrics throttle_status
    assert none_fields(s) == NEVER_ON_AMD | {"nvlink_tx_bytes_per_s", "nvlink_rx_bytes_per_s"}
    assert fake.calls["amdsmi_get_violation_status"] == 1  # not supported: asked once


def test_xgmi_rates_need_two_readings_and_a_forward_counter(
    mi300x: tuple[FakeAmdSmi, AmdSmiBackend],
) -> None:
    fake, backend = mi300x
    first = cycle(fake, backend)[0]
    assert first.nvlink_tx_bytes_per_s is None and first.nvlink_rx_bytes_per_s is None
    assert cycle(fake, backend)[0].nvlink_rx_bytes_per_s == pytest.approx(2.0e9)
    fake.gpus[0].xgmi_read_kb = 0.0  # driver reloaded: the counter starts again
    after_reload = cycle(fake, backend)[0]
    assert after_reload.nvlink_rx_bytes_per_s is None
    assert after_reload.nvlink_tx_bytes_per_s == pytest.approx(1.0e9)
    assert cycle(fake, backend)[0].nvlink_rx_bytes_per_s == pytest.approx(2.0e9)


def test_card_without_xgmi_counters_is_not_asked_for_them_again() -> None:
    fake = FakeAmdSmi(["MI250X"])
    backend = open_backend(fake)
    try:
        for _ in range(3):
            s = cycle(fake, backend)[0]
            assert s.nvlink_tx_bytes_per_s is None
    finally:
        backend.close()
    # once per poll for throttle_status, once for the XGMI counters in the first sample only
    assert fake.calls["amdsmi_get_gpu_metrics_info"] == 3 + 1


def test_na_values_are_none_and_asked_again() -> None:
    fake = FakeAmdSmi(["MI300X"])
    g = fake.gpus[0]
    g.card = replace(g.card, na=g.card.na | {"gfx_activity", "current_socket_power"})
    backend = open_backend(fake)
    try:
        samples = [cycle(fake, backend, polls=2)[0] for _ in range(2)]
    finally:
        backend.close()
    s = samples[-1]
    assert s.util_gpu_ratio is None and s.util_gpu_idle_fraction_ratio is None
    assert s.util_memory_ratio == 0.0  # the same call's other field is there
    assert s.power_watts is None  # current "N/A" and average "N/A" on this card
    assert s.state == "ok"
    assert fake.calls["amdsmi_get_gpu_activity"] == 4  # every poll: "N/A" is not "not supported"
    assert fake.calls["amdsmi_get_power_info"] == 4


def test_na_vram_is_none() -> None:
    fake = FakeAmdSmi(["MI300X"])
    original = fake.amdsmi_get_gpu_vram_usage

    def vram(handle: object) -> dict[str, object]:
        return {**original(handle), "vram_used": NA}  # type: ignore[arg-type]

    fake.amdsmi_get_gpu_vram_usage = vram  # type: ignore[method-assign]
    backend = open_backend(fake)
    try:
        s = cycle(fake, backend)[0]
    finally:
        backend.close()
    assert s.memory_used_bytes is None and s.memory_total_bytes == 196_592 * MIB


@pytest.mark.parametrize(
    "status", [STATUS.AMDSMI_STATUS_NOT_SUPPORTED, STATUS.AMDSMI_STATUS_NOT_YET_IMPLEMENTED]
)
def test_not_supported_is_none_and_not_asked_again(status: int) -> None:
    fake = FakeAmdSmi(["MI300X"])
    g = fake.gpus[0]
    g.card = replace(g.card, fails={**g.card.fails, "amdsmi_get_energy_count": status})
    backend = open_backend(fake)
    try:
        for _ in range(3):
            s = cycle(fake, backend, polls=2)[0]
            assert s.energy_joules is None and s.state == "ok"
    finally:
        backend.close()
    assert fake.calls["amdsmi_get_energy_count"] == 1


def test_binding_without_a_function_counts_as_not_supported(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeAmdSmi(["MI300X"])
    monkeypatch.delattr(FakeAmdSmi, "amdsmi_get_violation_status")  # an amdsmi older than 6.3
    backend = open_backend(fake)
    try:
        fake.gpus[0].throttle_status = True  # an MI300X leaves it "N/A" all the same
        s = cycle(fake, backend, polls=2)[0]
    finally:
        backend.close()
    assert s.throttle_reasons is None


def test_violation_status_gives_reasons_across_the_polls(mi300x: tuple[FakeAmdSmi, AmdSmiBackend]) -> None:
    fake, backend = mi300x
    g = fake.gpus[0]
    g.violations = {"ppt_pwr": True}
    fake.advance(1)
    backend.poll()
    g.violations = {"hbm_thrm": True, "prochot_thrm": True}
    fake.advance(1)
    backend.poll()
    s = backend.sample(NOW)[0]
    assert s.throttle_reasons == ["sw_power_cap", "hw_slowdown", "hw_thermal_slowdown"]
    g.violations = {}
    assert cycle(fake, backend)[0].throttle_reasons == []


def test_throttle_status_flag_on_cards_without_violation_status() -> None:
    fake = FakeAmdSmi(["MI250X"])
    fake.gpus[0].throttle_status = True
    backend = open_backend(fake)
    try:
        assert cycle(fake, backend)[0].throttle_reasons == ["amd_throttle_status"]
    finally:
        backend.close()


def test_polls_give_idle_fraction_and_stddev(mi300x: tuple[FakeAmdSmi, AmdSmiBackend]) -> None:
    fake, backend = mi300x
    for pct in (0, 100, 0, 100):
        fake.gpus[0].gfx_activity = pct
        fake.advance(1)
        backend.poll()
    s = backend.sample(NOW)[0]
    assert s.util_gpu_ratio == pytest.approx(0.5)
    assert s.util_gpu_idle_fraction_ratio == pytest.approx(0.5)
    assert s.util_gpu_stddev_ratio == pytest.approx(0.5)


def test_process_gfx_share_needs_two_readings(mi300x: tuple[FakeAmdSmi, AmdSmiBackend]) -> None:
    fake, backend = mi300x
    first = cycle(fake, backend)[0].processes
    assert first is not None and [p.sm_util_ratio for p in first] == [None, None]
    fake.gpus[0].processes[0].gfx_busy = 0.25
    fake.gpus[0].processes.append(FakeProcess(5000, GIB, gfx_busy=1.0))
    second = cycle(fake, backend)[0].processes
    assert second is not None
    assert [(p.pid, p.sm_util_ratio) for p in second] == [(4242, 0.25), (4343, 0.0), (5000, None)]


def test_gpu_lost_then_back(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeAmdSmi(["MI300X", "MI300X"])
    backend = open_backend(fake)
    try:
        fake.gpus[1].failure = STATUS.AMDSMI_STATUS_NOT_FOUND
        with caplog.at_level(logging.WARNING, logger="gpuwatch.collectors.amdsmi_backend"):
            lost = cycle(fake, backend)
            again = cycle(fake, backend)
        assert [s.state for s in lost] == ["ok", "lost"] == [s.state for s in again]
        assert lost[1].uuid == fake.gpus[1].uuid and lost[1].name == "AMD Instinct MI300X"
        assert lost[1].util_gpu_ratio is None and lost[1].interval_s == pytest.approx(10)
        assert sum("lost" in r.getMessage() for r in caplog.records) == 1  # said once
        fake.gpus[1].failure = None
        back = cycle(fake, backend)
        assert [s.state for s in back] == ["ok", "ok"]
        assert back[1].util_gpu_ratio == 0.0
        assert "answers again" in caplog.text
    finally:
        backend.close()


@pytest.mark.parametrize(
    "status",
    [
        STATUS.AMDSMI_STATUS_IO,
        STATUS.AMDSMI_STATUS_DRIVER_NOT_LOADED,
        STATUS.AMDSMI_STATUS_UNKNOWN_ERROR,
    ],
)
def test_statuses_that_mean_lost(status: int) -> None:
    fake = FakeAmdSmi(["MI300X"])
    backend = open_backend(fake)
    try:
        fake.gpus[0].failure = status
        assert cycle(fake, backend)[0].state == "lost"
    finally:
        backend.close()


def test_gpu_lost_before_start_opens_later() -> None:
    fake = FakeAmdSmi(["MI300X"])
    fake.gpus[0].failure = STATUS.AMDSMI_STATUS_NOT_FOUND
    backend = open_backend(fake)
    try:
        assert cycle(fake, backend)[0].state == "lost"
        fake.gpus[0].failure = None
        s = cycle(fake, backend)[0]
        assert (s.state, s.name, s.sm_clock_max_hz) == ("ok", "AMD Instinct MI300X", pytest.approx(2.1e9))
    finally:
        backend.close()


@pytest.mark.parametrize("status", [STATUS.AMDSMI_STATUS_RETRY, STATUS.AMDSMI_STATUS_BUSY])
def test_retry_is_none_asked_again_and_not_logged(status: int, caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeAmdSmi(["MI300X"])
    g = fake.gpus[0]
    g.card = replace(g.card, fails={**g.card.fails, "amdsmi_get_gpu_process_list": status})
    backend = open_backend(fake)
    try:
        with caplog.at_level(logging.DEBUG, logger="gpuwatch.collectors.amdsmi_backend"):
            for _ in range(2):
                s = cycle(fake, backend)[0]
                assert s.processes is None and s.state == "ok"
    finally:
        backend.close()
    assert fake.calls["amdsmi_get_gpu_process_list"] == 2
    assert "process_list" not in caplog.text


def test_other_errors_are_none_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeAmdSmi(["MI300X"])
    g = fake.gpus[0]
    g.card = replace(g.card, fails={**g.card.fails, "amdsmi_get_gpu_total_ecc_count": 10})  # NO_PERM
    backend = open_backend(fake)
    try:
        with caplog.at_level(logging.WARNING, logger="gpuwatch.collectors.amdsmi_backend"):
            for _ in range(3):
                s = cycle(fake, backend)[0]
                assert s.ecc_corrected_errors is None and s.state == "ok"
    finally:
        backend.close()
    assert fake.calls["amdsmi_get_gpu_total_ecc_count"] == 3  # asked again: it may be transient
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "GPU 0: amdsmi_get_gpu_total_ecc_count failed: AMDSMI_STATUS_NO_PERM - Permission Denied"
    ]


def test_init_failure_is_unavailable_in_one_line() -> None:
    fake = FakeAmdSmi(["MI300X"], init_error=STATUS.AMDSMI_STATUS_DRIVER_NOT_LOADED)
    with pytest.raises(GpuBackendUnavailable) as raised:
        open_backend(fake)
    assert str(raised.value) == "amdsmi_init: AMDSMI_STATUS_DRIVER_NOT_LOADED - Driver not loaded"


def test_no_gpu_is_unavailable_and_shuts_down() -> None:
    fake = FakeAmdSmi([])
    with pytest.raises(GpuBackendUnavailable, match=r"^amdsmi finds no GPU$"):
        open_backend(fake)
    assert fake.shutdowns == 1 and not fake.initialized


def test_missing_amdsmi_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # what `import amdsmi` sees without the package
    with pytest.raises(
        GpuBackendUnavailable, match=r"^amdsmi is not installed \(pip install 'gpuwatch\[amd\]'\)$"
    ):
        AmdSmiBackend()


def test_close_shuts_down_once(mi300x: tuple[FakeAmdSmi, AmdSmiBackend]) -> None:
    fake, backend = mi300x
    backend.close()
    backend.close()
    assert fake.shutdowns == 1


def test_background_poller_polls_and_stops() -> None:
    fake = FakeAmdSmi(["MI300X"])
    backend = AmdSmiBackend(0.01, amdsmi=fake)
    try:
        polled = threading.Event()
        for _ in range(500):  # up to 5 s on a busy machine
            if fake.calls["amdsmi_get_gpu_activity"] >= 3:
                polled.set()
                break
            threading.Event().wait(0.01)
        assert polled.is_set()
    finally:
        backend.close()
    stopped_at = fake.calls["amdsmi_get_gpu_activity"]
    threading.Event().wait(0.05)
    assert fake.calls["amdsmi_get_gpu_activity"] == stopped_at


def test_numbers_and_na() -> None:
    assert number(NA) is None and number(None) is None and number(True) is None
    assert number(7) == 7.0
    assert (
        first_number(
            {"current_socket_power": NA, "average_socket_power": 300},
            ("current_socket_power", "average_socket_power"),
        )
        == 300
    )
    assert (
        first_number(
            {"current_socket_power": 650, "average_socket_power": 300},
            ("current_socket_power", "average_socket_power"),
        )
        == 650
    )
    assert first_number(None, ("a",)) is None


def test_sample_through_the_collector_to_a_wire_batch(mi300x: tuple[FakeAmdSmi, AmdSmiBackend]) -> None:
    from gpuwatch.collectors.attribution import GPU_PROCESSES

    fake, backend = mi300x
    collector = GpuCollector(backend)
    fake.advance(10)
    GPU_PROCESSES.clear()
    run = run_collector(collector, NOW)
    assert run.error is None and len(run.samples) == 1
    seen = GPU_PROCESSES.latest(NOW, max_age_s=60)
    assert seen is not None and seen[0].pids == (4242, 4343)
    GPU_PROCESSES.clear()
    batch = wire.Batch(node="mi300x-node01", agent_version="test", samples=run.samples)
    for version in (1, 2):
        decoded = wire_v2.decode(wire_v2.encode(batch, version))
        assert decoded.samples == batch.samples
    sent = decoded.samples[0]
    assert isinstance(sent, GpuSample) and sent.name == "AMD Instinct MI300X" and not sent.simulated


# -- the factory ----------------------------------------------------------------------


@pytest.fixture
def no_nvidia(monkeypatch: pytest.MonkeyPatch) -> None:
    """This host's NVML, whatever it is, reports no driver."""
    import pynvml

    from gpuwatch.collectors import nvml_backend
    from tests.gpu.fake_pynvml import FakeNvml

    monkeypatch.setattr(
        nvml_backend, "pynvml", FakeNvml(["H200"], init_error=pynvml.NVMLError_DriverNotLoaded)
    )
    monkeypatch.setattr(gpu, "_auto_disabled_logged", False)


def test_backend_amdsmi_from_config(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeAmdSmi(["MI300X", "MI250X"])
    monkeypatch.setitem(sys.modules, "amdsmi", fake)
    collector = gpu.gpu_collector(Settings(gpu={"backend": "amdsmi"}))
    assert isinstance(collector, GpuCollector)
    try:
        assert isinstance(collector.backend, AmdSmiBackend) and collector.backend.name == "amdsmi"
        assert [s.name for s in collector.collect(NOW)] == ["AMD Instinct MI300X", "AMD Instinct MI250X"]
    finally:
        collector.close()
    assert fake.shutdowns == 1


def test_backend_amdsmi_without_it_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    with pytest.raises(
        GpuBackendUnavailable, match=r"^gpu\.backend = 'amdsmi' but amdsmi cannot start: amdsmi is"
    ):
        gpu.gpu_collector(Settings(gpu={"backend": "amdsmi"}))


def test_auto_tries_amdsmi_after_nvml(no_nvidia: None, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeAmdSmi(["MI250X"])
    monkeypatch.setitem(sys.modules, "amdsmi", fake)
    collector = gpu.gpu_collector(Settings(gpu={"backend": "auto"}))
    assert isinstance(collector, GpuCollector)
    try:
        assert isinstance(collector.backend, AmdSmiBackend)
    finally:
        collector.close()


def test_auto_with_neither_disables_and_says_both_once(
    no_nvidia: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", FakeAmdSmi([]))
    with caplog.at_level(logging.INFO, logger="gpuwatch.collectors.gpu"):
        assert gpu.gpu_collector(Settings(gpu={"backend": "auto"})) is None
        assert gpu.gpu_collector(Settings(gpu={"backend": "auto"})) is None
    messages = [r.getMessage() for r in caplog.records if "GPU collector disabled" in r.getMessage()]
    assert messages == [
        "no NVIDIA GPU/driver (Driver Not Loaded) nor AMD GPU (amdsmi finds no GPU); GPU collector disabled"
    ]


def test_fake_cards_differ_in_what_they_support() -> None:
    """The two fake cards keep the capability split the tests above rely on."""
    assert "amdsmi_get_violation_status" in CARDS["MI250X"].fails
    assert "amdsmi_get_violation_status" not in CARDS["MI300X"].fails
    assert (CARDS["MI300X"].xgmi_links, CARDS["MI250X"].xgmi_links) == (7, 0)


def test_pcie_replay_counter_not_supported_is_none_and_not_asked_again() -> None:
    fake = FakeAmdSmi(["MI250X"])
    g = fake.gpus[0]
    g.card = replace(
        g.card,
        fails={**g.card.fails, "amdsmi_get_gpu_pci_replay_counter": STATUS.AMDSMI_STATUS_NOT_SUPPORTED},
    )
    backend = open_backend(fake)
    try:
        for _ in range(3):
            assert cycle(fake, backend)[0].pcie_replay_errors is None  # never 0
    finally:
        backend.close()
    assert fake.calls["amdsmi_get_gpu_pci_replay_counter"] == 1
