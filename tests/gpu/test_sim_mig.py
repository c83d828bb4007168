"""MIG in the simulated backend: a split card is sampled as the NVML backend samples one."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from gpuwatch.collectors.gpu import make_backend
from gpuwatch.collectors.gpu_backend import mig_index
from gpuwatch.collectors.sim_backend import SimMig, SimulatedBackend, parse_mig_spec
from gpuwatch.config import GpuConfig

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)


def _run(backend: SimulatedBackend, cycles: int = 6) -> list:
    out = []
    for k in range(1, cycles + 1):
        out = backend.sample(T0 + timedelta(seconds=10 * k))
    return out


def test_spec() -> None:
    assert parse_mig_spec("") == {}
    assert parse_mig_spec("gpu1=1g:training+1g:idle+2g, gpu3=7g") == {
        1: [SimMig(1, "training"), SimMig(1, "idle"), SimMig(2)],
        3: [SimMig(7)],
    }
    for bad in ("gpu1", "1=1g", "gpu1=1", "gpu1=xg"):
        with pytest.raises(ValueError):
            parse_mig_spec(bad)
    with pytest.raises(ValueError, match="only 2"):
        SimulatedBackend(gpus=2, mig="gpu2=1g")
    with pytest.raises(ValueError, match="slices"):
        SimulatedBackend(gpus=2, mig="gpu1=4g+4g")
    with pytest.raises(ValueError, match="unknown GPU scenario"):
        SimulatedBackend(gpus=2, mig="gpu1=1g:nope")


def test_off_by_default_and_unchanged() -> None:
    plain = _run(SimulatedBackend("training", gpus=2, seed=3))
    assert [s.gpu_index for s in plain] == [0, 1]
    assert all(s.parent_gpu_index is None and s.card_fraction_ratio is None for s in plain)
    assert SimulatedBackend(gpus=2).mig_devices() == []


def test_a_split_card_beside_a_whole_one() -> None:
    backend = SimulatedBackend("training", gpus=2, seed=3, mig="gpu1=1g:training+1g:idle+2g:idle")
    samples = {s.gpu_index: s for s in _run(backend)}
    assert (
        sorted(samples)
        == [0, 1, mig_index(1, 0), mig_index(1, 1), mig_index(1, 2)]
        == [0, 1, 1010, 1011, 1012]
    )
    whole, card = samples[0], samples[1]
    assert whole.util_gpu_ratio and whole.util_gpu_ratio > 0.8 and whole.processes
    # the card in MIG mode: power, temperature, energy; no utilization, GPM or processes
    assert card.util_gpu_ratio is None and card.sm_active_ratio is None and card.processes is None
    assert card.power_watts and card.temperature_celsius and card.energy_joules
    busy, idle, large = samples[1010], samples[1011], samples[1012]
    assert busy.uuid and busy.uuid.startswith("MIG-") and busy.uuid != idle.uuid
    assert (busy.parent_gpu_index, busy.parent_uuid) == (1, card.uuid)
    assert [s.mig_gpu_instance_id for s in (busy, idle, large)] == [1, 2, 3]
    assert [s.card_fraction_ratio for s in (busy, idle, large)] == pytest.approx([1 / 7, 1 / 7, 2 / 7])
    assert busy.util_gpu_ratio is None and busy.gr_engine_active_ratio and busy.gr_engine_active_ratio > 0.8
    assert idle.gr_engine_active_ratio == 0.0 and large.gr_engine_active_ratio == 0.0
    assert busy.sm_active_ratio and busy.sm_active_ratio > 0.5 and busy.power_watts is None
    assert large.memory_total_bytes == pytest.approx(2 * busy.memory_total_bytes, rel=1e-6)
    assert busy.processes and busy.memory_used_bytes and busy.memory_used_bytes <= busy.memory_total_bytes
    assert "MIG 1g." in (busy.name or "") and "MIG 2g." in (large.name or "")
    # the card draws less than the whole card running the same job: 1/7 of it works
    assert card.power_watts < whole.power_watts
    devices = backend.mig_devices()
    assert [(d.gpu_index, d.mig_index, d.uuid) for d in devices] == [
        (1, 0, busy.uuid),
        (1, 1, idle.uuid),
        (1, 2, large.uuid),
    ]


def test_deterministic_and_a100_has_no_activity_signal() -> None:
    spec = "gpu0=3g+3g:idle"
    a = _run(SimulatedBackend("training", gpus=1, seed=9, mig=spec))
    b = _run(SimulatedBackend("training", gpus=1, seed=9, mig=spec))
    assert a == b
    a100 = {s.gpu_index: s for s in _run(SimulatedBackend(gpus=1, model="a100", mig=spec))}
    assert a100[1000].gr_engine_active_ratio is None and a100[1000].sm_active_ratio is None
    assert a100[1000].card_fraction_ratio == pytest.approx(3 / 7)


def test_config_turns_it_on() -> None:
    backend = make_backend(GpuConfig(backend="sim", sim_gpus=2, sim_mig="gpu0=7g"), interval_s=10.0)
    assert isinstance(backend, SimulatedBackend)
    assert [s.gpu_index for s in _run(backend, 1)] == [0, 1, 1000]


def test_a_recorded_split_card_replays_with_its_layout(tmp_path) -> None:
    from gpuwatch.collectors.recording import load_replay, make_recording

    path = tmp_path / "mig.jsonl"
    recorder = make_recording(SimulatedBackend(gpus=2, seed=1, mig="gpu1=1g+2g:idle"), path)
    recorded = _run(recorder, 3)
    recorder.close()
    replay = load_replay(path)
    assert replay.mig_devices() == []
    for k in range(1, 4):
        replayed = replay.sample(T0 + timedelta(seconds=10 * k))
    assert [s.model_copy(update={"ts": r.ts}) for s, r in zip(replayed, recorded, strict=True)] == recorded
    assert [(d.gpu_index, d.mig_index, d.uuid) for d in replay.mig_devices()] == [
        (1, 0, recorded[2].uuid),
        (1, 1, recorded[3].uuid),
    ]
