"""XID/ECC events: the event thread against the fake's real-blocking event sets, and the reduction."""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pynvml
import pytest

from gpuwatch.collectors.gpu_backend import reduce_xids
from gpuwatch.collectors.nvml_backend import NvmlBackend
from gpuwatch.collectors.nvml_events import XID_DOUBLE_BIT_ECC, XidEventWatcher, handle_address
from gpuwatch.collectors.sim_backend import SimulatedBackend
from tests.gpu.fake_pynvml import CARDS, FakeNvml, NotSupported

NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)
XID = pynvml.nvmlEventTypeXidCriticalError
DBE = pynvml.nvmlEventTypeDoubleBitEccError
SBE = pynvml.nvmlEventTypeSingleBitEccError


def wait_until(predicate, timeout_s: float = 5.0) -> bool:
    pause = threading.Event()
    for _ in range(int(timeout_s / 0.01)):
        if predicate():
            return True
        pause.wait(0.01)
    return predicate()


def test_reduce_xids() -> None:
    assert reduce_xids(None) is None
    assert reduce_xids([]) == []
    assert reduce_xids([79, 13, 79, 48, 13]) == [79, 13, 48]


def test_handle_address_matches_event_device() -> None:
    fake = FakeNvml(["H200"])
    gpu = fake.gpus[0]
    data = pynvml.c_nvmlEventData_t(device=gpu._as_parameter_)
    assert handle_address(gpu) == handle_address(data.device) is not None
    assert handle_address(object()) is None


def test_xid_reaches_next_sample_then_clears() -> None:
    fake = FakeNvml(["H200", "H200"])
    backend = NvmlBackend(nvml=fake, start_poller=False, clock=fake.clock)
    try:
        assert backend.events is not None
        assert fake.calls["nvmlDeviceRegisterEvents"] == 2
        assert fake.raise_event(1, XID, 79) == 1
        assert fake.raise_event(1, XID, 13) == 1
        assert fake.raise_event(1, XID, 79) == 1
        for _ in range(3):
            assert backend.events.wait_once(10)
        assert backend.events.wait_once(10)  # nothing left: a timeout, not an error
        fake.advance(10)
        first = backend.sample(NOW)
        assert [s.xid_errors for s in first] == [[], [79, 13]]
        fake.advance(10)
        assert [s.xid_errors for s in backend.sample(NOW + timedelta(seconds=10))] == [[], []]
    finally:
        backend.close()
    assert all(event_set.freed for event_set in fake.event_sets.values())


def test_double_bit_ecc_is_xid_48_single_bit_only_counted(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml(["A100"])
    backend = NvmlBackend(nvml=fake, start_poller=False, clock=fake.clock)
    try:
        assert backend.events is not None
        fake.raise_event(0, SBE)
        fake.raise_event(0, DBE)
        fake.raise_event(0, XID, XID_DOUBLE_BIT_ECC)  # the driver's own XID for the same fault
        with caplog.at_level(logging.WARNING, logger="gpuwatch.collectors.nvml_events"):
            for _ in range(3):
                backend.events.wait_once(10)
        fake.advance(10)
        assert backend.sample(NOW)[0].xid_errors == [48]
        assert backend.events.single_bit_ecc_events == {0: 1}
        assert len([r for r in caplog.records if "XID 48" in r.getMessage()]) == 2
    finally:
        backend.close()


def test_registers_only_supported_types() -> None:
    fake = FakeNvml(["K80"])  # XID events only
    backend = NvmlBackend(nvml=fake, start_poller=False, clock=fake.clock)
    try:
        (event_set,) = fake.event_sets.values()
        assert list(event_set.registered.values()) == [XID]
        assert fake.raise_event(0, DBE) == 0
        fake.advance(10)
        assert backend.sample(NOW)[0].xid_errors == []
    finally:
        backend.close()


def test_no_event_support_leaves_field_none() -> None:
    fake = FakeNvml(["A100"])
    fake.gpus[0].card = replace(CARDS["A100"], events=0)
    backend = NvmlBackend(nvml=fake, start_poller=False, clock=fake.clock)
    try:
        fake.advance(10)
        assert backend.sample(NOW)[0].xid_errors is None  # not watched: cannot tell
        assert fake.calls["nvmlDeviceRegisterEvents"] == 0
    finally:
        backend.close()


def test_register_refused_leaves_field_none(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml(["A100"])
    fake.gpus[0].card = replace(
        CARDS["A100"], fails={"nvmlDeviceRegisterEvents": pynvml.NVMLError_NoPermission}
    )
    with caplog.at_level(logging.WARNING):
        backend = NvmlBackend(nvml=fake, start_poller=False, clock=fake.clock)
    try:
        fake.advance(10)
        assert backend.sample(NOW)[0].xid_errors is None
        assert any("nvmlDeviceRegisterEvents" in r.getMessage() for r in caplog.records)
    finally:
        backend.close()


def test_supported_types_not_supported_is_unwatched() -> None:
    fake = FakeNvml(["A100"])
    fake.gpus[0].card = replace(CARDS["A100"], fails={"nvmlDeviceGetSupportedEventTypes": NotSupported})
    backend = NvmlBackend(nvml=fake, start_poller=False, clock=fake.clock)
    try:
        fake.advance(10)
        assert backend.sample(NOW)[0].xid_errors is None
    finally:
        backend.close()


def test_watch_events_off() -> None:
    fake = FakeNvml(["H200"])
    backend = NvmlBackend(nvml=fake, start_poller=False, clock=fake.clock, watch_events=False)
    try:
        assert backend.events is None and fake.calls["nvmlEventSetCreate"] == 0
        fake.advance(10)
        assert backend.sample(NOW)[0].xid_errors is None
    finally:
        backend.close()


def test_xid_then_lost_gpu_keeps_the_code() -> None:
    """XID 79 arrives, then the GPU stops answering: the lost sample still says why."""
    fake = FakeNvml(["H200"])
    backend = NvmlBackend(nvml=fake, start_poller=False, clock=fake.clock)
    try:
        assert backend.events is not None
        fake.raise_event(0, XID, 79)
        backend.events.wait_once(10)
        fake.gpus[0].failure = pynvml.NVMLError_GpuIsLost
        fake.advance(10)
        lost = backend.sample(NOW)[0]
        assert (lost.state, lost.xid_errors) == ("lost", [79])
        fake.advance(10)
        assert backend.sample(NOW + timedelta(seconds=10))[0].xid_errors is None  # none new
    finally:
        backend.close()


def test_event_thread_runs_and_stops() -> None:
    fake = FakeNvml(["H200"])
    backend = NvmlBackend(nvml=fake, poll_interval_s=0.05, clock=fake.clock, event_wait_ms=50)
    try:
        assert any(t.name == "gpuwatch-nvml-events" for t in threading.enumerate())
        fake.raise_event(0, XID, 94)
        assert backend.events is not None
        assert wait_until(lambda: backend.events.events_seen == 1)
        fake.advance(1)
        assert backend.sample(NOW)[0].xid_errors == [94]
    finally:
        backend.close()
    assert not any(t.name.startswith("gpuwatch-nvml") for t in threading.enumerate())


def test_wait_errors_do_not_spin(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml(["H200"])
    fake.initialized = True
    watcher = XidEventWatcher(fake, start=False, wait_ms=1)
    (handle,) = fake.event_sets
    fake.event_sets[handle].freed = True  # every wait now fails with InvalidArgument
    with caplog.at_level(logging.WARNING):
        assert watcher.wait_once() is False
        assert watcher.wait_once() is False
    assert len([r for r in caplog.records if "nvmlEventSetWait_v2" in r.getMessage()]) == 1
    watcher.close()  # freeing a freed set is logged at debug, not raised


def test_simulated_xid_goes_through_the_same_reduction() -> None:
    backend = SimulatedBackend("xid", gpus=1, start=NOW)
    samples = [backend.sample(NOW + timedelta(seconds=t))[0] for t in (100, 110, 120, 130)]
    assert [s.xid_errors for s in samples] == [[], [], [79], None]
