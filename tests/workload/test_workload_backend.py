"""The bridge on hand-made activity streams (no torch needed)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from gpuwatch.collectors.activity_stream import (
    ActivityRecorder,
    StepRecord,
    Stream,
    StreamHeader,
    read_stream,
)
from gpuwatch.collectors.workload_backend import WorkloadDrivenBackend

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
GIB = 1024**3


def header(**kw: object) -> StreamHeader:
    base = {"scenario": "test", "device": "cuda", "mem_total_bytes": 80 * GIB}
    return StreamHeader(**{**base, **kw})  # type: ignore[arg-type]


def steps(
    n: int,
    *,
    wait: float,
    busy: float,
    comm: float = 0.0,
    precision: str = "bf16",
    batch: int = 256,
    gpu: int = 0,
) -> list[StepRecord]:
    out, t = [], 0.0
    for _ in range(n):
        rec = StepRecord(
            t=t,
            wait_s=wait,
            busy_s=busy,
            comm_s=comm,
            precision=precision,
            mem_bytes=20 * GIB,
            batch=batch,
            gpu=gpu,
        )
        out.append(rec)
        t = rec.end
    return out


def one(stream: Stream, seconds: float = 60.0) -> dict:
    backend = WorkloadDrivenBackend(stream, interval_s=seconds, start=T0)
    (sample,) = backend.sample(T0 + timedelta(seconds=seconds))
    assert sample.simulated and sample.state == "ok"
    return sample.model_dump()


def test_busy_stream_reads_as_a_busy_gpu() -> None:
    s = one(Stream(header(), steps(600, wait=0.001, busy=0.099)))
    assert s["util_gpu_ratio"] > 0.9
    assert s["util_gpu_idle_fraction_ratio"] == 0.0
    assert s["tensor_active_ratio"] > 0.4
    assert s["sm_active_ratio"] > 0.8
    assert s["power_watts"] > 0.6 * s["power_limit_watts"]
    assert s["memory_used_bytes"] == pytest.approx(
        20 / 80 * (s["memory_total_bytes"] - s["memory_reserved_bytes"]), rel=0.01
    )
    assert len(s["processes"]) == 1


def test_duty_cycle_shows_as_idle_polls() -> None:
    s = one(Stream(header(), steps(20, wait=2.5, busy=0.5)))
    assert s["util_gpu_idle_fraction_ratio"] > 0.4
    assert s["util_gpu_ratio"] < 0.5
    assert s["util_gpu_stddev_ratio"] > 0.2


def test_fp32_has_no_tensor_activity() -> None:
    s = one(Stream(header(), steps(600, wait=0.0, busy=0.1, precision="fp32")))
    assert s["util_gpu_ratio"] > 0.9
    assert s["tensor_active_ratio"] < 0.05
    assert s["fp32_active_ratio"] > 0.3


def test_small_batch_keeps_sms_and_power_low() -> None:
    s = one(Stream(header(), steps(600, wait=0.0, busy=0.1, batch=4)))
    assert s["util_gpu_ratio"] > 0.9
    assert s["sm_active_ratio"] < 0.5
    assert s["sm_occupancy_ratio"] < 0.2
    assert s["power_watts"] < 0.5 * s["power_limit_watts"]


def test_comm_shows_on_nvlink_per_rank() -> None:
    recs = steps(300, wait=0.0, busy=0.05, comm=0.15, gpu=0) + steps(
        300, wait=0.0, busy=0.05, comm=0.15, gpu=1
    )
    backend = WorkloadDrivenBackend(Stream(header(world_size=2), recs), interval_s=60, start=T0)
    samples = backend.sample(T0 + timedelta(seconds=60))
    assert [s.gpu_index for s in samples] == [0, 1]
    for s in samples:
        assert s.nvlink_tx_bytes_per_s > 100e9
        assert s.sm_active_ratio < 0.5
        assert s.util_gpu_ratio > 0.9


def test_host_steps_never_touch_the_gpu_and_end_drops_the_process() -> None:
    host = [StepRecord(t=i * 0.1, kind="host", busy_s=0.1, batch=64) for i in range(600)]
    s = one(Stream(header(), host))
    assert s["util_gpu_ratio"] == 0.0 and s["processes"] == [] and s["memory_used_bytes"] == 0
    ended = one(Stream(header(), steps(100, wait=0.0, busy=0.1), end_t=10.0), seconds=60.0)
    assert ended["processes"] == [] and ended["memory_used_bytes"] == 0


def test_deterministic_and_follows_a_growing_file(tmp_path) -> None:
    path = tmp_path / "a.jsonl"
    with ActivityRecorder(path, t0=0.0) as rec:
        rec.start(header(wall_time=T0.timestamp()))
        for r in steps(100, wait=0.0, busy=0.1):
            rec.record(r)
        backend = WorkloadDrivenBackend(path, interval_s=10, follow=True)
        first = backend.sample(T0 + timedelta(seconds=10))[0]
        assert first.util_gpu_ratio > 0.9
        again = WorkloadDrivenBackend(read_stream(path), interval_s=10, start=T0).sample(
            T0 + timedelta(seconds=10)
        )
        assert again[0] == first
        # nothing recorded after 10 s yet: the next interval reads idle, then the file grows
        quiet = backend.sample(T0 + timedelta(seconds=20))[0]
        assert quiet.util_gpu_ratio == 0.0
        for r in steps(100, wait=0.0, busy=0.1):
            rec.record(StepRecord(**{**r.to_json(), "t": r.t + 20.0}))
        busy = backend.sample(T0 + timedelta(seconds=30))[0]
        assert busy.util_gpu_ratio > 0.9


def test_torn_last_line_and_appended_runs(tmp_path) -> None:
    path = tmp_path / "a.jsonl"
    with ActivityRecorder(path, t0=0.0) as rec:
        rec.start(header(scenario="first"))
        rec.record(StepRecord(t=0.0, busy_s=1.0))
    with ActivityRecorder(path, t0=0.0) as rec:
        rec.start(header(scenario="second"))
        rec.record(StepRecord(t=0.0, busy_s=2.0))
    with open(path, "a") as handle:
        handle.write('{"kind": "step", "t": 3.0, "bu')
    stream = read_stream(path)
    assert stream.header.scenario == "second"
    assert [r.busy_s for r in stream.records] == [2.0]


def test_bad_records_are_refused() -> None:
    with pytest.raises(ValueError):
        StepRecord(t=0.0, kind="nap")
    with pytest.raises(ValueError):
        StepRecord(t=0.0, precision="tf32")
    with pytest.raises(ValueError):
        StepRecord(t=0.0, busy_s=-1.0)
