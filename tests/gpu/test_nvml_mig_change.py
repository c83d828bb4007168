"""A MIG layout that changes while the agent runs: the NVML backend follows it without a restart.

The fake NVML's card changes mid-run as an admin would change it (``nvidia-smi -mig 1`` and
``mig -cgi``, later ``-mig 0``); the backend must list the new instances, drop the old ones,
read utilization again once the card is whole, and start each re-created instance's GPM over.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest

from gpuwatch.collectors.nvml_backend import MIG_RECHECK_SAMPLES, NvmlBackend
from tests.gpu.fake_pynvml import FakeNvml

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)


class Run:
    def __init__(self, fake: FakeNvml, **kwargs: object) -> None:
        self.fake = fake
        self.backend = NvmlBackend(
            nvml=fake, start_poller=False, clock=fake.clock, watch_events=False, **kwargs
        )  # type: ignore[arg-type]
        self.k = 0

    def sample(self) -> dict[int, object]:
        self.fake.advance(10)
        self.k += 1
        return {s.gpu_index: s for s in self.backend.sample(NOW + timedelta(seconds=10 * self.k))}


def test_mig_switched_on_then_off_is_followed(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml(["H200", "H200"])
    whole, card = fake.gpus
    whole.util_gpu, card.util_gpu = 40, 70
    run = Run(fake, mig_recheck_samples=1000)  # only NVML's hints trigger a recheck here
    try:
        first = run.sample()
        assert sorted(first) == [0, 1] and first[1].util_gpu_ratio == pytest.approx(0.7)
        busy, _idle = card.enable_mig([1, 2])
        busy.busy(60.0)
        with caplog.at_level(logging.INFO, logger="gpuwatch.collectors.nvml_backend"):
            hinted = run.sample()  # utilization turns NotSupported: the hint
            seen = run.sample()
            later = run.sample()
        assert hinted[1].util_gpu_ratio is None
        assert sorted(seen) == [0, 1, 1010, 1011]
        assert seen[1].processes is None and seen[1010].uuid == busy.uuid
        assert seen[1011].card_fraction_ratio == pytest.approx(2 / 7)
        assert later[1010].gr_engine_active_ratio == pytest.approx(0.6)
        assert [m.uuid for m in run.backend.mig_devices()] == [m.uuid for m in card.mig_devices]
        assert any("MIG mode now on" in r.getMessage() for r in caplog.records)

        card.disable_mig()
        card.util_gpu = 30
        failing = run.sample()  # listing an instance fails (InvalidArgument): the hint
        assert sorted(failing) == [0, 1]
        back = run.sample()
        assert sorted(back) == [0, 1] and run.backend.mig_devices() == []
        # NotSupported was learnt in MIG mode; the whole card answers again
        assert back[1].util_gpu_ratio == pytest.approx(0.3) and back[1].processes == []
        assert back[0].util_gpu_ratio == pytest.approx(0.4)
    finally:
        run.backend.close()
    assert not fake.gpm_buffers  # the instances' GPM buffers were freed


def test_a_recheck_every_n_samples_finds_a_change_without_a_hint() -> None:
    fake = FakeNvml(["H200"])
    run = Run(fake, mig_recheck_samples=4)
    try:
        run.sample()
        # MIG on, but the card already refused utilization before, so no NotSupported hint
        run.backend._devices[0].unsupported.add("nvmlDeviceGetUtilizationRates")
        fake.gpus[0].enable_mig([7])
        calls = fake.calls["nvmlDeviceGetMigMode"]
        assert not any(1000 in run.sample() for _ in range(2))  # samples 2 and 3: not asked
        assert fake.calls["nvmlDeviceGetMigMode"] == calls
        assert 1000 in run.sample()  # the run's 4th sample reads the mode again
        assert fake.calls["nvmlDeviceGetMigMode"] == calls + 1
    finally:
        run.backend.close()
    assert MIG_RECHECK_SAMPLES == 30  # 5 minutes at the default 10 s interval


def test_instances_re_created_under_the_same_ids_start_gpm_over() -> None:
    fake = FakeNvml(["H200"])
    card = fake.gpus[0]
    (old,) = card.enable_mig([3])
    old.busy(90.0)
    run = Run(fake)
    try:
        run.sample()
        assert run.sample()[1000].gr_engine_active_ratio == pytest.approx(0.9)
        (new, spare) = card.enable_mig([3, 1])  # destroyed and made again: same GI id, new UUID
        new.busy(10.0)
        first = run.sample()
        assert first[1000].uuid == new.uuid != old.uuid
        assert first[1000].gr_engine_active_ratio is None  # a fresh start, not old-to-new
        assert first[1001].uuid == spare.uuid
        assert run.sample()[1000].gr_engine_active_ratio == pytest.approx(0.1)
        card.enable_mig([1])  # the 1g in slot 1 is gone, its GPM buffers too
        run.sample()
        assert set(run.backend._devices[0].mig_gpm) == {card.mig_devices[0].gpu_instance_id}
    finally:
        run.backend.close()
    assert not fake.gpm_buffers
