"""``gpuwatch validate``: the pieces without torch, then a real run on CPU (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuwatch.collectors.activity_stream import StepRecord, Stream, StreamHeader
from gpuwatch.collectors.gpu import make_backend
from gpuwatch.collectors.gpu_backend import GpuBackendUnavailable
from gpuwatch.collectors.workload_backend import WorkloadDrivenBackend
from gpuwatch.config import GpuBackendKind, GpuConfig
from gpuwatch.workload.validate import (
    EXPECTED,
    CpuTracker,
    JobCpuCollector,
    ScenarioOutcome,
    ValidateReport,
    cpu_demand_seconds,
    parse_scenarios,
    validate_thresholds,
)

from .conftest import require_torch

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)


def test_every_scenario_has_an_expected_cause() -> None:
    from gpuwatch.classify.verdict import Cause
    from gpuwatch.workload.scenarios import SCENARIOS

    assert set(EXPECTED) == set(SCENARIOS)
    assert {cause for cause, _ in EXPECTED.values()} <= {c.value for c in Cause}
    assert EXPECTED["idle-after-start"] == ("idle_allocation", "recent")


def test_thresholds_suit_short_runs() -> None:
    t = validate_thresholds(6)
    assert t.grace_period_s == 0 and t.recent_window_s == 120 and t.min_window_minutes == 2
    assert t.util_low_ratio == validate_thresholds(60).util_low_ratio  # the rest are the defaults


def test_parse_scenarios() -> None:
    assert parse_scenarios(None) == list(EXPECTED)
    assert parse_scenarios("idle, healthy") == ["idle", "healthy"]
    with pytest.raises(ValueError, match="nope"):
        parse_scenarios("idle,nope")


def _stream(scale_busy: float = 0.3, wait: float = 0.7, n: int = 40) -> Stream:
    header = StreamHeader(scenario="t", device="cpu", mem_total_bytes=512 * 1024**2)
    records = [
        StepRecord(t=i * 1.0, wait_s=wait, busy_s=scale_busy, precision="bf16", mem_bytes=10**7, batch=64)
        for i in range(n)
    ]
    return Stream(header, records, end_t=float(n))


def test_time_compression_reads_the_same_duty_cycle() -> None:
    """At k = 30, 10 virtual s cover 1/3 s of stream: the 1 s duty cycle shows over a minute."""
    k = 30.0
    backend = WorkloadDrivenBackend(_stream(), start=T0, time_scale=k, interval_s=10.0)
    samples = [backend.sample(T0 + timedelta(seconds=10 * i))[0] for i in range(1, 37)]
    util = sum(s.util_gpu_ratio for s in samples) / len(samples)
    idle = sum(s.util_gpu_idle_fraction_ratio for s in samples) / len(samples)
    assert 0.2 < util < 0.4  # busy 0.3 of every second
    assert 0.55 < idle < 0.8  # most 1/30 s poll windows fall in the wait
    with pytest.raises(ValueError):
        WorkloadDrivenBackend(_stream(), time_scale=0)


def test_make_backend_workload(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    stream = _stream()
    lines = [json.dumps(stream.header.to_json())] + [json.dumps(r.to_json()) for r in stream.records]
    path.write_text("\n".join(lines) + "\n")
    backend = make_backend(GpuConfig(backend=GpuBackendKind.WORKLOAD, activity_file=path), interval_s=10)
    assert isinstance(backend, WorkloadDrivenBackend) and backend.simulated
    with pytest.raises(GpuBackendUnavailable, match="activity_file"):
        make_backend(GpuConfig(backend=GpuBackendKind.WORKLOAD), interval_s=10)
    with pytest.raises(GpuBackendUnavailable):
        make_backend(
            GpuConfig(backend=GpuBackendKind.WORKLOAD, activity_file=tmp_path / "none"), interval_s=10
        )


def test_cpu_tracker_counts_children() -> None:
    """A parent that sleeps and a child that spins: about one core, all of it the child's."""
    code = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time\\nend = time.time() + 1.5\\n"
        "while time.time() < end: pass'])\n"
        "c.wait()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code])
    t0 = time.time()
    tracker = CpuTracker(proc.pid, lambda: time.time() - t0, period_s=0.05).start()
    proc.wait(timeout=30)
    tracker.stop()
    used = tracker.cpu_at(time.time() - t0) - tracker.cpu_at(0.0)
    assert len(tracker._seen) >= 2
    assert 0.3 < used < 2.5  # ~1 core; less on a loaded machine


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity (Linux)")
def test_cpu_tracker_counts_what_a_shared_core_kept_the_job_waiting_for() -> None:
    """Two spinning processes share one core: each runs at most about half the time, but its
    demand is the whole core, which it would have had in a job's own cpuset."""
    spin = "import time\nend = time.time() + 3.0\nwhile time.time() < end: pass"
    core = {sorted(os.sched_getaffinity(0))[0]}
    job, rival = (subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2))
    try:
        for p in (job, rival):
            os.sched_setaffinity(p.pid, core)
        t0 = time.monotonic()
        tracker = CpuTracker(job.pid, lambda: time.monotonic() - t0, period_s=0.05)
        tracker.poll()
        ran0 = _cpu_seconds(job.pid)
        time.sleep(1.5)
        tracker.poll()
        ran = _cpu_seconds(job.pid) - ran0
        (first_t, first), (last_t, last) = tracker.points[0], tracker.points[-1]
    finally:
        job.kill(), rival.kill(), job.wait(), rival.wait()
    assert cpu_demand_seconds(Path("/proc"), os.getpid()) is not None
    window = last_t - first_t
    assert ran < 0.75 * window  # the rival really took part of the core
    assert last - first > 0.85 * window  # always runnable: the whole core was wanted


def test_job_collector_rate() -> None:
    class Fixed(CpuTracker):
        def __init__(self) -> None:
            self.points = [(0.0, 0.0), (10.0, 15.0)]
            import threading

            self._lock = threading.Lock()

    collector = JobCpuCollector(Fixed(), "j1", 2, lambda now: (now - T0).total_seconds() / 10)
    assert collector.collect(T0 + timedelta(seconds=20)) == []  # the first call starts the rate
    (sample,) = collector.collect(T0 + timedelta(seconds=60))
    assert sample.job_id == "j1" and sample.cpu_allocated_cores == 2
    assert sample.cpu_used_cores == pytest.approx(1.5)


def test_confusion_and_exit_rule() -> None:
    ok = ScenarioOutcome("idle", "idle_allocation", "job", got="idle_allocation")
    miss = ScenarioOutcome("input-bound", "input_bound", "job", got="unknown_low")
    broken = ScenarioOutcome("amp", "healthy", "job", error="RuntimeError: x")
    report = ValidateReport(True, "cpu", 10, 6, {}, [ok, miss, broken])
    assert not report.ok and ValidateReport(True, "cpu", 10, 6, {}, [ok]).ok
    assert report.confusion() == {
        "idle_allocation": {"idle_allocation": 1},
        "input_bound": {"unknown_low": 1},
        "healthy": {"error": 1},
    }
    assert report.as_json()["scenarios"][1]["ok"] is False


# --------------------------------------------------------------------------- the real thing
#: the pairs the issue asks for, plus idle and cpu-only
CPU_SCENARIOS = "healthy,input-bound,fp32,amp,idle,cpu-only"


@pytest.mark.slow
def test_validate_on_cpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    require_torch()
    out = tmp_path / "out"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "gpuwatch", "validate", "--scenarios", CPU_SCENARIOS,
         "--duration", "8", "--format", "json", "--out", str(out)],
        capture_output=True, text=True, timeout=400, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    elapsed = time.monotonic() - started
    report = json.loads(proc.stdout)
    with capsys.disabled():
        for s in report["scenarios"]:
            print(
                f"\n[validate] {s['scenario']:12} expected {s['expected']:18} got {s['got']} "
                f"({s['samples_per_s']} samples/s)",
                end="",
            )
        print(f"\n[validate] {len(report['scenarios'])} scenarios in {elapsed:.0f} s")
    assert report["simulated"] is True
    got = {s["scenario"]: (s["got"], s["error"]) for s in report["scenarios"]}
    assert got == {name: (EXPECTED[name][0], None) for name in CPU_SCENARIOS.split(",")}, proc.stderr[-2000:]
    assert proc.returncode == 0
    for name in CPU_SCENARIOS.split(","):
        assert (out / f"{name}.jsonl").stat().st_size > 0 and (out / f"{name}.json").exists()
    assert (out / "validate.json").exists() and "SIMULATION" in (out / "validate.txt").read_text()
    speeds = {s["scenario"]: s["samples_per_s"] for s in report["scenarios"]}
    assert speeds["healthy"] > speeds["input-bound"]
