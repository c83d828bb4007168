"""The simulated backend: determinism, each scenario's signature, NVML semantics."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

import pytest

from gpuwatch.collectors.sim_backend import (
    MODELS,
    SCENARIOS,
    Activity,
    SimulatedBackend,
    Steady,
    find_model,
    parse_scenario_spec,
)
from gpuwatch.wire import GpuSample
from tests.gpu.fields import GPM_ACTIVITY

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def run(backend: SimulatedBackend, seconds: list[float]) -> list[list[GpuSample]]:
    """Sample at T0 + each of ``seconds``."""
    return [backend.sample(T0 + timedelta(seconds=s)) for s in seconds]


def window(scenario: str, *, at: float = 300.0, length: float = 60.0, **kwargs) -> GpuSample:
    """GPU 0's sample over (at - length, at] of virtual time."""
    backend = SimulatedBackend(scenario, gpus=1, start=T0, **kwargs)
    return run(backend, [at - length, at])[1][0]


# -- determinism --------------------------------------------------------------------------


def test_same_seed_same_samples() -> None:
    times = [10, 20, 35, 36.5, 60]
    first = run(SimulatedBackend("input-bound", gpus=3, seed=7, start=T0), times)
    second = run(SimulatedBackend("input-bound", gpus=3, seed=7, start=T0), times)
    assert first == second


def test_different_seed_different_samples() -> None:
    a = run(SimulatedBackend("training", gpus=2, seed=1, start=T0), [10, 20])
    b = run(SimulatedBackend("training", gpus=2, seed=2, start=T0), [10, 20])
    assert a != b
    assert a[0][0].uuid != b[0][0].uuid


def test_readings_do_not_depend_on_call_history() -> None:
    """The energy counter at one instant is the same however the backend was sampled before."""
    often = SimulatedBackend("comm-bound", gpus=1, seed=3, start=T0)
    once = SimulatedBackend("comm-bound", gpus=1, seed=3, start=T0)
    last_often = run(often, [10, 20, 30, 40, 50, 60.25])[-1][0]
    last_once = run(once, [60.25])[0][0]
    assert last_often.energy_joules == last_once.energy_joules
    assert last_often.memory_used_bytes == last_once.memory_used_bytes


def test_default_start_makes_first_sample_cover_interval() -> None:
    backend = SimulatedBackend("training", gpus=1, interval_s=10.0)
    first = backend.sample(T0)[0]
    assert first.interval_s == pytest.approx(10.0)
    assert backend.start == T0 - timedelta(seconds=10)
    assert backend.sample(T0 + timedelta(seconds=4))[0].interval_s == pytest.approx(4.0)


def test_identity_stable_and_distinct() -> None:
    backend = SimulatedBackend("training", gpus=8, start=T0)
    samples = backend.sample(T0 + timedelta(seconds=10))
    assert len({s.uuid for s in samples}) == 8
    assert len({s.pci_bus_id for s in samples}) == 8
    assert all(s.uuid.startswith("GPU-") and s.name == "NVIDIA H200" for s in samples)
    assert [s.gpu_index for s in samples] == list(range(8))
    assert all(s.simulated for s in samples)


# -- scenario signatures --------------------------------------------------------------------


def test_idle() -> None:
    s = window("idle")
    assert s.util_gpu_ratio == 0.0
    assert s.util_gpu_idle_fraction_ratio == 1.0
    assert s.memory_used_bytes < 0.01 * s.memory_total_bytes
    assert s.power_watts < 0.2 * s.power_limit_watts
    assert s.processes == []
    assert s.throttle_reasons == ["gpu_idle"]
    assert s.sm_active_ratio == 0.0


def test_training() -> None:
    s = window("training")
    assert s.util_gpu_ratio > 0.9
    assert s.util_gpu_idle_fraction_ratio == 0.0
    assert s.sm_active_ratio == pytest.approx(0.8, abs=0.05)
    assert s.tensor_active_ratio == pytest.approx(0.5, abs=0.05)
    assert s.memory_used_bytes / s.memory_total_bytes == pytest.approx(0.7, abs=0.02)
    assert s.power_watts > 0.8 * s.power_limit_watts
    assert s.throttle_reasons == []
    assert s.processes is not None and len(s.processes) == 1
    assert s.processes[0].used_memory_bytes == s.memory_used_bytes


def test_input_bound_duty_cycles() -> None:
    s = window("input-bound")
    assert s.util_gpu_idle_fraction_ratio > 0.4
    assert s.util_gpu_ratio < 0.5
    assert s.util_gpu_stddev_ratio > 0.3
    steady = window("training")
    assert steady.util_gpu_stddev_ratio < 0.05


def test_small_batch() -> None:
    s = window("small-batch")
    assert 0.5 < s.util_gpu_ratio < 0.7
    assert s.sm_active_ratio < 0.35
    assert s.sm_occupancy_ratio < 0.15
    assert s.power_watts < 0.4 * s.power_limit_watts
    assert s.memory_used_bytes < 0.15 * s.memory_total_bytes


def test_no_amp() -> None:
    s = window("no-amp")
    assert s.tensor_active_ratio < 0.05
    assert s.sm_active_ratio > 0.7
    assert s.fp32_active_ratio > 0.5


def test_memory_pressure() -> None:
    s = window("memory-pressure")
    assert s.memory_used_bytes > 0.97 * s.memory_total_bytes
    assert s.memory_used_bytes + s.memory_reserved_bytes <= s.memory_total_bytes
    assert s.util_gpu_ratio < 0.3


def test_comm_bound() -> None:
    s = window("comm-bound")
    bandwidth = find_model("NVIDIA H200").nvlink_bytes_per_s
    assert s.sm_active_ratio < 0.4
    assert s.util_gpu_ratio > 0.8  # NCCL kernels keep NVML's "a kernel ran" busy
    assert s.nvlink_tx_bytes_per_s > 0.3 * bandwidth
    assert s.pcie_tx_bytes_per_s > window("training").pcie_tx_bytes_per_s


def test_throttled() -> None:
    s = window("throttled")
    assert s.throttle_reasons == ["hw_thermal_slowdown"]
    assert s.sm_clock_hz < 0.7 * s.sm_clock_max_hz
    assert s.temperature_celsius > 85


def test_power_capped() -> None:
    s = window("power-capped")
    assert s.throttle_reasons == ["sw_power_cap"]
    assert s.power_watts > 0.95 * s.power_limit_watts


def test_xid_then_lost() -> None:
    backend = SimulatedBackend("xid", gpus=1, start=T0)
    before, during, after = (samples[0] for samples in run(backend, [100, 110, 120, 130])[1:])
    assert before.xid_errors == [] and before.state == "ok"
    assert during.xid_errors == [79] and during.state == "ok"
    assert after.state == "lost"
    assert after.util_gpu_ratio is None and after.power_watts is None and after.xid_errors is None


def test_lost() -> None:
    s = window("lost")
    assert s.state == "lost"
    readings = s.model_dump(exclude={"ts", "kind", "gpu_index", "uuid", "name", "pci_bus_id", "state"})
    readings.pop("interval_s")
    assert readings.pop("simulated") is True
    assert all(value is None for value in readings.values()), readings


def test_idle_after_start() -> None:
    backend = SimulatedBackend("idle-after-start", gpus=1, start=T0)
    early, late = (samples[0] for samples in run(backend, [240, 300, 900, 960])[1::2])
    assert early.util_gpu_ratio > 0.9
    assert late.util_gpu_ratio == 0.0
    assert late.processes == []


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_every_scenario_keeps_nvml_semantics(name: str) -> None:
    backend = SimulatedBackend(name, gpus=2, start=T0)
    previous: float | None = None
    for samples in run(backend, [30, 60, 90, 119, 121, 150]):
        for s in samples:
            GpuSample.model_validate(s.model_dump())  # ratios in 0..1, counts >= 0
            if s.state == "lost":
                continue
            assert s.memory_used_bytes + s.memory_reserved_bytes <= s.memory_total_bytes
            assert s.sm_clock_hz <= s.sm_clock_max_hz
            assert s.power_watts <= s.power_limit_watts
        energy = samples[0].energy_joules
        if energy is not None:
            assert previous is None or energy >= previous
            previous = energy


# -- energy, models -------------------------------------------------------------------------


def test_energy_counter_integrates_power() -> None:
    backend = SimulatedBackend("input-bound", gpus=1, start=T0)
    samples = [s[0] for s in run(backend, [10, 20, 30, 45, 60])]
    for prev, cur in itertools.pairwise(samples):
        delta = cur.energy_joules - prev.energy_joules
        assert delta > 0
        # polls are on the grid here, so delta E = mean polled power x interval exactly
        assert delta == pytest.approx(cur.power_watts * cur.interval_s, rel=1e-9)


def test_energy_off_grid_still_close_to_integral() -> None:
    backend = SimulatedBackend("training", gpus=1, start=T0)
    prev, cur = (s[0] for s in run(backend, [10.3, 40.7]))
    assert cur.energy_joules - prev.energy_joules == pytest.approx(cur.power_watts * cur.interval_s, rel=0.02)


def test_energy_before_virtual_zero_is_monotonic() -> None:
    backend = SimulatedBackend("training", gpus=1, start=T0 + timedelta(seconds=100))
    energies = [s[0].energy_joules for s in run(backend, [0, 50, 99.5, 100, 130])]
    assert energies == sorted(energies)
    assert len(set(energies)) == len(energies)


def test_a100_has_no_gpm() -> None:
    s = window("training", model="NVIDIA A100-SXM4-80GB")
    assert s.name == "NVIDIA A100-SXM4-80GB"
    for field in GPM_ACTIVITY:
        assert getattr(s, field) is None, field
    # NVLink without GPM: the real backend reads the NVLink throughput field values
    assert s.nvlink_tx_bytes_per_s is not None and s.nvlink_rx_bytes_per_s is not None
    assert s.util_gpu_ratio > 0.9 and s.pcie_tx_bytes_per_s is not None
    assert s.memory_total_bytes == 81_920 * 1024 * 1024


def test_hopper_models_have_gpm() -> None:
    for name in ("NVIDIA H200", "NVIDIA H100 80GB HBM3"):
        assert window("training", model=name).sm_active_ratio is not None


def test_find_model() -> None:
    assert find_model("h100 80gb").name == "NVIDIA H100 80GB HBM3"
    assert find_model("h100 pcie").nvlink_bytes_per_s == 0  # no NVLink bridge
    assert find_model("NVIDIA H200") is MODELS["NVIDIA H200"]
    with pytest.raises(ValueError, match="known"):
        find_model("NVIDIA")  # ambiguous
    with pytest.raises(ValueError, match="known"):
        find_model("H100")  # the SXM card or the PCIe one
    with pytest.raises(ValueError, match="known"):
        SimulatedBackend(model="GeForce 256")


# -- per-GPU overrides, polls -------------------------------------------------------------------


def test_spec_string_overrides_one_gpu() -> None:
    backend = SimulatedBackend("training,gpu7=idle", gpus=8, start=T0)
    samples = run(backend, [50, 60])[1]
    assert [s.util_gpu_ratio > 0.9 for s in samples] == [True] * 7 + [False]
    assert samples[7].util_gpu_ratio == 0.0


def test_mapping_overrides_with_scenario_objects() -> None:
    custom = Steady(Activity(util_gpu=0.5, memory_used=0.5, power=0.5))
    backend = SimulatedBackend("training", gpus=3, overrides={1: "lost", 2: custom}, start=T0)
    samples = run(backend, [50, 60])[1]
    assert [s.state for s in samples] == ["ok", "lost", "ok"]
    assert samples[2].util_gpu_ratio == pytest.approx(0.5, abs=0.02)


def test_parse_scenario_spec() -> None:
    assert parse_scenario_spec("training, gpu0=xid ,gpu3=idle") == ("training", {0: "xid", 3: "idle"})
    for bad in ("gpu1=idle", "training,idle", "training,foo=idle"):
        with pytest.raises(ValueError):
            parse_scenario_spec(bad)


def test_bad_overrides_rejected() -> None:
    with pytest.raises(ValueError, match="only 2"):
        SimulatedBackend("training,gpu5=idle", gpus=2)
    with pytest.raises(ValueError, match="unknown GPU scenario"):
        SimulatedBackend("training,gpu0=sleepy", gpus=2)


def test_poll_interval_sets_the_number_of_polls() -> None:
    """Duty-cycle statistics come from polls: a 5 s period seen at 1 s vs 0.5 s polls."""
    coarse = window("input-bound", poll_interval_s=1.0)
    fine = window("input-bound", poll_interval_s=0.5)
    assert coarse.util_gpu_idle_fraction_ratio == pytest.approx(0.6)
    assert fine.util_gpu_idle_fraction_ratio == pytest.approx(0.6)
    assert coarse != fine


def test_interval_shorter_than_a_poll_reads_latest_poll() -> None:
    backend = SimulatedBackend("training", gpus=1, start=T0)
    s = run(backend, [10.1, 10.4])[1][0]
    assert s.interval_s == pytest.approx(0.3)
    assert s.util_gpu_ratio > 0.9
    assert s.util_gpu_stddev_ratio is None  # one poll says nothing about spread


def test_a_healthy_card_reports_zero_remaps_or_retirements() -> None:
    """Zeros and False where the real card answers (row remapping on Ampere+, page retirement
    on the V100), None where it does not."""
    for name in ("NVIDIA H200", "NVIDIA A100-SXM4-80GB"):
        s = window("training", model=name)
        assert (s.remapped_rows_correctable, s.remapped_rows_uncorrectable) == (0, 0)
        assert (s.row_remap_pending, s.row_remap_failed) == (False, False)
        assert (s.retired_pages_sbe, s.retired_pages_dbe, s.retired_pages_pending) == (None, None, None)
        assert s.pcie_replay_errors == 0
    v100 = window("training", model="Tesla V100-SXM2-32GB")
    assert (v100.retired_pages_sbe, v100.retired_pages_dbe, v100.retired_pages_pending) == (0, 0, False)
    assert v100.remapped_rows_correctable is None and v100.row_remap_pending is None


def test_a_repair_pending_a_reset_raises_xid_63_and_stays_in_the_memory_health() -> None:
    """'remap': at 3 minutes an uncorrectable error is repaired by a row remap (a page retired on
    a V100) that waits for a reset; the job trains on."""
    backend = SimulatedBackend("remap", gpus=1, start=T0)
    before, during, after = (samples[0] for samples in run(backend, [160, 170, 180, 400])[1:])
    assert before.xid_errors == [] and before.row_remap_pending is False
    assert during.xid_errors == [63] and during.row_remap_pending is True
    assert (after.xid_errors, after.row_remap_pending, after.remapped_rows_uncorrectable) == ([], True, 1)
    assert after.state == "ok" and after.util_gpu_ratio > 0.9 and after.row_remap_failed is False
    v100 = window("remap", at=400.0, model="Tesla V100-SXM2-32GB")
    assert (v100.retired_pages_dbe, v100.retired_pages_pending, v100.row_remap_pending) == (1, True, None)
