"""What NVML really does on this GPU: call latency, GPM coverage, utilization window, recordings.

    .venv/bin/python bench/gpu_probe.py OUTDIR [--record-seconds 20] [--budget-s 290]

Meant for one short run (under 5 minutes) on an NVIDIA H200 (any NVML GPU works). Writes into
OUTDIR, rewriting ``results.json`` after every phase so a run cut short keeps what it measured:

* ``results.json``: the driver/NVML versions and GPUs; per-call NVML latency (median, p99 over
  up to 200 calls or 2 s per call) on GPU 0; the cost of one full ``NvmlBackend.sample()`` of all
  GPUs (wall and CPU); every ``NVML_GPM_METRIC_*`` the card returns over two samples 1 s apart,
  and which fail; the utilization sample period (``nvmlDeviceGetSamples`` timestamps) and, with
  torch, the trailing window (how long utilization stays non-zero after a 50 ms kernel burst);
  NVLink field values per scope; supported event types; MIG mode;
* ``recordings/<workload>.jsonl``: the NVML backend recorded (``RecordingBackend``, 1 s samples)
  while idle and, when torch with CUDA is importable, during an fp32 matmul (TF32 off), a bf16
  matmul, host<->device memcpy, and a stream of tiny kernels (NVML utilization near 100 %, SM
  activity near 0: the case cause rules must not call busy). They replay with
  ``gpuwatch.collectors.recording.ReplayBackend`` as golden inputs;
* ``summary.txt``: the same, for people.

Without an NVIDIA driver it exits with status 2 and says so (and writes ``results.json`` with
the reason). Everything except the GPU calls is tested in ``tests/gpu/test_gpu_probe.py``
against the fake NVML.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pynvml

from gpuwatch.collectors.nvml_backend import ALL_LINKS_SCOPE, NvmlBackend, field_value
from gpuwatch.collectors.recording import RecordingBackend

NO_GPU_EXIT = 2
MAX_CALLS = 200
MAX_SECONDS_PER_CALL = 2.0
_GPM_CHUNK = 64


# ------------------------------------------------------------------------------ statistics


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def latency_summary(seconds: list[float]) -> dict[str, float | int]:
    """Median and p99 in microseconds, and how many calls they come from."""
    if not seconds:
        return {"n": 0}
    return {
        "n": len(seconds),
        "median_us": round(statistics.median(seconds) * 1e6, 2),
        "p99_us": round(percentile(seconds, 99) * 1e6, 2),
        "max_us": round(max(seconds) * 1e6, 2),
    }


def error_name(exc: BaseException) -> str:
    return (
        type(exc).__name__
        if type(exc).__name__ != "NVMLError"
        else f"NVMLError({getattr(exc, 'value', '?')})"
    )


# ------------------------------------------------------------------------------ NVML phases


def time_call(
    fn: Callable[[], Any], *, max_calls: int = MAX_CALLS, max_s: float = MAX_SECONDS_PER_CALL
) -> dict:
    """Call ``fn`` up to ``max_calls`` times or ``max_s`` seconds; latency, or the error it raised."""
    durations: list[float] = []
    started = time.perf_counter()
    for _ in range(max_calls):
        t0 = time.perf_counter()
        try:
            fn()
        except Exception as exc:  # NVMLError_*: the call is not supported here
            return {"error": error_name(exc), **latency_summary(durations)}
        durations.append(time.perf_counter() - t0)
        if time.perf_counter() - started > max_s:
            break
    return latency_summary(durations)


def latency_table(nv: Any, handle: Any) -> dict[str, dict]:
    """Per-call latency of every call the agent makes, on one GPU."""
    since_us = int((time.time() - 10) * 1e6)
    calls: dict[str, Callable[[], Any]] = {
        "nvmlDeviceGetUtilizationRates": lambda: nv.nvmlDeviceGetUtilizationRates(handle),
        "nvmlDeviceGetMemoryInfo_v2": lambda: nv.nvmlDeviceGetMemoryInfo(handle, version=nv.nvmlMemory_v2),
        "nvmlDeviceGetPowerUsage": lambda: nv.nvmlDeviceGetPowerUsage(handle),
        "nvmlDeviceGetTotalEnergyConsumption": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(handle),
        "nvmlDeviceGetClockInfo(SM)": lambda: nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM),
        "nvmlDeviceGetTemperature": lambda: nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU),
        "nvmlDeviceGetCurrentClocksEventReasons": lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(handle),
        "nvmlDeviceGetTotalEccErrors": lambda: nv.nvmlDeviceGetTotalEccErrors(
            handle, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_AGGREGATE_ECC
        ),
        "nvmlDeviceGetPcieThroughput": lambda: nv.nvmlDeviceGetPcieThroughput(
            handle, nv.NVML_PCIE_UTIL_TX_BYTES
        ),
        "nvmlDeviceGetComputeRunningProcesses": lambda: nv.nvmlDeviceGetComputeRunningProcesses(handle),
        "nvmlDeviceGetProcessesUtilizationInfo": lambda: _no_samples_ok(
            nv, lambda: nv.nvmlDeviceGetProcessesUtilizationInfo(handle, since_us)
        ),
        "nvmlDeviceGetFieldValues(nvlink)": lambda: nv.nvmlDeviceGetFieldValues(
            handle,
            [
                (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, ALL_LINKS_SCOPE),
                (nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, ALL_LINKS_SCOPE),
            ],
        ),
        "nvmlDeviceGetMigMode": lambda: nv.nvmlDeviceGetMigMode(handle),
        "nvmlDeviceGetRemappedRows": lambda: nv.nvmlDeviceGetRemappedRows(handle),
        "nvmlDeviceGetRetiredPages(DBE)": lambda: nv.nvmlDeviceGetRetiredPages(
            handle, getattr(nv, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1)
        ),
        "nvmlDeviceGetRetiredPagesPendingStatus": lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(handle),
        "nvmlDeviceGetPcieReplayCounter": lambda: nv.nvmlDeviceGetPcieReplayCounter(handle),
    }
    table = {name: time_call(fn) for name, fn in calls.items()}
    with contextlib.suppress(Exception):
        support = nv.nvmlGpmQueryDeviceSupport(handle)
        if support.isSupportedDevice:
            buffer = nv.nvmlGpmSampleAlloc()
            try:
                table["nvmlGpmSampleGet"] = time_call(lambda: nv.nvmlGpmSampleGet(handle, buffer))
            finally:
                nv.nvmlGpmSampleFree(buffer)
    return table


def _no_samples_ok(nv: Any, fn: Callable[[], Any]) -> Any:
    """The process-utilization call raises NVMLError(0)/NOT_FOUND for "no samples": not a failure."""
    try:
        return fn()
    except nv.NVMLError as exc:
        if getattr(exc, "value", None) in (0, nv.NVML_ERROR_NOT_FOUND):
            return []
        raise


def gpm_metric_names() -> dict[int, str]:
    """Every ``NVML_GPM_METRIC_*`` id the binding knows (``MAX`` aside)."""
    return {
        value: name
        for name, value in vars(pynvml).items()
        if name.startswith("NVML_GPM_METRIC_") and name != "NVML_GPM_METRIC_MAX" and isinstance(value, int)
    }


def probe_gpm(
    nv: Any, handle: Any, spacing_s: float = 1.0, sleep: Callable[[float], None] = time.sleep
) -> dict:
    """Which GPM metrics return on this card, with their values over ``spacing_s``."""
    try:
        support = nv.nvmlGpmQueryDeviceSupport(handle)
    except Exception as exc:
        return {"supported": False, "error": error_name(exc)}
    if not support.isSupportedDevice:
        return {"supported": False}
    buffers = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]
    try:
        nv.nvmlGpmSampleGet(handle, buffers[0])
        sleep(spacing_s)
        nv.nvmlGpmSampleGet(handle, buffers[1])
        values: dict[str, float] = {}
        failed: dict[str, int] = {}
        ids = sorted(gpm_metric_names().items())
        for start in range(0, len(ids), _GPM_CHUNK):
            chunk = ids[start : start + _GPM_CHUNK]
            request = nv.c_nvmlGpmMetricsGet_t()
            request.version = nv.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = len(chunk)
            request.sample1, request.sample2 = buffers
            for i, (metric_id, _) in enumerate(chunk):
                request.metrics[i].metricId = metric_id
            try:
                result = nv.nvmlGpmMetricsGet(request)
            except Exception as exc:
                for _, name in chunk:
                    failed[name] = getattr(exc, "value", -1)
                continue
            for i, (_, name) in enumerate(chunk):
                metric = result.metrics[i]
                if metric.nvmlReturn == nv.NVML_SUCCESS:
                    values[name] = round(float(metric.value), 4)
                else:
                    failed[name] = int(metric.nvmlReturn)
        return {"supported": True, "spacing_s": spacing_s, "values": values, "failed": failed}
    finally:
        for buffer in buffers:
            with contextlib.suppress(Exception):
                nv.nvmlGpmSampleFree(buffer)


def sample_period(timestamps_us: list[int]) -> float | None:
    """Median spacing (s) of NVML's internal utilization samples."""
    stamps = sorted(set(timestamps_us))
    gaps = [(b - a) / 1e6 for a, b in itertools.pairwise(stamps) if b > a]
    return round(statistics.median(gaps), 4) if gaps else None


def probe_util_samples(nv: Any, handle: Any) -> dict:
    """``nvmlDeviceGetSamples(GPU_UTILIZATION)``: how often the driver samples utilization."""
    try:
        _, samples = nv.nvmlDeviceGetSamples(handle, nv.NVML_GPU_UTILIZATION_SAMPLES, 0)
    except Exception as exc:
        return {"error": error_name(exc)}
    stamps = [int(s.timeStamp) for s in samples]
    return {"samples": len(stamps), "sample_period_s": sample_period(stamps)}


def trailing_window(readings: list[tuple[float, int]], burst_end: float) -> float | None:
    """Seconds after ``burst_end`` until utilization reads 0 again: NVML's averaging window."""
    after = [(t, u) for t, u in readings if t >= burst_end]
    for t, util in after:
        if util == 0:
            return round(t - burst_end, 3)
    return None


def probe_nvlink(nv: Any, handle: Any, sleep: Callable[[float], None] = time.sleep) -> dict:
    """NVLink throughput field values: link count, all-links scope and per-link scopes, 1 s apart."""
    out: dict[str, Any] = {}
    try:
        (count,) = nv.nvmlDeviceGetFieldValues(handle, [nv.NVML_FI_DEV_NVLINK_LINK_COUNT])
        out["link_count"] = int(field_value(count)) if count.nvmlReturn == nv.NVML_SUCCESS else None
    except Exception as exc:
        return {"error": error_name(exc)}
    links = out["link_count"] or 0
    scopes = [ALL_LINKS_SCOPE, *range(links)]
    fields = [nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nv.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX]
    request = [(f, scope) for scope in scopes for f in fields]

    def read() -> list[tuple[int, int | None, int]]:
        return [
            (
                int(v.scopeId),
                int(field_value(v)) if v.nvmlReturn == nv.NVML_SUCCESS else None,
                int(v.timestamp),
            )
            for v in nv.nvmlDeviceGetFieldValues(handle, request)
        ]

    first = read()
    sleep(1.0)
    second = read()
    rows = []
    for (field_id, scope), a, b in zip(request, first, second, strict=True):
        rate = None
        if a[1] is not None and b[1] is not None and b[2] > a[2]:
            rate = (b[1] - a[1]) * 1024 / ((b[2] - a[2]) / 1e6)
        rows.append(
            {
                "field": "tx" if field_id == fields[0] else "rx",
                "scope": "all" if scope == ALL_LINKS_SCOPE else scope,
                "kib": b[1],
                "bytes_per_s": rate,
            }
        )
    out["readings"] = rows
    return out


def event_names(mask: int) -> list[str]:
    return sorted(
        name
        for name, bit in vars(pynvml).items()
        if name.startswith("nvmlEventType")
        and isinstance(bit, int)
        and name not in ("nvmlEventTypeAll",)
        and bit
        and mask & bit == bit
    )


def probe_device(nv: Any, handle: Any) -> dict:
    """Identity and capabilities: name, UUID, events, MIG mode; memory health and the PCIe
    replay counter as the card answers them (values, or the NVML error: which are supported)."""
    out: dict[str, Any] = {}
    sbe = getattr(nv, "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS", 0)
    dbe = getattr(nv, "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR", 1)
    for key, fn in (
        ("name", lambda: nv.nvmlDeviceGetName(handle)),
        ("uuid", lambda: nv.nvmlDeviceGetUUID(handle)),
        ("mig_mode", lambda: nv.nvmlDeviceGetMigMode(handle)),
        ("supported_events", lambda: event_names(nv.nvmlDeviceGetSupportedEventTypes(handle))),
        # (corrRows, uncRows, isPending, failureOccurred)
        ("remapped_rows", lambda: list(nv.nvmlDeviceGetRemappedRows(handle))),
        ("retired_pages_sbe", lambda: len(nv.nvmlDeviceGetRetiredPages(handle, sbe))),
        ("retired_pages_dbe", lambda: len(nv.nvmlDeviceGetRetiredPages(handle, dbe))),
        ("retired_pages_pending", lambda: nv.nvmlDeviceGetRetiredPagesPendingStatus(handle)),
        ("pcie_replay_counter", lambda: nv.nvmlDeviceGetPcieReplayCounter(handle)),
    ):
        try:
            value = fn()
            out[key] = value.decode() if isinstance(value, bytes) else value
        except Exception as exc:
            out[key] = {"error": error_name(exc)}
    return out


def backend_cost(nv: Any, samples: int = 20, gap_s: float = 0.25) -> dict:
    """Wall and CPU time of one ``NvmlBackend.poll()`` and one ``sample()`` of every GPU."""
    backend = NvmlBackend(nvml=nv, start_poller=False)
    try:
        polls_wall, polls_cpu, wall, cpu = [], [], [], []
        now = datetime.now(timezone.utc)
        backend.sample(now)
        for k in range(samples):
            w0, c0 = time.perf_counter(), time.process_time()
            backend.poll()
            polls_wall.append(time.perf_counter() - w0)
            polls_cpu.append(time.process_time() - c0)
            time.sleep(gap_s)
            w0, c0 = time.perf_counter(), time.process_time()
            backend.sample(now + timedelta(seconds=k + 1))
            wall.append(time.perf_counter() - w0)
            cpu.append(time.process_time() - c0)
        return {
            "gpus": len(backend._devices),
            "poll_wall": latency_summary(polls_wall),
            "poll_cpu": latency_summary(polls_cpu),
            "sample_wall": latency_summary(wall),
            "sample_cpu": latency_summary(cpu),
        }
    finally:
        backend.close()


# ------------------------------------------------------------------------------ workloads


def load_torch() -> Any | None:
    try:
        import torch  # type: ignore[import-not-found]
    except Exception:
        return None
    return torch if torch.cuda.is_available() else None


def workloads(torch: Any | None) -> dict[str, Callable[[threading.Event], None] | None]:
    """Workload name -> a loop that runs until its event is set (None: just wait)."""
    table: dict[str, Callable[[threading.Event], None] | None] = {"idle": None}
    if torch is None:
        return table

    def matmul(dtype: Any) -> Callable[[threading.Event], None]:
        def run(stop: threading.Event) -> None:
            torch.backends.cuda.matmul.allow_tf32 = False
            a = torch.randn(8192, 8192, device="cuda", dtype=dtype)
            b = torch.randn(8192, 8192, device="cuda", dtype=dtype)
            while not stop.is_set():
                for _ in range(4):
                    a @ b
                torch.cuda.synchronize()

        return run

    def memcpy(stop: threading.Event) -> None:
        host = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, pin_memory=True)
        device = torch.empty_like(host, device="cuda")
        while not stop.is_set():
            device.copy_(host, non_blocking=True)
            host.copy_(device, non_blocking=True)
            torch.cuda.synchronize()

    def small_kernels(stop: threading.Event) -> None:
        x = torch.ones(1024, device="cuda")
        while not stop.is_set():
            for _ in range(1000):
                x.add_(1.0)
            torch.cuda.synchronize()

    table.update(
        {
            "fp32_matmul": matmul(torch.float32),
            "bf16_matmul": matmul(torch.bfloat16),
            "memcpy": memcpy,
            "small_kernels": small_kernels,
        }
    )
    return table


@contextlib.contextmanager
def running(loop: Callable[[threading.Event], None] | None) -> Iterator[list[BaseException]]:
    """Run ``loop`` on a thread for the duration of the block; errors are collected, not raised."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def target() -> None:
        try:
            if loop is not None:
                loop(stop)
        except BaseException as exc:  # reported in results.json, the probe goes on
            errors.append(exc)

    thread = threading.Thread(target=target, name="probe-workload", daemon=True)
    thread.start()
    try:
        yield errors
    finally:
        stop.set()
        thread.join(timeout=30)


def record_workload(
    nv: Any, path: Path, loop: Callable[[threading.Event], None] | None, seconds: float, warmup_s: float = 2.0
) -> dict:
    """Record the NVML backend (1 s poller) once a second while ``loop`` runs."""
    with running(loop) as errors:
        time.sleep(warmup_s)
        backend = RecordingBackend(NvmlBackend(nvml=nv, poll_interval_s=1.0), path)
        try:
            start = time.monotonic()
            for k in range(int(seconds)):
                time.sleep(max(0.0, start + k + 1 - time.monotonic()))
                backend.sample(datetime.now(timezone.utc))
        finally:
            backend.close()
    return {"file": str(path.name), "lines": backend.lines_written, "errors": [repr(e) for e in errors]}


def measure_window(nv: Any, handle: Any, torch: Any) -> dict:
    """Launch ~50 ms of work, poll utilization every 10 ms, see when it falls back to 0."""
    readings: list[tuple[float, int]] = []
    a = torch.randn(4096, 4096, device="cuda")
    torch.cuda.synchronize()
    time.sleep(2.0)  # let utilization settle to 0
    t0 = time.monotonic()
    deadline = t0 + 0.05
    while time.monotonic() < deadline:
        a @ a
        torch.cuda.synchronize()
    burst_end = time.monotonic()
    while time.monotonic() < burst_end + 3.0:
        readings.append((time.monotonic(), int(nv.nvmlDeviceGetUtilizationRates(handle).gpu)))
        time.sleep(0.01)
    peak = max((u for _, u in readings), default=0)
    return {
        "burst_s": round(burst_end - t0, 3),
        "peak_util_pct": peak,
        "window_s": trailing_window(readings, burst_end),
    }


# ------------------------------------------------------------------------------ driver


class Probe:
    """Runs the phases in order, saving after each; skips phases that no longer fit the budget."""

    def __init__(self, outdir: Path, budget_s: float, nv: Any = pynvml) -> None:
        self.outdir = outdir
        self.nv = nv
        self.deadline = time.monotonic() + budget_s
        self.results: dict[str, Any] = {"started_at": datetime.now(timezone.utc).isoformat(), "phases": {}}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def save(self) -> None:
        self.outdir.mkdir(parents=True, exist_ok=True)
        (self.outdir / "results.json").write_text(json.dumps(self.results, indent=2, default=str) + "\n")

    def phase(self, name: str, fn: Callable[[], Any], needs_s: float) -> None:
        if self.left() < needs_s:
            self.results["phases"][name] = {"skipped": f"needs ~{needs_s:g} s, {self.left():.0f} s left"}
        else:
            t0 = time.monotonic()
            try:
                self.results["phases"][name] = fn()
            except Exception as exc:
                self.results["phases"][name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"[probe] {name}: {time.monotonic() - t0:.1f} s", file=sys.stderr)
        self.save()


def no_gpu_reason(nv: Any) -> str | None:
    """Why NVML cannot be used here, or None when it can (NVML stays initialised)."""
    try:
        nv.nvmlInit()
    except Exception as exc:
        return f"NVML cannot start: {exc}"
    try:
        if nv.nvmlDeviceGetCount() == 0:
            nv.nvmlShutdown()
            return "NVML reports no GPUs"
    except Exception as exc:
        nv.nvmlShutdown()
        return f"nvmlDeviceGetCount failed: {exc}"
    return None


def summary_text(results: dict) -> str:
    lines = [f"gpu_probe {results.get('started_at', '')}", json.dumps(results.get("system", {}))]
    phases = results.get("phases", {})
    for name, row in (phases.get("latency") or {}).items():
        if isinstance(row, dict):
            figures = f"median {row.get('median_us')} us, p99 {row.get('p99_us')} us (n={row.get('n')})"
            lines.append(f"{name:45} {row.get('error', figures)}")
    gpm = phases.get("gpm") or {}
    if gpm.get("supported"):
        lines.append(f"GPM: {len(gpm.get('values', {}))} metrics return, {len(gpm.get('failed', {}))} fail")
    for key in ("util_samples", "util_window", "backend_cost", "nvlink", "recordings"):
        if key in phases:
            lines.append(f"{key}: {json.dumps(phases[key], default=str)[:600]}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None, nv: Any = pynvml) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("outdir", type=Path, help="folder for results.json, summary.txt and recordings/")
    ap.add_argument("--record-seconds", type=float, default=20.0, help="length of each workload recording")
    ap.add_argument("--budget-s", type=float, default=290.0, help="stop starting phases after this")
    ap.add_argument("--backend-samples", type=int, default=20, help="NvmlBackend.sample() calls timed")
    ap.add_argument("--warmup-s", type=float, default=2.0, help="workload run time before recording")
    args = ap.parse_args(argv)
    probe = Probe(args.outdir, args.budget_s, nv)
    probe.results["system"] = {"python": platform.python_version(), "host": platform.node()}
    reason = no_gpu_reason(nv)
    if reason is not None:
        probe.results["error"] = reason
        probe.save()
        print(f"gpu_probe: no usable NVIDIA GPU here ({reason}); nothing measured.", file=sys.stderr)
        return NO_GPU_EXIT
    try:
        with contextlib.suppress(Exception):
            probe.results["system"]["driver"] = _text(nv.nvmlSystemGetDriverVersion())
            probe.results["system"]["nvml"] = _text(nv.nvmlSystemGetNVMLVersion())
        count = nv.nvmlDeviceGetCount()
        handle = nv.nvmlDeviceGetHandleByIndex(0)
        probe.results["system"]["gpus"] = count
        probe.phase("device", lambda: probe_device(nv, handle), 1)
        probe.phase("latency", lambda: latency_table(nv, handle), 30)
        probe.phase("gpm", lambda: probe_gpm(nv, handle), 3)
        probe.phase("util_samples", lambda: probe_util_samples(nv, handle), 1)
        probe.phase("nvlink", lambda: probe_nvlink(nv, handle), 2)
        probe.phase("backend_cost", lambda: backend_cost(nv, args.backend_samples), 10)
        torch = load_torch()
        probe.results["system"]["torch"] = None if torch is None else torch.__version__
        if torch is not None:
            probe.phase("util_window", lambda: measure_window(nv, handle, torch), 8)
        recordings: dict[str, Any] = {}
        probe.results["phases"]["recordings"] = recordings
        for name, loop in workloads(torch).items():
            needs = args.record_seconds + 8
            if probe.left() < needs:
                recordings[name] = {"skipped": f"{probe.left():.0f} s left"}
                continue
            path = args.outdir / "recordings" / f"{name}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                recordings[name] = record_workload(nv, path, loop, args.record_seconds, args.warmup_s)
            except Exception as exc:
                recordings[name] = {"error": f"{type(exc).__name__}: {exc}"}
            probe.save()
        if torch is None:
            recordings["note"] = "torch with CUDA not importable: only the idle recording"
    finally:
        probe.results["finished_at"] = datetime.now(timezone.utc).isoformat()
        probe.save()
        (args.outdir / "summary.txt").write_text(summary_text(probe.results))
        with contextlib.suppress(Exception):
            nv.nvmlShutdown()
    print(summary_text(probe.results))
    return 0


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


if __name__ == "__main__":
    sys.exit(main())
